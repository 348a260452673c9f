"""Verification on a shared state (instant finalization): liveness, dead
actions and completion clauses, each with a shortest trace that replays."""

from __future__ import annotations

import pytest

from langshaw import ActionInstance, LangshawProtocol, SocialState
from langshaw.verify import verify
from tests.conftest import FIXTURES, load

FAULTY = FIXTURES / "lsh" / "faulty"


@pytest.mark.parametrize(
    "name",
    ["atomic-ucp.lsh", "purchase.lsh", "logistics.lsh", "contract-net.lsh",
     "flexible-purchase.lsh"],
)
def test_shipped_protocols_are_live_with_no_dead_action(name: str) -> None:
    report = verify(load(name))
    assert report.complete and report.ok, report.to_json()
    assert report.states > 1 and report.sub_keys == 2


def test_a_dead_action_is_reported() -> None:
    report = verify(LangshawProtocol.load(FAULTY / "dead-action.lsh"))
    assert report.dead == {"Undo": "no reachable state enables it"}
    assert report.live is True and not report.ok


def test_a_state_that_cannot_complete_is_reported_with_a_shortest_trace() -> None:
    protocol = LangshawProtocol.load(FAULTY / "not-live.lsh")
    report = verify(protocol)
    assert report.live is False
    assert [(s.role, s.action) for s in report.stuck] == [("A", "Start"), ("B", "No")]
    assert str(report.stuck[1]) == "B: No(Start=True, id='r', why='<why>')"
    # The trace replays through the enactment semantics, and ends where no role
    # can do anything and the enactment is not complete.
    state = SocialState(protocol)
    for step in report.stuck:
        instance = ActionInstance(protocol.action(step.action), dict(step.bindings))
        assert state.attempt([instance], {step.role}) is None
    assert not state.is_complete(("r",))
    assert all(state.enabled(role, ("r",)) == [] for role in protocol.roles)


def test_optional_attributes_are_explored_bound_and_absent() -> None:
    protocol = LangshawProtocol.parse(
        "P\nwho A, B\nwhat id key, Done\ndo\n  A : Ask(id, note?)\n  B : Done(id, Ask, note)\n"
        "sayso\n  A : note\n"
    )
    report = verify(protocol)
    # start, Ask with a note, Ask without, and Done after each
    assert report.states == 5 and report.ok
