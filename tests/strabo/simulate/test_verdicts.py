"""The pattern protocols: verified live and safe under both semantics, and the
turn-taking each is meant to express holds in the enactment semantics itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

from langshaw import ActionInstance, LangshawProtocol, SocialState
from langshaw.verify import verify
from tests.conftest import PROTOCOLS

PATTERNS = PROTOCOLS / "patterns"

# protocol -> verdict on a shared state, verdict decentralized
VERDICTS = {
    "sequential.lsh": ("ok", "ok"),
    "broadcast.lsh": ("ok", "ok"),
    "market.lsh": ("ok", "ok"),
    "queue.lsh": ("ok", "ok"),
}


def load(name: str) -> LangshawProtocol:
    return LangshawProtocol.load(PATTERNS / name)


def test_every_pattern_is_in_the_table() -> None:
    assert sorted(p.name for p in PATTERNS.glob("*.lsh")) == sorted(VERDICTS)


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_patterns_keep_their_verdicts(name: str) -> None:
    protocol = load(name)
    for semantics, expected in zip(("shared", "decentralized"), VERDICTS[name], strict=True):
        report = verify(protocol, semantics=semantics)
        assert report.complete and report.live and report.safe, report.to_json()
        assert report.dead == {} and report.never_hold == [], report.to_json()
        assert report.verdict == expected, report.to_json()


def test_strabo_check_verify_passes_on_every_pattern() -> None:
    files = [str(p) for p in sorted(PATTERNS.glob("*.lsh"))]
    result = subprocess.run(
        [sys.executable, "-m", "strabo.cli", "check", "--verify", *files],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("shared: ok") == len(files)
    assert result.stdout.count("decentralized: ok") == len(files)


def names(state: SocialState, role: str, root: tuple[str, ...] = ("s",)) -> set[str]:
    return {e.action.name for e in state.enabled(role, root)}


def act(state: SocialState, protocol: LangshawProtocol, action: str, **bindings: object) -> None:
    deps = {d: True for d in protocol.actions[action].dependencies}
    violation = state.attempt([ActionInstance(protocol.actions[action], {**deps, **bindings})])
    assert violation is None, violation


def test_sequential_turns_follow_the_dependencies() -> None:
    p = load("sequential.lsh")
    state = SocialState(p)
    act(state, p, "Open", session="s", round=1, topic="t")
    assert "Say2" not in names(state, "Second") and "Say3" not in names(state, "Third")
    act(state, p, "Say1", session="s", round=1, topic="t", said1="a")
    assert "Say3" not in names(state, "Third")
    [say2] = [e for e in state.enabled("Second", ("s",)) if e.action.name == "Say2"]
    assert say2.fixed["said1"] == "a"  # Second sees what First said: it is in its action
    bad = ActionInstance(p.actions["Say2"], {"session": "s", "round": 1, "Say1": True,
                                             "topic": "t", "said1": "other", "said2": "b"})
    assert state.check([bad]).rule == "bound"
    # A round never waits for another: round 2 may open while round 1 runs
    # (the chair's policy orders rounds; docs/patterns.md says why).
    assert "Open" in names(state, "Chair")


def test_market_sellers_move_concurrently_and_only_when_called() -> None:
    p = load("market.lsh")
    state = SocialState(p)
    root = ("m",)
    act(state, p, "Open", market="m", round=1, cost=2)
    assert "Price" not in names(state, "Seller", root)  # nobody called yet
    act(state, p, "Call", market="m", round=1, seller="a", Open=True)
    act(state, p, "Call", market="m", round=1, seller="b", Open=True)
    offers = [e for e in state.enabled("Seller", root) if e.action.name == "Price"]
    assert {e.keys.get("seller") for e in offers} == {"a", "b"}  # neither waits for the other
    act(state, p, "Price", market="m", round=1, seller="b", price=4)
    act(state, p, "Price", market="m", round=1, seller="a", price=5)
    act(state, p, "Post", market="m", round=1, prices={"a": 5, "b": 4})
    act(state, p, "Buy", market="m", round=1, buyer="x", prices={"a": 5, "b": 4}, choice="b")
    pass_ = ActionInstance(p.actions["Pass"], {"market": "m", "round": 1, "buyer": "x",
                                               "Post": True, "prices": {"a": 5, "b": 4}})
    assert state.check([pass_]).rule == "nono"  # a buyer buys or passes, not both
    act(state, p, "Clear", market="m", round=1, sales={"a": 0, "b": 1})
    act(state, p, "Settle", market="m", round=1, seller="b", price=4, units=1, revenue=4,
        profit=2, balance=2)
    act(state, p, "Closed", market="m", balances={"b": 2})
    assert state.is_complete(root)
    assert "Open" not in names(state, "Market", root)  # Closed -/> Open


def test_queue_messages_are_independent_scopes() -> None:
    p = load("queue.lsh")
    state = SocialState(p)
    act(state, p, "Start", session="s", subject="x")
    act(state, p, "Send", session="s", queue="q", msg="m1", sender="a", body="1")
    act(state, p, "Send", session="s", queue="q", msg="m2", sender="b", body="2")
    takes = {e.keys["msg"] for e in state.enabled("Member", ("s",)) if e.action.name == "Take"}
    # The protocol lets either be taken first: first in, first out is the
    # owner's discipline over the log order (docs/patterns.md).
    assert takes == {"m1", "m2"}
