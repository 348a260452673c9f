"""The LLM agent's behaviour off the happy path, against scripted model answers
served over loopback HTTP (tests/peach/llm/fake.py): mistakes fed back, budgets,
secrets, prompts, local tools, memory. What differs by provider (API failures,
malformed calls, the wire formats) is in test_providers.py."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from peach.llm import Budget, Hooks, LLMAgent, tool
from samples.llm import scenarios
from syncserver import SyncServer
from tests.conftest import PROTOCOLS
from tests.peach.llm.fake import PROVIDERS

BOTH = pytest.mark.parametrize("provider", PROVIDERS)


# Mistakes -----------------------------------------------------------------------------


@BOTH
async def test_invalid_calls_and_refusals_are_fed_back_and_recovered(model):
    model.script("invalid")
    outcome = await scenarios.purchase(client=model.client(), model="test-model")
    assert outcome.success, (outcome.detail, model.unanswered)
    assert outcome.violations == 0

    # Decision 1: a disabled action and a foreign attribute, both answered as errors
    # in the same conversation, then a correct call.
    retry = model.requests[1]
    errors = {r["content"] for r in retry["results"] if r["error"]}
    assert any("there is no tool 'Accept' now" in e for e in errors)
    assert any("RFQ does not take price: it binds item, budget" in e for e in errors)
    # A value of the wrong type is refused at bind, with where and why, and the
    # model binds it again.
    typed = model.requests[2]
    [error] = [r["content"] for r in typed["results"] if r["error"]]
    assert "RFQ could not be bound: 'RFQ': budget: \"ten dollars\" is not of type" in error
    assert "(schema: /type)" in error
    # Nothing of the invalid calls reached the SyncServer.
    assert [e.name for e in outcome.log][:1] == ["RFQ"]
    assert sum(e.name == "RFQ" for e in outcome.log) == 1

    # The Accept decision: Reject after Accept is refused by the protocol (nono),
    # counted, and fed back; the model then waits.
    assert outcome.report.rejections == 1
    refused = [r for req in model.requests for r in req["results"] if r["error"]]
    assert any("Reject was refused (nono)" in r["content"] for r in refused)
    assert not any(e.name == "Reject" for e in outcome.log)
    assert [d.calls for d in outcome.report.decisions if d.kind == "llm"] == [3, 2, 1]


async def test_tool_calls_invalid_after_retries_stop_with_a_clear_error(model):
    model.script("purchase")
    model.answers = [
        {"reusable": True, "content": [{"type": "tool_use", "name": "Accept", "input": {}}]}
    ]
    outcome = await scenarios.purchase(client=model.client(), model="test-model", max_retries=1)
    assert outcome.report.status == "error"
    assert "still invalid or refused after 2 tries" in outcome.report.reason
    assert "no fallback policy" in outcome.report.reason
    assert len(model.requests) == 2
    assert outcome.log == []


# Budgets -------------------------------------------------------------------------------


async def test_call_budget_stops_the_run_with_a_report(model):
    model.script("purchase")
    budget = Budget(max_calls=2)
    outcome = await scenarios.purchase(client=model.client(), model="test-model", budget=budget)
    assert outcome.report.status == "budget"
    assert outcome.report.reason == "LLM call budget of 2 used up"
    assert outcome.report.llm_calls == 2
    assert "budget" in str(outcome.report) and "2 LLM calls" in str(outcome.report)
    # What was done stays done: the quote was accepted, not confirmed.
    assert [e.name for e in outcome.log if e.performer == "buyer"] == ["RFQ", "Accept"]


async def test_token_budget(model):
    model.script("purchase")  # each recorded answer reports 1050 tokens
    budget = Budget(max_tokens=5000)
    outcome = await scenarios.purchase(client=model.client(), model="test-model", budget=budget)
    assert outcome.report.status == "budget"
    # Stopped before a call that would cross it (test_budget.py has the rest).
    assert outcome.report.reason.startswith("token budget of 5000: the next call is estimated at")
    assert outcome.report.llm_calls == 2
    assert outcome.report.input_tokens + outcome.report.output_tokens <= 5000


def blocking_tool(entered: asyncio.Event):
    @tool("slow_lookup", "Look something up (never answers)", {"type": "object"})
    async def slow_lookup() -> str:
        entered.set()
        await asyncio.Event().wait()  # a service that hangs
        return "never"

    return slow_lookup


HANGING = [
    {"when": {"prompt_has": ["You are in no enactment yet"]},
     "content": [{"type": "tool_use", "name": "slow_lookup", "input": {}}]},
]


async def test_wall_time_budget_ends_a_decision_that_hangs(model):
    model.answers = HANGING
    entered = asyncio.Event()
    outcome = await scenarios.purchase(
        client=model.client(), model="test-model", tools=[blocking_tool(entered)],
        budget=Budget(max_seconds=0.5),
    )
    assert entered.is_set()
    assert outcome.report.status == "budget"
    assert outcome.report.reason == "wall time budget of 0.5 s used up (during decision 1)"


async def test_stop_ends_a_decision_in_progress(model):
    model.answers = HANGING
    entered = asyncio.Event()
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    async with SyncServer.embedded([protocol], {"buyer": ["Buyer"]}) as server:
        adapter = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
        agent = LLMAgent([adapter], "buy", client=model.client(), tools=[blocking_tool(entered)])
        run = asyncio.ensure_future(agent.run())
        await asyncio.wait_for(entered.wait(), 10)
        agent.stop("the user changed their mind")
        report = await asyncio.wait_for(run, 10)
    assert (report.status, report.reason) == ("stopped", "the user changed their mind")


async def test_wait_accepts_tool_style_names_and_rejects_unknown_ones():
    purchase = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    logistics = LangshawProtocol.load(PROTOCOLS / "logistics.lsh")
    server = SyncServer.embedded([purchase, logistics], {"me": ["Buyer", "Merchant"]})
    adapters = [PeachAdapter("me", purchase, "Buyer", LocalExecutor(server)),
                PeachAdapter("me", logistics, "Merchant", LocalExecutor(server))]
    agent = LLMAgent(adapters, "goal", client=object())
    assert agent._wait({"for_actions": ["Purchase_Quote", "Packed"]}) == (
        "waiting for Packed, Quote"
    )
    assert agent._wait({"for_actions": "Deliver"}) == "waiting for Deliver"
    with pytest.raises(Exception, match="no protocol of yours has an action 'Shipped'"):
        agent._wait({"for_actions": ["Shipped"]})


async def test_no_call_when_nothing_is_enabled_and_no_event(model):
    """A Seller with no request to quote on has nothing to decide: it makes no
    call, and stops when its wall-time budget runs out."""
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    async with SyncServer.embedded([protocol], {"seller": ["Seller"]}) as server:
        adapter = PeachAdapter("seller", protocol, "Seller", LocalExecutor(server))
        agent = LLMAgent(
            [adapter], "quote on requests", client=model.client(), budget=Budget(max_seconds=0.3)
        )
        report = await agent.run()
    assert report.status == "budget" and "wall time" in report.reason
    assert model.requests == []
    assert report.decisions == []


async def test_an_event_wakes_an_idle_agent(model):
    model.answers = [
        {
            "when": {"prompt_has": ["[ev1]", "nothing to sell"], "has": ["dismiss_event"]},
            "content": [
                {"type": "tool_use", "name": "dismiss_event", "input": {"event_id": "ev1"}},
                {"type": "tool_use", "name": "done", "input": {"summary": "nothing to do"}},
            ],
        }
    ]
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    async with SyncServer.embedded([protocol], {"seller": ["Seller"]}) as server:
        adapter = PeachAdapter("seller", protocol, "Seller", LocalExecutor(server))
        agent = LLMAgent([adapter], "quote on requests", client=model.client())
        event_id = await agent.inject("nothing to sell today")
        report = await agent.run()
    assert event_id == "ev1"
    assert report.status == "done", model.unanswered
    assert len(model.requests) == 1


# Secrets -------------------------------------------------------------------------------


@BOTH
async def test_hook_credential_never_reaches_the_model_or_the_logs(model, tmp_path, caplog):
    """The payment credential is bound by a hook: the merchant gets it (the order
    is placed), the model, the transcript and the logs never do."""
    model.script("ucp")
    token = scenarios.payment_data()["credential"]["token"]
    caplog.set_level(logging.DEBUG)
    transcript = tmp_path / "run.json"
    seen: list[dict] = []
    hooks = Hooks()

    @hooks.after("Complete")
    def audit(instance, error):
        paid = instance is not None and "payment_data" in instance.bindings
        seen.append({"error": error, "paid": paid})

    outcome = await scenarios.ucp(
        client=model.client(), model="test-model", hooks=hooks, transcript=transcript
    )
    assert outcome.success, (outcome.detail, model.unanswered)
    # The merchant got the credential: the Complete instance carries it.
    [complete] = [e for e in outcome.log if e.name == "Complete"]
    assert complete["payment_data"]["credential"]["token"] == token
    assert seen == [{"error": None, "paid": True}]
    # The model never saw it, nor the payment_data attribute it is part of.
    assert model.raw, "the model was called"
    for body in model.raw:
        assert token.encode() not in body
        assert b"instr_1" not in body
    complete_tool = next(
        t for r in model.requests for t in r["tools"] if t["name"] == "Complete"
    )
    assert "payment_data" not in complete_tool["input_schema"]["properties"]
    # Nor the transcript, nor the log.
    assert token not in transcript.read_text()
    assert token not in caplog.text
    assert any(d.kind == "hook" for d in outcome.report.decisions)
    hook_records = [d for d in outcome.report.decisions if d.kind == "hook"]
    assert hook_records[0].outcomes == ["hooks set payment_data (values not shown)"]


async def test_secret_attributes_are_redacted_by_name(model):
    model.script("purchase")
    outcome = await scenarios.purchase(
        client=model.client(), model="test-model", secrets=["address"]
    )
    assert outcome.success
    # The address is bound by the model in Accept (decision 2): a value the model
    # wrote is no principal's secret (the goal, which holds it, stays readable),
    # but where it is bound to the secret attribute it is shown as [secret].
    assert b"[secret]" in model.raw[2]
    assert all(b"Raleigh" in body for body in model.raw)


async def test_values_set_by_hooks_are_secret_even_when_not_declared(model, caplog):
    model.script("purchase")
    caplog.set_level(logging.DEBUG)
    hooks = Hooks()

    @hooks.before("Accept")
    def vault_address(bindings):
        return {**bindings, "address": "VAULT-ADDRESS-4242"}

    outcome = await scenarios.purchase(client=model.client(), model="test-model", hooks=hooks)
    assert outcome.success, (outcome.detail, model.unanswered)
    [accept] = [e for e in outcome.log if e.name == "Accept"]
    assert accept["address"] == "VAULT-ADDRESS-4242"
    assert all(b"VAULT-ADDRESS-4242" not in body for body in model.raw)
    assert "VAULT-ADDRESS-4242" not in caplog.text


async def test_a_failing_before_hook_is_reported_without_its_message(model):
    model.script("purchase")
    hooks = Hooks()

    @hooks.before("Accept")
    def broken(bindings):
        raise RuntimeError("vault said: token tok_SECRET_99 expired")

    outcome = await scenarios.purchase(client=model.client(), model="test-model", hooks=hooks,
                                       max_retries=0, budget=Budget(max_calls=3))
    bodies = b"".join(model.raw)
    assert b"a before hook failed (RuntimeError)" in bodies or any(
        "a before hook failed (RuntimeError)" in o
        for d in outcome.report.decisions for o in d.outcomes
    )
    assert b"tok_SECRET_99" not in bodies
    assert not any(e.name == "Accept" for e in outcome.log)


# Prompts -------------------------------------------------------------------------------


async def test_two_protocol_prompt_holds_both_and_nothing_else(model):
    model.script("concurrent")
    outcome = await scenarios.concurrent(client=model.client(), model="test-model")
    assert outcome.success, (outcome.detail, model.unanswered)
    system = model.requests[0]["system"]
    assert "Protocol Purchase: you play Buyer." in system
    assert "Protocol Logistics: you play Merchant." in system
    others = {LangshawProtocol.load(p).name for p in PROTOCOLS.glob("*.lsh")} - {
        "Purchase",
        "Logistics",
    }
    assert others  # the other shipped protocols exist, and none is shown
    for name in others:
        assert f"Protocol {name}" not in system
        assert name not in system
    # Doc comments reach the model.
    assert "Ask for a shipping label for an order going to an address." in system
    # Every request gets the same system prompt (written once per agent).
    assert {r["system"] for r in model.requests} == {system}
    tools = {t["name"] for r in model.requests for t in r["tools"]}
    assert all(
        t.startswith(("Purchase_", "Logistics_")) or t in ("wait", "done", "memory")
        for t in tools
    ), tools


async def test_tool_schema_is_what_the_role_binds(model):
    model.script("purchase")
    await scenarios.purchase(client=model.client(), model="test-model")
    accept = next(t for r in model.requests for t in r["tools"] if t["name"] == "Accept")
    schema = accept["input_schema"]
    assert schema["required"] == ["chosen", "price", "address"]
    assert set(schema["properties"]) == {"chosen", "price", "address"}
    # The protocol's types reach the model; an untyped attribute takes any value.
    assert schema["properties"]["price"]["type"] == "number"
    assert schema["properties"]["address"]["type"] == "string"
    assert "type" not in schema["properties"]["chosen"]
    rfq = next(t for r in model.requests for t in r["tools"] if t["name"] == "RFQ")
    assert rfq["input_schema"]["properties"]["budget"] == {
        "type": "number", "description": "budget (attribute of RFQ)"}
    assert schema["additionalProperties"] is False
    assert "Accept one quote" in accept["description"]


async def quoted_enactments(server, protocol, count: int, item_length: int = 80,
                            name: str = "buyer"):
    """``count`` purchases by ``name``, each quoted by 'cheap': Accept and Reject
    are then enabled for the buyer in every one."""
    buyer = PeachAdapter(name, protocol, "Buyer", LocalExecutor(server))
    seller = PeachAdapter("cheap", protocol, "Seller", LocalExecutor(server))
    async with buyer, seller:
        for n in range(count):
            [rfq] = buyer.initiating()
            [sent] = await buyer.attempt([rfq.bind(item=f"item {n} " + "x" * item_length,
                                                   budget=n)])
            await seller.sync()
            [quote] = seller.enabled(sent.keys)
            await seller.attempt([quote.bind(price=n)])
        await buyer.sync()
    return buyer


async def test_prompt_size_is_bounded_and_keeps_every_offer():
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    agents = {"buyer": ["Buyer"], "cheap": ["Seller"]}
    async with SyncServer.embedded([protocol], agents) as server:
        buyer = await quoted_enactments(server, protocol, 20)
        agent = LLMAgent([buyer], "buy things", client=object(), prompt_limit=4000)
        offers = agent.offers()
        prompt = agent.prompt(["test"])
    assert len(offers) == 41  # Accept and Reject in 20 enactments, and RFQ
    assert len(prompt) <= 4000
    assert "more not shown" in prompt or "earlier actions not shown" in prompt
    assert prompt.startswith("Decision 1. Why now: test.")
    assert prompt.endswith("goal is achieved).")
    for offer in offers:  # what the agent may do is never cut
        assert offer.tool in prompt, offer.tool


async def test_tools_are_capped_and_new_enactments_stay_offered():
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    agents = {"buyer": ["Buyer"], "cheap": ["Seller"]}
    async with SyncServer.embedded([protocol], agents) as server:
        buyer = await quoted_enactments(server, protocol, 12, item_length=0)
        agent = LLMAgent([buyer], "buy things", client=object(), max_tools=9)
        offers = agent.offers()
    assert len(offers) == 9
    assert offers[-1].feasible.name == "RFQ" and offers[-1].label == "new"


async def test_enactments_of_another_agent_in_the_same_role_are_not_offered():
    """Another buyer's purchase is its own; but a seller may always open a quote
    of its own where a competitor has quoted."""
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    agents = {"buyer": ["Buyer"], "other": ["Buyer"], "cheap": ["Seller"], "dear": ["Seller"]}
    async with SyncServer.embedded([protocol], agents) as server:
        await quoted_enactments(server, protocol, 1, name="other")
        mine = await quoted_enactments(server, protocol, 1, name="buyer")
        dear = PeachAdapter("dear", protocol, "Seller", LocalExecutor(server))
        async with mine, dear:
            own = {
                root[0] for root in mine.enactments()
                if mine.history(root)[0][2] == "buyer"
            }
            buyer_offers = LLMAgent([mine], "buy", client=object()).offers()
            seller_offers = LLMAgent([dear], "sell", client=object()).offers()
    accepts = [o.feasible.keys["ID"] for o in buyer_offers if o.feasible.name == "Accept"]
    assert len(own) == 1 and accepts == list(own)  # not the other buyer's purchase
    # 'dear' may quote in both purchases, though 'cheap' quoted in each.
    assert sum(o.feasible.name == "Quote" for o in seller_offers) == 2


# Local tools and memory ------------------------------------------------------------------


async def test_local_tool_answers_within_the_decision_and_memory_persists(model):
    model.script("tools")
    calls: list[dict] = []

    @tool(
        "lookup_budget",
        "The most the user will spend on an item",
        {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    )
    def lookup_budget(item: str) -> dict:
        calls.append({"item": item})
        return {"budget": 10, "item": item}

    outcome = await scenarios.purchase(
        client=model.client(), model="test-model", tools=[lookup_budget]
    )
    assert outcome.success, (outcome.detail, model.unanswered)
    assert calls == [{"item": "pen"}]
    first = outcome.report.decisions[0]
    assert first.calls == 2  # the tool's answer came back in the same decision
    assert [c["tool"] for c in first.tool_calls] == ["memory", "lookup_budget", "RFQ", "wait"]
    spec = next(t for t in model.requests[0]["tools"] if t["name"] == "lookup_budget")
    assert spec["input_schema"]["required"] == ["item"]


# Construction and transcript ---------------------------------------------------------------


def test_construction_errors_are_clear():
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    server = SyncServer.embedded([protocol], {"buyer": ["Buyer"]})
    adapter = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
    with pytest.raises(ValueError, match="at least one adapter"):
        LLMAgent([], "goal")
    with pytest.raises(ValueError, match="needs a goal"):
        LLMAgent([adapter], "  ")
    hooks = Hooks()
    hooks.before("Pay")(lambda b: b)
    with pytest.raises(ValueError, match=r"no protocol of this agent has: \['Pay'\]"):
        LLMAgent([adapter], "goal", hooks=hooks)
    clash = tool("wait", "mine", {"type": "object"})(lambda: None)
    with pytest.raises(ValueError, match="reserved"):
        LLMAgent([adapter], "goal", tools=[clash])
    with pytest.raises(ValueError, match="letters, digits"):
        tool("no spaces allowed", "x")(lambda: None)


async def test_transcript_records_prompts_calls_and_results(model, tmp_path):
    model.script("purchase")
    path = tmp_path / "transcript.json"
    outcome = await scenarios.purchase(client=model.client(), model="test-model", transcript=path)
    data = json.loads(path.read_text())
    assert data[0]["model"] == "test-model" and "Protocol Purchase" in data[0]["system"]
    assert data[0]["provider"] == "anthropic"
    decisions = [d for d in data if "decision" in d]
    assert len(decisions) == outcome.report.llm_calls == 3
    first = decisions[0]["rounds"][0]
    assert "You are in no enactment yet" in first["prompt"]
    assert first["tools"] == ["RFQ", "wait", "done", "memory"]
    assert first["response"][0] == {
        "type": "tool_use",
        "id": first["response"][0]["id"],
        "name": "RFQ",
        "input": {"item": "pen", "budget": 10},
        **({"caller": first["response"][0]["caller"]} if "caller" in first["response"][0] else {}),
    }
    assert first["results"][0]["content"].startswith("done: RFQ in E1")
    assert data[-1]["report"].startswith("done:")


def test_hooks_reject_a_before_hook_that_returns_nothing():
    import asyncio

    hooks = Hooks()

    @hooks.before("Complete")
    def broken(bindings):
        bindings["x"] = 1  # forgot to return

    with pytest.raises(TypeError, match="must return the bindings"):
        asyncio.run(hooks.run_before("Complete", {}))
