"""Mandates in the adapter: refused before the attempt leaves the agent.

The server here knows no mandate, so whatever is refused is the adapter's
doing; the server's side is tests/syncserver/test_mandate.py. The counts are
checked afterwards against the log, read back and counted by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import MandateRefused, PeachAdapter
from syncserver.mandate import Mandate
from tests.conftest import LINE_ITEMS, PAYMENT_DATA, SIMPLE_CREATE, load
from tests.harness import Harness

SIMPLE = load("atomic-ucp.lsh")
AGENTS = {"platform": ["Platform"], "business": ["Business"]}
TOTAL = "$[?(@.type == 'total')].amount"


def mandate(**clauses: Any) -> Mandate:
    problems: list[str] = []
    found = Mandate.parse(clauses, [SIMPLE], "mandate", lambda w, m: problems.append(m))
    assert not problems, problems
    return found


@pytest.fixture(params=["local", "http", "peer"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def create(platform: PeachAdapter, quantity: int = 1) -> ActionInstance:
    items = [{**LINE_ITEMS[0], "quantity": quantity}]
    return platform.initiating()[0].bind(**{**SIMPLE_CREATE, "line_items": items})


def mine(platform: PeachAdapter, action: str) -> int:
    return sum(
        1
        for root in platform.enactments()
        for _, instance, who in platform.history(root)
        if who == platform.name and instance.action.name == action
    )


async def test_a_concurrent_burst_is_held_to_the_count(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        platform.mandate = mandate(enactments=3)
        async with platform:
            results = await asyncio.gather(
                *(platform.attempt([create(platform)]) for _ in range(12)),
                return_exceptions=True,
            )
            refused = [r for r in results if isinstance(r, MandateRefused)]
            assert len(refused) == 9, results
            assert all("mandate enactments = 3" in str(r) for r in refused)
            assert platform.counters["refused by mandate"] == 9
            await platform.sync()
            assert mine(platform, "Create") == 3  # the oracle: the log, counted
            # Nothing held back for ever: a refusal leaves no attempt in flight.
            assert platform._guard is not None and platform._guard._flying == []


async def test_values_and_ceiling_are_read_from_the_view(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        platform.mandate = mandate(
            values={"Create.line_items": {"path": "$[*].quantity", "max": 1}},
            ceiling={"attribute": "totals", "path": TOTAL, "max": 5000, "on": ["Complete"]},
        )
        async with platform, business:
            with pytest.raises(MandateRefused, match=r"values\.Create\.line_items: 100 is above"):
                await platform.attempt([create(platform, quantity=100)])
            cheap = (await platform.attempt([create(platform)]))[0].keys
            dear = (await platform.attempt([create(platform)]))[0].keys
            await business.sync()
            for keys, cents in ((cheap, 3800), (dear, 380000)):
                [answer] = [f for f in business.enabled(keys) if f.name == "Created"]
                totals = [{"type": "total", "amount": cents}]
                await business.attempt([answer.bind(id="chk", totals=totals, payment={})])
            await platform.sync()

            def pay(keys: dict[str, Any]) -> ActionInstance:
                [offer] = [f for f in platform.enabled(keys) if f.name == "Complete"]
                return offer.bind(payment_data=PAYMENT_DATA, risk_signals={})

            with pytest.raises(MandateRefused, match=r"ceiling\.max = 5000: .* 380000, above"):
                await platform.attempt([pay(dear)])
            await platform.attempt([pay(cheap)])
            assert mine(platform, "Complete") == 1


async def test_a_ceiling_whose_attribute_was_left_absent_refuses_in_the_agent(kind: str) -> None:
    """docs/llm-agents.md: "no `on` action while the ceiling's attribute is above
    the maximum or not bound at all": the Business left the optional discounts
    absent, so nothing says the payment is within the ceiling on them."""
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        platform.mandate = mandate(
            ceiling={"attribute": "discounts", "path": "$.applied[*].amount", "max": 100,
                     "on": ["Complete"]},
        )
        async with platform, business:
            keys = (await platform.attempt([create(platform)]))[0].keys
            await business.sync()
            [answer] = [f for f in business.enabled(keys) if f.name == "Created"]
            totals = [{"type": "total", "amount": 3800}]
            await business.attempt([answer.bind(id="chk", totals=totals, payment={})])
            await platform.sync()
            [offer] = [f for f in platform.enabled(keys) if f.name == "Complete"]
            with pytest.raises(MandateRefused, match="discounts is not bound where Complete"):
                await platform.attempt([offer.bind(payment_data=PAYMENT_DATA, risk_signals={})])
            assert mine(platform, "Complete") == 0


async def test_an_action_that_needs_approval_asks_the_principal() -> None:
    asked: list[tuple[str, list[str]]] = []
    answers = iter([False, True])

    async def approve(agent: str, instances: Sequence[ActionInstance]) -> bool:
        asked.append((agent, [i.action.name for i in instances]))
        return next(answers)

    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        platform.mandate = mandate(approval=["Create"])
        async with platform:
            with pytest.raises(MandateRefused, match="Create needs a human's approval"):
                await platform.attempt([create(platform)])
            platform.approve = approve
            with pytest.raises(MandateRefused, match="Create was not approved by the principal"):
                await platform.attempt([create(platform)])
            await platform.attempt([create(platform)])
            assert asked == [("platform", ["Create"])] * 2
            assert mine(platform, "Create") == 1

            async def broken(agent: str, instances: Sequence[ActionInstance]) -> bool:
                raise RuntimeError("no terminal")

            platform.approve = broken
            with pytest.raises(MandateRefused, match="could not be approved: RuntimeError"):
                await platform.attempt([create(platform)])


async def test_no_approver_means_no() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = PeachAdapter(
            "platform", SIMPLE, "Platform", h.executor("platform"),
            mandate=mandate(approval=["Create"]),
        )
        h.adapters.append(platform)
        async with platform:
            with pytest.raises(MandateRefused, match="needs a human's approval"):
                await platform.attempt([create(platform)])
            assert mine(platform, "Create") == 0


@pytest.mark.parametrize("kind", ["local", "http"])
async def test_the_mas_mandate_is_kept_by_the_adapter_too(kind: str) -> None:
    """A mandate in the MAS's configuration reaches the agent's adapter, which
    keeps what only it can (approval) and refuses the rest before sending."""
    stated = {"approval": ["Create"], "actions": {"Create": {"per_run": 1}}}
    async with Harness(kind, [SIMPLE], AGENTS, mandates={"platform": stated}) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            assert platform.mandate is not None and platform.mandate.approval == {"Create"}
            with pytest.raises(MandateRefused, match="needs a human's approval"):
                await platform.attempt([create(platform)])

            async def yes(agent: str, instances: Sequence[ActionInstance]) -> bool:
                return True

            platform.approve = yes
            await platform.attempt([create(platform)])
            with pytest.raises(MandateRefused, match=r"actions\.Create\.per_run = 1"):
                await platform.attempt([create(platform)])
            assert platform.counters["refused by mandate"] == 2


async def test_enactments_are_counted_in_every_protocol_of_the_agent(kind: str) -> None:
    """One mandate for an agent playing in two protocols (as LLMAgent gives its
    adapters): ``enactments = 1`` is one enactment in all, not one in each."""
    purchase = load("purchase.lsh")
    agents = {"me": ["SimpleUCP:Platform", "Purchase:Buyer"]}
    async with Harness(kind, [SIMPLE, purchase], agents) as h:
        platform = h.adapter("me", "Platform", "SimpleUCP")
        buyer = h.adapter("me", "Buyer", "Purchase")
        problems: list[str] = []
        bound = Mandate.parse({"enactments": 1}, [SIMPLE, purchase], "mandate",
                              lambda w, m: problems.append(m))
        assert not problems, problems
        platform.mandate = buyer.mandate = bound
        async with platform, buyer:
            await platform.attempt([create(platform)])
            rfq = buyer.initiating()[0].bind(item="pen", budget=5)
            with pytest.raises(MandateRefused, match="mandate enactments = 1"):
                await buyer.attempt([rfq])
            assert buyer.enactments() == []


async def test_a_check_reads_no_history_and_the_counts_match_the_log(kind: str) -> None:
    """The adapter counts what its agent did batch by batch: a check costs the
    same with a long history (it reads none of it), and the counts are the
    log's, counted afresh (the oracle)."""
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        platform.mandate = mandate(enactments=30, actions={"Create": {"per_run": 30}})
        async with platform:
            for _ in range(12):
                await platform.attempt([create(platform)])
            await platform.sync()
            read = 0
            history = platform.history

            def counted(root: Any) -> Any:
                nonlocal read
                read += 1
                return history(root)

            platform.history = counted  # type: ignore[method-assign]
            await platform.attempt([create(platform)])
            assert read == 0, "a check read the agent's history"
            platform.history = history  # type: ignore[method-assign]
            await platform.sync()
            counts = platform._guard.counts  # type: ignore[union-attr]
            assert counts.performed("Create", None) == mine(platform, "Create") == 13
            assert counts.started() == 13
            # A fresh count from the view says the same.
            counts._view = None
            assert counts.performed("Create", None) == 13 and counts.started() == 13
