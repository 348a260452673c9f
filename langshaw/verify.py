"""Verification by exploring the enactments of a protocol (first part).

Explores every way one root enactment can unfold on a shared social state with
instant finalization (a SyncServer whose attempts are serialized), asking the
enactment semantics itself (:class:`SocialState`) what is enabled at each step,
so that what is verified is exactly what agents and the SyncServer enact. It
reports, each with a shortest trace:

* **liveness**: a reachable state from which no continuation completes;
* **dead actions**: actions no reachable state enables;
* **completion clauses** that hold in no reachable state.

Values are abstract: what an agent binds matters only through equality with
other bindings, and every binding of one attribute in one scope must be equal,
so one token per attribute stands for every value (a typed attribute's type
restricts which values exist, not how the enactment unfolds; an optional one is
explored both bound and absent). Keys other than the root get at most
``sub_keys`` values each; the report says the bound used.

Not yet here: the decentralized semantics, batched finalization (concurrent
attempts), safety counterexamples under them, and state-space reductions.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from langshaw.instances import ABSENT, ActionInstance, Enablement
from langshaw.model import LangshawProtocol
from langshaw.semantics import SocialState
from langshaw.types import AttributeType

__all__ = ["Report", "Step", "verify"]

_ROOT = "r"


@dataclass(frozen=True)
class Step:
    """One action of a trace: who performs it, and its bindings (abstract values)."""

    role: str
    action: str
    bindings: tuple[tuple[str, Any], ...]

    def __str__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.bindings)
        return f"{self.role}: {self.action}({shown})"

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "action": self.action, "bindings": dict(self.bindings)}


@dataclass
class Report:
    """What :func:`verify` found. ``live`` is None when the exploration hit its
    state bound before finishing (then nothing is claimed about liveness)."""

    protocol: str
    semantics: str
    states: int
    transitions: int
    sub_keys: int
    complete: bool  # the whole state space was explored
    seconds: float
    live: bool | None = None
    stuck: list[Step] = field(default_factory=list)  # shortest trace to a stuck state
    dead: dict[str, str] = field(default_factory=dict)  # action -> why it is never enabled
    never_hold: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.live) and not self.dead and not self.never_hold

    def to_json(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "semantics": self.semantics,
            "states": self.states,
            "transitions": self.transitions,
            "sub_keys": self.sub_keys,
            "explored_all": self.complete,
            "seconds": round(self.seconds, 4),
            "live": self.live,
            "stuck": [s.to_json() for s in self.stuck],
            "dead": self.dead,
            "never_hold": [list(c) for c in self.never_hold],
        }


def verify(
    protocol: LangshawProtocol,
    *,
    semantics: str = "shared",
    sub_keys: int = 2,
    max_states: int = 200_000,
) -> Report:
    """Explore ``protocol``'s enactments and report (see the module's doc)."""
    if semantics != "shared":
        raise ValueError(f"unknown semantics {semantics!r} (only 'shared' so far)")
    started = time.perf_counter()
    abstract = _abstract(protocol)
    explorer = _Explorer(abstract, sub_keys)
    explorer.run(max_states)
    report = Report(
        protocol=protocol.name,
        semantics=semantics,
        states=len(explorer.parents),
        transitions=explorer.transitions,
        sub_keys=sub_keys,
        complete=explorer.finished,
        seconds=0.0,
    )
    occurred = explorer.occurred
    for name in protocol.actions:
        if name not in occurred:
            report.dead[name] = "no reachable state enables it"
    for clause in protocol.completion:
        if not any(explorer.holds(state, clause) for state in explorer.parents):
            report.never_hold.append(clause)
    if explorer.finished:
        stuck = explorer.stuck()
        report.live = stuck is None
        if stuck is not None:
            report.stuck = explorer.trace(stuck)
    report.seconds = time.perf_counter() - started
    return report


def _abstract(protocol: LangshawProtocol) -> LangshawProtocol:
    """The protocol without its types (optionality kept): abstract values need
    not fit a schema, and types do not change how an enactment unfolds."""
    types = {name: AttributeType(name, None, t.optional) for name, t in protocol.types.items()}
    return replace(protocol, types=types)


State = frozenset[tuple[str, tuple[tuple[str, Any], ...]]]


class _Explorer:
    def __init__(self, protocol: LangshawProtocol, sub_keys: int) -> None:
        self.protocol = protocol
        self.sub_keys = sub_keys
        self.parents: dict[State, tuple[State, Step] | None] = {}
        self.edges: dict[State, list[State]] = {}
        self.occurred: set[str] = set()
        self.transitions = 0
        self.finished = False

    def run(self, max_states: int) -> None:
        start: State = frozenset()
        self.parents[start] = None
        queue = deque([start])
        while queue:
            state = queue.popleft()
            successors = self.edges.setdefault(state, [])
            for step, following in self.successors(state):
                self.transitions += 1
                self.occurred.add(step.action)
                successors.append(following)
                if following not in self.parents:
                    if len(self.parents) >= max_states:
                        return
                    self.parents[following] = (state, step)
                    queue.append(following)
        self.finished = True

    def replay(self, state: State) -> SocialState:
        social = SocialState(self.protocol)
        for _, step in self.trace_pairs(state):
            social.apply([ActionInstance(self.protocol.actions[step.action], dict(step.bindings))])
        return social

    def trace_pairs(self, state: State) -> list[tuple[State, Step]]:
        pairs: list[tuple[State, Step]] = []
        link = self.parents[state]
        while link is not None:
            previous, step = link
            pairs.append((previous, step))
            link = self.parents[previous]
        pairs.reverse()
        return pairs

    def trace(self, state: State) -> list[Step]:
        return [step for _, step in self.trace_pairs(state)]

    def successors(self, state: State) -> Iterable[tuple[Step, State]]:
        social = self.replay(state)
        root = {k: _ROOT for k in self.protocol.root_keys}
        for role in self.protocol.roles:
            if state:
                enabled = social.enabled(role, tuple(root.values()))
            else:
                enabled = social.initiating(role)
            for enablement in enabled:
                for bindings in self._bindings(enablement, social, root):
                    instance = ActionInstance(enablement.action, bindings)
                    if social.check([instance], {role}) is not None:
                        continue
                    step = Step(role, enablement.action.name, tuple(sorted(bindings.items())))
                    yield step, state | {(step.action, step.bindings)}

    def _bindings(
        self, enablement: Enablement, social: SocialState, root: dict[str, Any]
    ) -> Iterable[dict[str, Any]]:
        fixed = {k: v for k, v in enablement.fixed.items() if v is not ABSENT}
        for key in enablement.new_keys:
            if key in root:
                fixed[key] = root[key]
                continue
            enactment = social.enactment(tuple(root.values()))
            used = set(enactment.values_of(key)) if enactment is not None else set()
            fresh = [f"{key}{i}" for i in range(1, self.sub_keys + 1) if f"{key}{i}" not in used]
            if not fresh:
                return  # the bound on sub-scopes is reached
            fixed[key] = fresh[0]
        optional = [a for a in enablement.to_bind if a in self.protocol.optional]
        required = {a: f"<{a}>" for a in enablement.to_bind if a not in self.protocol.optional}
        for mask in range(2 ** len(optional)):
            chosen = {a: f"<{a}>" for i, a in enumerate(optional) if mask & (1 << i)}
            yield {**fixed, **required, **chosen}

    def holds(self, state: State, clause: tuple[str, ...]) -> bool:
        for name, bindings in state:
            if name in clause:
                return True
            if any(k in clause and v is not ABSENT for k, v in bindings):
                return True
        return False

    def is_complete(self, state: State) -> bool:
        return all(self.holds(state, clause) for clause in self.protocol.completion)

    def stuck(self) -> State | None:
        """The first state (in breadth-first order, so with a shortest trace) from
        which no complete state can be reached."""
        reverse: dict[State, list[State]] = {}
        for source, targets in self.edges.items():
            for target in targets:
                reverse.setdefault(target, []).append(source)
        good = {s for s in self.parents if self.is_complete(s)}
        queue = deque(good)
        while queue:
            state = queue.popleft()
            for source in reverse.get(state, ()):
                if source not in good:
                    good.add(source)
                    queue.append(source)
        for state in self.parents:  # insertion order is breadth-first order
            if state not in good:
                return state
        return None



