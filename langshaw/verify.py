"""Verification: explore every enactment of a protocol and say whether it is
live and safe, which actions are dead and which completion clauses never hold,
each fault with a shortest trace that replays through the enactment semantics.

Two semantics (docs/semantics.md, "Verification"):

* ``"shared"``: a shared social state, as on a SyncServer. Attempts are checked
  in some order against everything finalized before them; this covers the
  instant policy and the batched one alike (a batch is checked attempt by
  attempt, so what it accepts is what some order of single attempts accepts).
  Such a state refuses every conflict, so it is always safe.
* ``"decentralized"``: each role acts on what it performed or received;
  instances reach other roles later, in any order. Where an agent does what the
  union of everything performed would have refused (both actions of a nono
  group, an action after its nogo, one attribute bound twice in a scope), the
  protocol is unsafe.

One root enactment is explored. Values are abstract (they matter only through
equality); keys other than the root take at most ``sub_keys`` values each (the
report says which bound was used, and whether an enactment reached it). Two
budgets bound the run, in states and in seconds; past either the verdict is
"unknown". The exploration asks :class:`~langshaw.semantics.SocialState` what
is enabled at each step, so what is verified is what agents and the SyncServer
enact.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langshaw._vmodel import Move, SharedModel, kind
from langshaw._vpeer import PeerModel
from langshaw._vsearch import Search
from langshaw._vtraces import first_violations, stuck_trace
from langshaw.instances import ActionInstance, Violation
from langshaw.model import LangshawProtocol
from langshaw.types import AttributeType

__all__ = ["SEMANTICS", "Conflict", "Progress", "Report", "Step", "verify"]

SEMANTICS = ("shared", "decentralized")

# The default bound on states explored: with the reduction and symmetry, a
# protocol of up to ten actions that fits takes under 5 s (bench/verify.py);
# one that does not is "unknown" in about as long, and --max-states goes further.
MAX_STATES = 60_000

# The default bound on seconds, for a run as a whole (exploring, then tracing).
# States are not time: what one costs grows with the protocol and --sub-keys
# (market at --sub-keys 4 spends 22 s on its 60,000 where a ten-action protocol
# that fits is done in under 5 s), and a raised --max-states may take hours.
# A minute is over ten times what a protocol verified within MAX_STATES takes
# on the benchmarks (bench/verify.py), so by default it rarely decides, and it
# is about as long as someone at a terminal, or a CI job, should wait without
# having chosen to: past it the verdict is "unknown" and the message names
# --max-seconds, which goes further.
MAX_SECONDS = 60.0

# A run that takes longer than PROGRESS_AFTER seconds reports its progress
# (verify(progress=...)) every PROGRESS_EVERY seconds; a quick one says nothing.
PROGRESS_AFTER = 2.0
PROGRESS_EVERY = 1.0

# Seconds the searches for shortest traces may take at least; beyond it, as
# long as the exploration took (so tracing never takes over twice as long).
TRACE_FLOOR = 0.5


@dataclass(frozen=True)
class Progress:
    """How far a long run got: states explored, seconds since it started, and
    whether the exploration is over and the shortest traces are being sought
    (at most until ``deadline`` seconds since the start; None: no limit)."""

    states: int
    seconds: float
    tracing: bool = False
    deadline: float | None = None

    def __str__(self) -> str:
        if not self.tracing:
            return f"{self.states} states explored, {self.seconds:.1f} s"
        limit = "" if self.deadline is None else f" (at most until {self.deadline:.1f} s)"
        return (
            f"all {self.states} states explored in {self.seconds:.1f} s; "
            f"looking for the shortest traces{limit}"
        )


@dataclass(frozen=True)
class Step:
    """One action of a trace: who performs it, its bindings (abstract values:
    ``<a>``, or ``<a by Role>`` when decentralized; ``True`` for a dependency),
    and, when decentralized, which earlier steps the performer had received
    (1-based; its own steps it always knows)."""

    role: str
    action: str
    bindings: tuple[tuple[str, Any], ...]
    received: tuple[int, ...] | None = None

    def __str__(self) -> str:
        shown = ", ".join(k if v is True else f"{k}={v}" for k, v in self.bindings)
        heard = ""
        if self.received is not None:
            heard = " (received " + (
                ", ".join(map(str, self.received)) if self.received else "nothing"
            ) + ")"
        return f"{self.role}{heard}: {self.action}({shown})"

    def instance(self, protocol: LangshawProtocol) -> ActionInstance:
        return ActionInstance(protocol.actions[self.action], dict(self.bindings))

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "role": self.role,
            "action": self.action,
            "bindings": dict(self.bindings),
        }
        if self.received is not None:
            found["received"] = list(self.received)
        return found


@dataclass(frozen=True)
class Conflict:
    """A safety violation: what happened, the rule it breaks (``nono``, ``nogo``,
    ``bound`` for two bindings of one attribute in one scope), the actions and
    attribute involved, and a shortest trace ending with the offending action."""

    rule: str
    message: str
    actions: tuple[str, ...]
    attribute: str | None
    trace: tuple[Step, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "message": self.message,
            "actions": list(self.actions),
            "attribute": self.attribute,
            "trace": [s.to_json() for s in self.trace],
        }


@dataclass
class Report:
    """What :func:`verify` found. The verdicts (``live``, ``safe``, ``dead``,
    ``never_hold``) are None when the exploration hit ``max_states`` or
    ``max_seconds`` before finishing (``ran_out`` says which): then nothing is
    claimed, and ``states`` is how many were explored."""

    protocol: str
    semantics: str
    sub_keys: int
    states: int = 0
    transitions: int = 0
    complete: bool = False  # every state was explored
    seconds: float = 0.0
    trace_seconds: float = 0.0  # of ``seconds``, finding the shortest traces
    # Every trace is a shortest one. False when a search for one ran past its
    # time (as long as the exploration took, at least TRACE_FLOOR seconds): the
    # trace is then the exploration's own, shortened until no move can be
    # dropped. ``verify(shortest=True)`` always waits for shortest ones.
    shortest: bool = True
    live: bool | None = None
    stuck: list[Step] = field(default_factory=list)  # shortest trace to a stuck state
    safe: bool | None = None
    conflicts: list[Conflict] = field(default_factory=list)
    dead: dict[str, str] | None = None  # action -> why
    never_hold: list[tuple[str, ...]] | None = None
    bound_reached: bool = False  # some enactment wanted more than sub_keys values
    reduced: bool = True
    collisions: bool = True  # decentralized: a role may use a key value it has not received
    ran_out: str | None = None  # "max_states" or "max_seconds": what stopped the exploration
    max_seconds: float | None = None  # the budget in seconds this run had

    @property
    def ok(self) -> bool:
        return bool(self.live and self.safe and self.dead == {} and self.never_hold == [])

    @property
    def verdict(self) -> str:
        if not self.complete:
            return "unknown"
        faults = [
            name
            for name, bad in (
                ("not live", not self.live),
                ("unsafe", not self.safe),
                ("dead actions", bool(self.dead)),
                ("clauses never hold", bool(self.never_hold)),
            )
            if bad
        ]
        return ", ".join(faults) or "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "semantics": self.semantics,
            "verdict": self.verdict,
            "sub_keys": self.sub_keys,
            "bound_reached": self.bound_reached,
            "states": self.states,
            "transitions": self.transitions,
            "explored_all": self.complete,
            "ran_out": self.ran_out,
            "reduced": self.reduced,
            "collisions": self.collisions,
            "seconds": round(self.seconds, 4),
            "trace_seconds": round(self.trace_seconds, 4),
            "shortest_traces": self.shortest,
            "live": self.live,
            "stuck": [s.to_json() for s in self.stuck],
            "safe": self.safe,
            "conflicts": [c.to_json() for c in self.conflicts],
            "dead": self.dead,
            "never_hold": None if self.never_hold is None else [list(c) for c in self.never_hold],
        }


def verify(
    protocol: LangshawProtocol,
    *,
    semantics: str = "shared",
    sub_keys: int = 2,
    max_states: int = MAX_STATES,
    max_seconds: float | None = MAX_SECONDS,
    reduce: bool = True,
    collisions: bool = True,
    shortest: bool = False,
    progress: Callable[[Progress], None] | None = None,
) -> Report:
    """Explore ``protocol``'s enactments under ``semantics`` and report.

    ``reduce=False`` explores every order of independent moves, and every state
    rather than one per symmetric set (slower; the verdicts are the same, which
    the tests check). ``collisions=False`` (decentralized) reads sub-key values
    as fresh: a role uses one only if it holds it or nobody used it yet, where
    by default it may use any value of the pool, as if two agents could
    generate the same one. The searches for shortest traces may take as long
    as the exploration did (at least ``TRACE_FLOOR`` seconds) before settling
    for shorter-than-found ones (``Report.shortest``); ``shortest=True``
    waits for them however long they take, within ``max_seconds``.

    ``max_states`` and ``max_seconds`` (None: no limit) bound the run: past
    either, the exploration stops and the report claims nothing (``complete``
    false, ``ran_out`` naming the budget). The default of a minute
    (``MAX_SECONDS``) is there because states are not time: one state costs far
    more in some protocols than in others, and a bound in states alone let a
    run go silent for as long as it liked; a minute is ten times what a protocol
    within the default ``max_states`` takes, and as long as anyone should wait
    for an answer they did not ask to wait for. ``max_seconds`` bounds the whole run:
    past it, a search for a shortest trace settles for a short one, as when it
    runs out of its own time (a verdict already found is kept). The clock is read
    every few hundred steps (``langshaw._vsearch.CHECK_EVERY``), so a run may
    overshoot by a fraction of a second. ``progress`` hears about a run longer
    than ``PROGRESS_AFTER`` seconds, every ``PROGRESS_EVERY`` seconds or so; a
    quick run never calls it."""
    if semantics not in SEMANTICS:
        raise ValueError(f"unknown semantics {semantics!r} (choose from {', '.join(SEMANTICS)})")
    if sub_keys < 1:
        raise ValueError("sub_keys must be at least 1")
    if max_seconds is not None and not max_seconds > 0:  # NaN too
        raise ValueError(f"max_seconds must be a positive number of seconds, not {max_seconds}")
    started = time.perf_counter()
    budget = None if max_seconds is None or math.isinf(max_seconds) else started + max_seconds
    ticker = None if progress is None else _Ticker(started, progress)
    abstract = _abstract(protocol)
    model = (SharedModel if semantics == "shared" else PeerModel)(
        abstract, sub_keys, collisions, symmetry=reduce
    )
    search = Search(model, reduce=reduce, max_states=max_states, deadline=budget, progress=ticker)
    finished = search.explore()
    report = Report(
        protocol.name, semantics, sub_keys, reduced=reduce, collisions=collisions,
        max_seconds=max_seconds,
    )
    report.complete = finished
    if finished:
        report.states = len(search.good)
    elif search.ran_out == "seconds":
        report.states, report.ran_out = search.entered, "max_seconds"
    else:
        report.states, report.ran_out = max_states, "max_states"  # gave up beyond it
    report.transitions = search.transitions
    explored = time.perf_counter()
    deadline = None if shortest else _deadline(started, explored)
    if budget is not None:
        deadline = budget if deadline is None else min(deadline, budget)
    if finished:
        ends = search.ends
        occurred = set().union(*(e.names for e in ends.values()))
        holding = set().union(*(e.clauses for e in ends.values()))
        report.dead = {
            name: "no reachable state enables it"
            for name in protocol.actions
            if name not in occurred
        }
        report.never_hold = [c for i, c in enumerate(protocol.completion) if i not in holding]
        report.bound_reached = model.bound_reached
        stuck = [k for k, e in ends.items() if not (e.complete or e.bad)]
        report.live = not stuck
        if ticker is not None and (stuck or any(e.bad for e in ends.values())):
            ticker.tracing(report.states, deadline)
        if stuck:
            path, exact = stuck_trace(search, stuck, deadline)
            report.stuck = _steps(model, path)
            report.shortest = exact
        report.safe = not any(e.bad for e in ends.values())
        if not report.safe:
            report.conflicts, exact = _conflicts(model, search, deadline)
            report.shortest = report.shortest and exact
    report.seconds = time.perf_counter() - started
    report.trace_seconds = time.perf_counter() - explored
    return report


class _Ticker:
    """Passes progress on from PROGRESS_AFTER seconds, every PROGRESS_EVERY."""

    def __init__(self, started: float, progress: Callable[[Progress], None]) -> None:
        self.started = started
        self.progress = progress
        self.next = started + PROGRESS_AFTER

    def __call__(self, states: int) -> None:
        now = time.perf_counter()
        if now >= self.next:
            self.next = now + PROGRESS_EVERY
            self.progress(Progress(states, now - self.started))

    def tracing(self, states: int, deadline: float | None) -> None:
        """Say the exploration is over, if the run is already a long one."""
        now = time.perf_counter()
        if now >= self.started + PROGRESS_AFTER:
            until = None if deadline is None else deadline - self.started
            self.progress(Progress(states, now - self.started, True, until))


def _deadline(started: float, explored: float) -> float:
    """When the searches for shortest traces give up: tracing may take as long
    as exploring did, and at least TRACE_FLOOR seconds."""
    return explored + max(TRACE_FLOOR, explored - started)


def _abstract(protocol: LangshawProtocol) -> LangshawProtocol:
    """The protocol without its types (optionality kept): abstract values need
    not fit a schema, and types do not change how an enactment unfolds."""
    types = {name: AttributeType(name, None, t.optional) for name, t in protocol.types.items()}
    return replace(protocol, types=types)


def _steps(model: SharedModel | PeerModel, path: Sequence[Move]) -> list[Step]:
    peers = isinstance(model, PeerModel)
    received: dict[str, list[int]] = {r: [] for r in model.protocol.roles}
    position: dict[int, int] = {}  # instance -> its step
    steps: list[Step] = []
    for move in path:
        if move.kind == "get":
            received[move.role].append(position[move.ident])
            continue
        steps.append(
            Step(
                move.role,
                move.instance.name,
                tuple(sorted(move.instance.bindings.items())),
                tuple(sorted(received[move.role])) if peers else None,
            )
        )
        position[move.ident] = len(steps)
    return steps


def _conflicts(
    model: SharedModel | PeerModel, search: Search, deadline: float | None
) -> tuple[list[Conflict], bool]:
    assert isinstance(model, PeerModel)
    wanted = frozenset(model.unsafe)
    found, exact = first_violations(search, wanted, deadline)
    conflicts = []
    for name, path in sorted(
        found.items(), key=lambda kp: (sum(m.kind == "do" for m in kp[1]), len(kp[1]), repr(kp[0]))
    ):
        search.load(path)
        violation = next(v for v in model.violations() if kind(v) == name)
        conflicts.append(_describe(violation, _steps(model, path), model.protocol))
    return conflicts, exact


def _describe(v: Violation, trace: list[Step], protocol: LangshawProtocol) -> Conflict:
    last = trace[-1]
    if v.rule == "nono":
        other = v.attribute or ""
        message = (
            f"'{other}' and '{v.action}' exclude each other (nono), yet both occur: "
            f"{last.role} performs '{v.action}' before it has received '{other}'"
        )
        actions: tuple[str, ...] = tuple(sorted((other, v.action or "")))
        attribute = None
    elif v.rule == "nogo":
        other = v.attribute or ""
        message = (
            f"'{v.action}' occurs after '{other}', though '{other} -/> {v.action}' (nogo): "
            f"{last.role} has not received '{other}'"
        )
        actions, attribute = (other, v.action or ""), None
    elif v.rule == "bound":
        attribute = v.attribute
        binders = " > ".join(protocol.sayso.get(attribute or "", ())) or "nobody"
        message = (
            f"'{attribute}' gets two different values in one scope: {last.role} binds or "
            f"carries one in '{v.action}' without having received the other "
            f"(sayso: {binders})"
        )
        actions, attribute = (v.action or "",), attribute
    else:
        message = f"{v.rule}: {v.message}"
        actions, attribute = (v.action or "",), v.attribute
    return Conflict(v.rule, message, actions, attribute, tuple(trace))
