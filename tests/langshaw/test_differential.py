"""Differential test: the verifier against a naive explorer of every interleaving.

``tests/langshaw/naive.py`` re-states the enactment rules and explores one root
enactment without any reduction; ``tests/langshaw/randproto.py`` writes small
random protocols. For each, under both semantics, the verifier's report must
agree with the naive exploration on every verdict and on the length of every
shortest counterexample. The two regression protocols at the end check the
oracle itself, whatever the verifier says.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from langshaw import LangshawProtocol
from langshaw.verify import Report, verify
from tests.conftest import FIXTURES
from tests.langshaw.naive import NaiveResult, explore
from tests.langshaw.randproto import generate

SEED = 20240611
COUNT = 200
NAIVE_CAP = 50_000  # states; a protocol beyond it is skipped
SKIP_SHARE = 0.05  # at most this share of explorations may be skipped


@dataclass(frozen=True)
class Verdicts:
    """What both sides are compared on: the same shape from either."""

    live: bool
    safe: bool
    kinds: tuple[tuple[str, tuple[int, int]], ...]  # (kind, shortest (actions, deliveries))
    dead: tuple[str, ...]
    never_hold: tuple[int, ...]
    bound_reached: bool
    stuck_length: int | None

    def differences(self, other: Verdicts) -> list[str]:
        return [
            f"{name}: verifier {getattr(self, name)!r}, naive {getattr(other, name)!r}"
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(other, name)
        ]


def _kind_text(kind: tuple[Any, ...]) -> str:
    if kind[0] == "nono":
        return f"nono {' '.join(sorted(kind[1]))}"
    return " ".join(str(part) for part in kind)


def from_naive(result: NaiveResult) -> Verdicts:
    return Verdicts(
        live=result.live,
        safe=result.safe,
        kinds=tuple(sorted((_kind_text(k), v) for k, v in result.kinds.items())),
        dead=tuple(sorted(result.dead)),
        never_hold=tuple(sorted(result.never_hold)),
        bound_reached=result.bound_reached,
        stuck_length=result.stuck_length,
    )


def from_report(protocol: LangshawProtocol, report: Report) -> Verdicts:
    kinds: dict[str, tuple[int, int]] = {}
    for conflict in report.conflicts:
        if conflict.rule == "nono":
            kind: tuple[Any, ...] = ("nono", frozenset(conflict.actions))
        elif conflict.rule == "nogo":
            kind = ("nogo", *conflict.actions)
        else:
            kind = (conflict.rule, conflict.actions[-1], conflict.attribute)
        # Deliveries: what each role had received by its last step.
        received: dict[str, set[int]] = {}
        for step in conflict.trace:
            received.setdefault(step.role, set()).update(step.received or ())
        length = (len(conflict.trace), sum(len(r) for r in received.values()))
        text = _kind_text(kind)
        kinds[text] = min(kinds.get(text, length), length)
    clauses = [tuple(c) for c in report.never_hold or ()]
    return Verdicts(
        live=bool(report.live),
        safe=bool(report.safe),
        kinds=tuple(sorted(kinds.items())),
        dead=tuple(sorted(report.dead or {})),
        never_hold=tuple(i for i, c in enumerate(protocol.completion) if tuple(c) in clauses),
        bound_reached=bool(report.bound_reached),
        stuck_length=None if report.live else len(report.stuck),
    )


@dataclass
class Outcome:
    """One comparison: ``problem`` is None when both agree, else a message
    holding the protocol's text and both verdicts; ``skipped`` when the naive
    exploration exceeded its cap."""

    semantics: str
    skipped: bool = False
    problem: str | None = None
    categories: tuple[str, ...] = ()


def compare(
    protocol: LangshawProtocol,
    text: str,
    semantics: str,
    sub_keys: int = 2,
    cap: int = NAIVE_CAP,
    collisions: bool = True,
) -> Outcome:
    """Explore ``protocol`` both ways under ``semantics`` and say what differs."""
    naive = explore(protocol, semantics, sub_keys=sub_keys, max_states=cap, collisions=collisions)
    if naive is None:
        return Outcome(semantics, skipped=True)
    # shortest=True: the lengths of the traces are compared, so wait for shortest ones.
    report = verify(
        protocol, semantics=semantics, sub_keys=sub_keys, collisions=collisions, shortest=True
    )
    if not report.complete:
        return Outcome(semantics, problem=f"verifier gave up\n{text}", categories=("incomplete",))
    mine, theirs = from_naive(naive), from_report(protocol, report)
    diffs = theirs.differences(mine)
    if not diffs:
        return Outcome(semantics)
    message = "\n".join(
        [
            f"{semantics}: the verifier and the naive explorer disagree",
            *diffs,
            f"verifier: {theirs}",
            f"naive:    {mine}",
            "protocol:",
            text,
        ]
    )
    return Outcome(semantics, problem=message, categories=tuple(d.split(":")[0] for d in diffs))


# The protocols in PARTS slices, each a test of its own: the suite's workers
# share them out instead of one worker running all 200 (10 s) at the end.
PARTS = 4


def part(k: int) -> list[tuple[str, LangshawProtocol]]:
    found = generate(SEED, COUNT)
    size = -(-len(found) // PARTS)
    return found[k * size : (k + 1) * size]


@pytest.mark.parametrize("k", range(PARTS))
def test_the_verifier_agrees_with_the_naive_explorer(k: int) -> None:
    """Fixed seeds, so a failure is reproducible: the message holds the text."""
    started = time.perf_counter()
    outcomes = []
    for text, protocol in part(k):
        for semantics in ("shared", "decentralized"):
            outcomes.append(compare(protocol, text, semantics))
    skipped = sum(o.skipped for o in outcomes)
    problems = [o.problem for o in outcomes if o.problem]
    print(
        f"{len(outcomes)} explorations, {skipped} skipped (cap {NAIVE_CAP}), "
        f"{len(problems)} disagreements, {time.perf_counter() - started:.1f} s"
    )
    assert skipped <= 2 * SKIP_SHARE * len(outcomes), f"{skipped} of {len(outcomes)} skipped"
    if problems:
        shown = "\n\n".join(problems[:3])
        pytest.fail(f"{len(problems)} disagreements; the first:\n\n{shown}", pytrace=False)


@pytest.mark.parametrize("k", range(PARTS))
def test_without_collisions_the_verifier_agrees_with_the_naive_explorer(k: int) -> None:
    """Key values read as fresh (``collisions=False``), decentralized: the
    protocols of the test above that have a sub-key (more than 50 of 200)."""
    outcomes = [
        compare(protocol, text, "decentralized", collisions=False)
        for text, protocol in part(k)
        if set(protocol.keys) - set(protocol.root_keys)
    ]
    skipped = sum(o.skipped for o in outcomes)
    problems = [o.problem for o in outcomes if o.problem]
    # (skips bunch in some parts: each may skip twice the share the whole may)
    assert len(outcomes) > 50 / PARTS and skipped <= 4 * SKIP_SHARE * len(outcomes)
    if problems:
        shown = "\n\n".join(problems[:3])
        pytest.fail(f"{len(problems)} disagreements; the first:\n\n{shown}", pytrace=False)


# The oracle itself -------------------------------------------------------------------

FAULTY = FIXTURES / "lsh" / "faulty"
NEVER_COMPLETES = (FAULTY / "never-completes.lsh").read_text()
REBIND = (FAULTY / "rebind.lsh").read_text()


@pytest.mark.parametrize("semantics", ["shared", "decentralized"])
def test_the_oracle_finds_a_protocol_that_never_completes(semantics: str) -> None:
    """Done needs Stop and Stop excludes it; Note beyond the pool changes nothing."""
    result = explore(LangshawProtocol.parse(NEVER_COMPLETES), semantics)
    assert result is not None and not result.live
    assert result.dead == {"Done"} and result.never_hold == {0}


def test_the_oracle_finds_a_rebinding_across_scopes() -> None:
    """A's Go inherits B's root y; B, not having received Go, binds y afresh in
    (id, k): one scope, two values."""
    protocol = LangshawProtocol.parse(REBIND)
    shared = explore(protocol, "shared")
    assert shared is not None and shared.safe and shared.live
    result = explore(protocol, "decentralized")
    assert result is not None and not result.safe
    assert set(result.kinds) == {("bound", "Go", "y"), ("bound", "Pay", "y")}
    assert result.kinds[("bound", "Go", "y")] == (4, 2)
