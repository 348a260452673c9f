"""Each pattern run end to end by coded agents on an embedded SyncServer, with
what the pattern promises checked on the trace; and the runner's stop
conditions, each brought about on purpose."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

import pytest

from strabo.simulate import Occurrence, Scenario, load_scenario, parse_scenario, simulate
from tests.conftest import PROTOCOLS

PATTERNS = PROTOCOLS / "patterns"


def scenario(name: str) -> Scenario:
    return load_scenario(PATTERNS / f"{name}.toml")


def by_round(trace: list[Occurrence], action: str) -> dict[int, list[Occurrence]]:
    found: dict[int, list[Occurrence]] = defaultdict(list)
    for o in trace:
        if o.action == action:
            found[o["round"]].append(o)
    return found


def one(trace: list[Occurrence], action: str, **where: object) -> Occurrence:
    [found] = [o for o in trace if o.action == action
               and all(o.get(k) == v for k, v in where.items())]
    return found


async def test_sequential_speakers_take_turns_in_order() -> None:
    result = await simulate(scenario("sequential"))
    assert (result.reason, result.rounds_ended) == ("complete", 3), result.detail
    trace = result.trace
    for r in (1, 2, 3):
        opened, s1, s2, s3 = (one(trace, a, round=r) for a in ("Open", "Say1", "Say2", "Say3"))
        assert opened.seq < s1.seq < s2.seq < s3.seq
        assert (s1.performer, s2.performer, s3.performer) == ("ann", "bob", "cat")
        assert s3["said1"] == s1["said1"] and s3["said2"] == s2["said2"]
        if r > 1:  # the chair opened this round once the last one had ended
            assert opened.seq > one(trace, "Say3", round=r - 1).seq
    assert [one(trace, "Open", round=r)["topic"] for r in (1, 2, 3)] == [
        "the budget", "the schedule", "the venue"]
    assert trace[-1].action == "Closed" and trace[-1].performer == "chair"


async def test_sequential_over_http() -> None:
    result = await simulate(scenario("sequential"), http=True)
    assert (result.reason, len(result.trace)) == ("complete", 13), result.detail


async def test_broadcast_every_member_posts_every_round_and_all_see_it() -> None:
    result = await simulate(scenario("broadcast"))
    assert (result.reason, result.rounds_ended) == ("complete", 3), result.detail
    posts = by_round(result.trace, "Post")
    members = {f"member-{i}" for i in (1, 2, 3, 4)}
    for r in (1, 2, 3):
        assert sorted(o["author"] for o in posts[r]) == sorted(members)
        assert {o.performer for o in posts[r]} == members  # each posts as itself
        wrap = one(result.trace, "Wrap", round=r)
        assert wrap.seq > max(o.seq for o in posts[r])
        assert wrap["digest"] == f"4 posts by {', '.join(sorted(members))}"


async def test_queues_are_taken_first_in_first_out() -> None:
    result = await simulate(scenario("queue"))
    assert result.reason == "complete", result.detail
    sends = [o for o in result.trace if o.action == "Send"]
    takes = [o for o in result.trace if o.action == "Take"]
    assert len(sends) == 3 * 2 * 2 and len(takes) == len(sends)
    for queue in ("member-1", "member-2", "member-3"):
        sent = [o["msg"] for o in sends if o["queue"] == queue]
        taken = [o for o in takes if o["queue"] == queue]
        assert [o["msg"] for o in taken] == sent  # in the order the log received them
        assert {o.performer for o in taken} == {queue}  # only the owner takes
    assert result.trace[-1].action == "Closed"


def market_text(**replace: str) -> str:
    text = (PATTERNS / "market.toml").read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


async def test_market_in_turn_calls_each_seller_after_the_last_priced() -> None:
    text = market_text(**{
        "simultaneous = true": "simultaneous = false",
        "limit = 12": "limit = 3",
        "count = 12": "count = 4",
        "step = 1.0, floor = 3.0 }": "step = 1.0, floor = 3.0, react = true }",
    })
    result = await simulate(parse_scenario(text, base=PATTERNS))
    assert (result.reason, result.rounds_ended) == ("complete", 3), result.detail
    for r in (1, 2, 3):
        calls = by_round(result.trace, "Call")[r]
        prices = by_round(result.trace, "Price")[r]
        assert [o["seller"] for o in calls] == ["steady", "cutter", "rival"]
        assert [o["seller"] for o in prices] == ["steady", "cutter", "rival"]
        for call, earlier in zip(calls[1:], prices, strict=False):
            assert call.seq > earlier.seq  # the next seller is called once the last priced
    # Reacting to this round's prices: cutter undercuts steady's 7 at once.
    assert one(result.trace, "Price", round=1, seller="cutter")["price"] == 6.0


async def test_a_round_beyond_the_limit_stops_the_run() -> None:
    base = scenario("sequential")
    agents = tuple(
        dataclasses.replace(a, policy="tests.strabo.simulate.policies:endless_chair")
        if a.role == "Chair" else a
        for a in base.agents
    )
    result = await simulate(dataclasses.replace(base, agents=agents))
    assert result.reason == "rounds" and result.ok
    assert result.detail == "round 4 opened, beyond the limit of 3"
    assert result.rounds_ended == 3


async def test_the_timeout_stops_a_run_that_would_go_on_for_ever() -> None:
    base = scenario("sequential")
    assert base.rounds is not None
    agents = tuple(
        dataclasses.replace(a, policy="tests.strabo.simulate.policies:endless_chair")
        if a.role == "Chair" else a
        for a in base.agents
    )
    endless = dataclasses.replace(
        base, agents=agents, timeout=0.5, rounds=dataclasses.replace(base.rounds, limit=None))
    result = await simulate(endless)
    assert (result.reason, result.detail) == ("timeout", "0.5 seconds passed")
    assert result.rounds_ended > 3 and not result.ok


async def test_the_action_budget_stops_the_run() -> None:
    result = await simulate(dataclasses.replace(scenario("sequential"), max_actions=5))
    assert result.reason == "budget" and result.ok
    assert len(result.trace) >= 5


@pytest.mark.parametrize(
    ("policy", "reason", "detail"),
    [
        ("mute", "stalled", "no agent can or will act after 1 actions"),
        ("broken", "error", "agent ann: its policy failed on Say1: ValueError: no idea"),
        ("overreaching", "error", "agent ann: its policy bound Say1 wrongly"),
    ],
)
async def test_a_run_that_cannot_go_on_says_why(policy: str, reason: str, detail: str) -> None:
    base = scenario("sequential")
    agents = tuple(
        dataclasses.replace(a, policy=f"tests.strabo.simulate.policies:{policy}")
        if a.role == "First" else a
        for a in base.agents
    )
    result = await simulate(dataclasses.replace(base, agents=agents))
    assert result.reason == reason and not result.ok
    assert result.detail.startswith(detail), result.detail
    assert [o.action for o in result.trace] == ["Open"]


def test_the_shipped_scenarios_name_existing_files() -> None:
    for path in sorted(PATTERNS.glob("*.toml")):
        loaded = load_scenario(path)
        assert loaded.protocol_path.parent == PATTERNS
        assert Path(loaded.protocol_path).suffix == ".lsh"
    # The documented real use: LLM sellers (not run here: they need a model).
    llm = load_scenario(PATTERNS / "market-llm.toml")
    assert [(a.name, a.kind) for a in llm.agents if a.role == "Seller"] == [
        ("corner-shop", "llm"), ("discounter", "llm"), ("boutique", "llm")]


async def test_an_llm_agent_that_cannot_reach_its_model_ends_the_run(monkeypatch) -> None:
    for variable in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    base = scenario("sequential")
    agents = tuple(
        dataclasses.replace(a, kind="llm", policy=None, goal="Speak first.")
        if a.role == "First" else a
        for a in base.agents
    )
    result = await simulate(dataclasses.replace(base, agents=agents))
    assert result.reason == "error" and not result.ok
    assert result.detail.startswith("LLM agent ann: LLMError: "), result.detail
    assert result.agents["ann"] == "First, LLM agent"
