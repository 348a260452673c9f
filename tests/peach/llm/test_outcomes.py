"""Outcomes: an LLM agent's report says whether its goal was reached, judged on
the protocol's log, not on what the model says; ``strabo agent`` exits 1 when it
was not (the reason on stderr), 0 when it was.

The model here lies on purpose: it calls ``done`` with "order placed" whatever
happened. Real parts: an embedded SyncServer, the bundled merchant over HTTP
behind the Business proxy, coded counterparts, the scripted model on loopback.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter, SyncExecutor
from peach.llm import LLMAgent
from peach.llm import cli as _cli
from peach.llm._outcomes import judge
from samples.llm import counterparts, scenarios
from strabo import serve
from strabo.merchant import create_app, merchant_of
from strabo.ucp.business_proxy import business_proxy
from syncserver import SyncServer
from tests.conftest import ORDER, PROTOCOLS, SIMPLE_COMPLETE, SIMPLE_CREATE, SIMPLE_CREATED, load
from tests.peach.llm.test_cli import parse, strabo_agent

UCP = str(PROTOCOLS / "atomic-ucp.lsh")
PURCHASE = str(PROTOCOLS / "purchase.lsh")
LIAR = {"type": "tool_use", "name": "done", "input": {"summary": "order placed"}}
CREATE = {  # what scenarios.UCP_GOAL asks for (the merchant wants a shipping option)
    "line_items": [{"item": {"id": "bouquet_roses", "title": "Bouquet of Red Roses"},
                    "quantity": 1}],
    "currency": "USD",
    "buyer": {"full_name": "John Doe", "email": "john.doe@example.com"},
    "payment_pref": {},
    "fulfillment_pref": {"methods": [{"type": "shipping", "selected_destination_id": "addr_1",
                                      "groups": [{"selected_option_id": "std-ship"}]}]},
}


def ucp_answers() -> list[dict[str, Any]]:
    """Create, then (if the merchant created the checkout) Complete with the
    sample payment, then done: "order placed", whatever the log says."""
    return [
        {"when": {"has": ["Create"], "lacks": ["Complete"],
                  "prompt_has": ["You are in no enactment yet"]},
         "content": [{"type": "tool_use", "name": "Create", "input": CREATE},
                     {"type": "tool_use", "name": "wait",
                      "input": {"for_actions": ["Created", "Failed"]}}]},
        {"when": {"has": ["Complete"]},
         "content": [{"type": "tool_use", "name": "Complete",
                      "input": {"payment_data": scenarios.payment_data(),
                                "risk_signals": {"ip": "127.0.0.1"}}},
                     {"type": "tool_use", "name": "wait",
                      "input": {"for_actions": ["Completed"]}}]},
        {"when": {"has": ["done"], "prompt_has": ["every enactment you are in is complete"]},
         "content": [LIAR]},
    ]


@contextlib.asynccontextmanager
async def merchant(stock: int | None = None) -> AsyncIterator[str]:
    """The bundled merchant over HTTP; ``stock``: the roses left."""
    app = create_app()
    if stock is not None:
        merchant_of(app).set_stock("bouquet_roses", stock)
    async with serve(app) as url:
        yield url


async def strabo_agent_ucp(model: Any, merchant_url: str, *options: str) -> int:
    """``strabo agent`` as the Platform on an embedded SyncServer; the Business
    proxy joins it over HTTP with the token the command prints."""
    proxies: list[PeachAdapter] = []

    async def ready(url: str) -> None:
        proxy = business_proxy(SyncExecutor(url, token="business-secret"), merchant_url)
        proxies.append(proxy)
        await proxy.start()

    args = parse("--protocol", UCP, "--role", "Platform", "--goal", scenarios.UCP_GOAL,
                 "--embedded", "--model", "test-model", "--max-seconds", "60", *options)
    try:
        return await _cli.run_agent(args, on_ready=ready, client=model.client())
    finally:
        for proxy in proxies:
            await proxy.stop()


# strabo agent ----------------------------------------------------------------------------


async def test_a_failed_checkout_is_exit_1_with_the_reason(model, capsys):
    model.answers = ucp_answers()
    async with merchant(stock=0) as url:
        status = await strabo_agent_ucp(model, url, "--success", "Completed")
    out, err = capsys.readouterr()
    assert status == 1, (out, err, model.unanswered)
    [line] = err.splitlines()  # one line, no traceback
    assert line.startswith("strabo agent: goal not reached (Completed wanted): Failed in E1 ")
    assert "OUT_OF_STOCK" in line and "Insufficient stock for item bouquet_roses" in line
    assert "strabo agent: done: order placed" in out  # what the model said...
    assert "goal NOT reached: Failed in E1" in out  # ...and what the log says


async def test_a_completed_checkout_is_exit_0(model, capsys):
    model.answers = ucp_answers()
    async with merchant() as url:
        status = await strabo_agent_ucp(model, url, "--success", "Completed")
    out, err = capsys.readouterr()
    assert status == 0, (out, err, model.unanswered)
    assert err == ""
    assert "goal reached: Completed in E1 (order: {" in out


async def test_without_success_a_failed_checkout_is_not_judged(model, capsys):
    """The documented limit: without --success the command cannot tell a Failed
    checkout from a Completed one, so the run counts (the agent acted and the
    run ended normally); the report still names the outcome."""
    model.answers = ucp_answers()
    async with merchant(stock=0) as url:
        status = await strabo_agent_ucp(model, url)
    out, err = capsys.readouterr()
    assert status == 0, (out, err, model.unanswered)
    assert "; outcome: Failed in E1 (reason: {" in out


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ((), "strabo agent: the agent performed no action (the run ended with done: "
         "order placed)"),
        (("--success", "Completed"), "strabo agent: goal not reached (Completed wanted): the "
         "agent took part in no enactment that can end in Completed (it performed no action)"),
    ],
)
async def test_done_without_any_action_is_exit_1(model, capsys, options, why):
    model.answers = [{"when": {"has": ["RFQ", "done"]}, "content": [LIAR]}]
    args = parse("--protocol", PURCHASE, "--role", "Buyer", "--goal", scenarios.PURCHASE_GOAL,
                 "--embedded", "--model", "test-model", "--max-seconds", "60", *options)
    status = await _cli.run_agent(args, client=model.client())
    out, err = capsys.readouterr()
    assert status == 1, (out, err, model.unanswered)
    assert err.splitlines() == [why]


def test_an_unknown_success_action_is_a_usage_error():
    result = strabo_agent("--protocol", PURCHASE, "--role", "Buyer", "--goal", "x",
                          "--embedded", "--success", "Complete")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert ("strabo agent: success names 'Complete', which no protocol of this agent has "
            "as an action (actions: Accept, Cancel, Completed,") in result.stderr


# The API ----------------------------------------------------------------------------


async def test_a_rejected_purchase_is_not_the_goal(model):
    """The buyer turns both quotes down and says it bought the pen: the log has
    Reject, so the goal (Completed) is not reached."""
    model.answers = [
        {"when": {"has": ["RFQ"], "prompt_has": ["You are in no enactment yet"]},
         "content": [{"type": "tool_use", "name": "RFQ", "input": {"item": "pen", "budget": 10}},
                     {"type": "tool_use", "name": "wait", "input": {"for_actions": ["Quote"]}}]},
        {"when": {"has": ["Reject"], "prompt_has": ["cheap-pen", "dear-pen"]},
         "content": [{"type": "tool_use", "name": "Reject",
                      "input": {"reason": "too dear\nfor a pen"}}]},
        {"when": {"has": ["Reject"]},
         "content": [{"type": "tool_use", "name": "wait", "input": {"for_actions": ["Quote"]}}]},
        {"when": {"has": ["done"], "prompt_has": ["every enactment you are in is complete"]},
         "content": [LIAR]},
    ]
    agents = {"buyer": ["Buyer"], "cheap": ["Seller"], "dear": ["Seller"],
              "shipper": ["Shipper"]}
    async with scenarios.World(["purchase.lsh"], agents) as world:
        counterparts.seller(world.adapter("cheap", "Seller", "Purchase"), counterparts.CHEAP)
        counterparts.seller(world.adapter("dear", "Seller", "Purchase"), counterparts.DEAR)
        counterparts.shipper(world.adapter("shipper", "Shipper", "Purchase"))
        buyer = world.adapter("buyer", "Buyer", "Purchase")
        agent = LLMAgent([buyer], scenarios.PURCHASE_GOAL, client=model.client(),
                         model="test-model", success=("Completed",))
        await world.start_counterparts(buyer)
        report = await agent.run()
    assert report.status == "done" and report.reason == "order placed", model.unanswered
    assert report.goal_reached is False and not report.ok
    assert report.outcome == "Reject in E1 (reason: too dear for a pen)"
    assert report.shortfall == (
        "goal not reached (Completed wanted): Reject in E1 (reason: too dear for a pen)")
    assert str(report).endswith("; goal NOT reached: Reject in E1 (reason: too dear for a pen)")


async def test_the_ucp_scenario_reaches_its_goal(model):
    model.script("ucp")
    outcome = await scenarios.ucp(client=model.client(), model="test-model",
                                  success="Completed")
    assert outcome.success, (outcome.detail, model.unanswered)
    assert outcome.report.goal_reached is True and outcome.report.ok
    assert outcome.report.outcome.startswith('Completed in E1 (order: {"id": ')


def test_success_must_name_an_action_of_the_agents_protocols():
    protocol = load("atomic-ucp.lsh")
    server = SyncServer.embedded([protocol], {"p": ["Platform"], "b": ["Business"]})
    platform = PeachAdapter("p", protocol, "Platform", LocalExecutor(server))
    with pytest.raises(ValueError, match=r"success names 'Complete d', which no protocol .* "
                       r"\(actions: Cancel, Complete, Completed, Create, Created, Failed\)"):
        LLMAgent([platform], "buy", client=object(), model="m", provider="anthropic",
                 success=["Completed", "Complete d"])
    agent = LLMAgent([platform], "buy", client=object(), model="m", provider="anthropic",
                     success=["Completed", "Failed", "Completed"])
    assert agent.success == ("Completed", "Failed") == agent.report.success
    none = LLMAgent([platform], "buy", client=object(), model="m", provider="anthropic",
                    success=())
    assert none.success is None


# The judgement on the log ------------------------------------------------------------


async def test_every_enactment_must_reach_a_success_outcome():
    """A retry after a failure does not hide the failure: Failed in E1 and
    Completed in E2 is not the goal (conservative; the outcome names both)."""
    protocol = load("atomic-ucp.lsh")
    server = SyncServer.embedded([protocol], {"p": ["Platform"], "b": ["Business"]})
    platform = PeachAdapter("p", protocol, "Platform", LocalExecutor(server))
    business = PeachAdapter("b", protocol, "Business", LocalExecutor(server))
    async with platform, business:
        async def act(adapter: PeachAdapter, name: str, **bindings: Any) -> None:
            await adapter.sync()  # what the other agent did, seen before acting on it
            await adapter.attempt([adapter.build_action(name, bindings)])

        reason = {"status": 409, "code": "OUT_OF_STOCK", "message": "none left"}
        await act(platform, "Create", cid="c1", **SIMPLE_CREATE)
        await act(business, "Failed", cid="c1", reason=reason)
        await act(platform, "Create", cid="c2", **SIMPLE_CREATE)
        await act(business, "Created", cid="c2", id="chk_2", **SIMPLE_CREATED)
        await act(platform, "Create", cid="c3", **SIMPLE_CREATE)
        await act(platform, "Complete", cid="c2", id="chk_2", **SIMPLE_COMPLETE)
        await act(business, "Completed", cid="c2", order=ORDER)
        await platform.sync()
        labels = {("c1",): "E1", ("c2",): "E2", ("c3",): "E10"}

        def label(adapter: Any, root: tuple[Any, ...]) -> str:
            return labels[root]

        def hide(bindings: Any) -> dict[str, Any]:
            return {k: "[secret]" if k == "order" else v for k, v in bindings.items()}

        failed = ('Failed in E1 (reason: {"status": 409, "code": "OUT_OF_STOCK", '
                  '"message": "none left"})')
        both = [(0, ("c2",)), (0, ("c1",))]
        assert judge([platform], both, label, ("Completed",), hide) == (
            False, f"{failed}; Completed in E2 (order: [secret])")
        assert judge([platform], [(0, ("c2",))], label, ("Completed",), hide) == (
            True, "Completed in E2 (order: [secret])")
        # An enactment with no outcome yet is no success either; it says where it is.
        assert judge([platform], [(0, ("c3",)), (0, ("c2",))], label, ("Completed",), hide) == (
            False, "E10 has no outcome yet (last: Create by p); Completed in E2 (order: [secret])")
        # No success named: no judgement, the outcome still told.
        assert judge([platform], both, label, None, hide) == (
            None, f"{failed}; Completed in E2 (order: [secret])")
        # Failed may be named a success too (a test of the failure path, say).
        assert judge([platform], both, label, ("Completed", "Failed"), hide)[0] is True
        assert judge([platform], [], label, None) == (None, "the agent performed no action")


def test_a_protocol_is_judged_only_by_its_own_success_actions():
    """An agent in Purchase and Logistics with success Completed (Purchase's):
    its Logistics enactments are neither success nor failure."""
    purchase = LangshawProtocol.load(PURCHASE)
    logistics = load("logistics.lsh")

    class Stub:
        def __init__(self, protocol: LangshawProtocol, history: list[Any]) -> None:
            self.protocol, self._history = protocol, history

        def history(self, root: tuple[Any, ...]) -> list[Any]:
            return self._history

    def label(adapter: Any, root: tuple[Any, ...]) -> str:
        return "E1"

    adapters = [Stub(purchase, []), Stub(logistics, [])]
    reached, outcome = judge(adapters, [(1, ("o1",))], label, ("Completed",))
    assert reached is False
    assert outcome == "the agent took part in no enactment that can end in Completed"
