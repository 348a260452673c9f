"""The evaluation scenarios end to end, against scripted model answers, for
each provider.

Each scenario runs a real embedded SyncServer, coded counterparts and the LLM
agent; the model is a scripted server (tests/peach/llm/fake.py) on loopback, reached
through the provider's own SDK, speaking Anthropic's Messages API or OpenAI's
Chat Completions. A scenario is judged by the finalized log, replayed through
the protocol semantics.
"""

from __future__ import annotations

import pytest

from samples.llm import scenarios
from tests.peach.llm.fake import PROVIDERS, FakeModel

BOTH = pytest.mark.parametrize("provider", PROVIDERS)


def check(outcome: scenarios.Outcome, model: FakeModel) -> None:
    assert outcome.success, (outcome.detail, model.unanswered)
    assert not model.unanswered
    assert outcome.violations == 0
    assert outcome.report.rejections == 0
    # The happy path: at most one call per action the agent performs, plus one to finish.
    assert outcome.report.llm_calls <= outcome.report.actions + 1, outcome.report


@BOTH
@pytest.mark.parametrize(
    "name",
    ["purchase", "logistics", "concurrent", "flexible-urgent", "flexible-cheapest", "event"],
)
async def test_scenario(model, name):
    model.script(name)
    outcome = await scenarios.SCENARIOS[name].run(client=model.client(), model="test-model")
    check(outcome, model)
    assert len(model.requests) == outcome.report.llm_calls


@BOTH
async def test_ucp_checkout_through_the_proxy(model):
    model.script("ucp")
    outcome = await scenarios.ucp(client=model.client(), model="test-model")
    check(outcome, model)
    names = [e.name for e in outcome.log]
    assert names == ["Create", "Created", "Complete", "Completed"]
    assert outcome.report.actions == 2


async def test_purchase_picks_the_cheapest_quote(model):
    model.script("purchase")
    outcome = await scenarios.purchase(client=model.client(), model="test-model")
    check(outcome, model)
    [accept] = [e for e in outcome.log if e.name == "Accept"]
    assert (accept["chosen"], accept["price"]) == ("cheap-pen", 4)
    assert outcome.report.status == "done"


async def test_flexible_branch_follows_the_goal(model):
    model.script("flexible-urgent")
    urgent = await scenarios.flexible("urgent", client=model.client(), model="test-model")
    names = {e.name for e in urgent.log}
    assert "ExpressDeliveryRequest" in names and "StandardDeliveryRequest" not in names


async def test_event_mid_enactment_starts_a_second_purchase(model):
    model.script("event")
    outcome = await scenarios.event(client=model.client(), model="test-model")
    check(outcome, model)
    bought = {e["item"] for e in outcome.log if e.name == "RFQ"}
    assert bought == {"pen", "notebook"}
    # The second request came while the pen's enactment was open, and was handled
    # by the decision it woke (not by a new agent or a restart).
    [woken] = [d for d in outcome.report.decisions if "external event ev2" in d.reasons]
    calls = {c["tool"]: c["input"] for c in woken.tool_calls}
    assert calls["RFQ"]["for_event"] == "ev2" and calls["RFQ"]["item"] == "notebook"
