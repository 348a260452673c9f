"""The Business proxies over A2A with a tool-style business agent, as Google's
UCP samples' ``a2a/business_agent`` is (strabo.ucp.a2a_tools), without Google's
code: a fake agent of the test's own (Starlette on a real loopback server)
that answers with the shapes recorded from the real one
(tests/fixtures/a2a-google), keeps a checkout per context as it does, and, as
it does, runs a replayed message again (it is not idempotent).

So a checkout must complete through it with the messages the real agent
takes (``add_to_checkout``, ``update_customer_details``, ``complete_checkout``
with the payment and the risk signals); a complete left unanswered must never
be sent twice; an add left unanswered must be settled by reading the context;
a tool's failure (text only) must reach the Platform as a 4xx with its text.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from peach import LocalExecutor
from strabo import serve
from strabo.demo import demo
from strabo.ucp import versions
from strabo.ucp.a2a_tools import TOOL, dialect_of, plan
from strabo.ucp.a2a_transport import EXTENSIONS, PAYMENT_KEYS, A2aCheckout, rebased
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.buying import SAMPLE_ADDRESS, line_items_of
from strabo.ucp.platform_agent import SAMPLE_BUYER, platform_agent
from syncserver import SyncServer
from tests.conftest import load

from .test_version_merchant import ROLES, history

RECORDED = Path(__file__).parents[2] / "fixtures" / "a2a-google"
PRODUCTS = {"BISC-001", "STRAW-001", "CHIPS-001", "SW-CHIPS-001", "O-COOKIES-001", "NUTRIBAR-001"}
MANDATORY = ("first_name", "last_name", "street_address", "address_locality", "address_region",
             "postal_code", "address_country")
BUYER = {**SAMPLE_BUYER, **SAMPLE_ADDRESS}


def recorded(name: str) -> Any:
    return json.loads((RECORDED / f"{name}.json").read_text())


def checkout_of(step: str) -> dict[str, Any]:
    """The checkout a recorded answer carries (found by key, as the client must)."""
    for part in recorded(step)["answer"]["result"]["parts"]:
        if "a2a.ucp.checkout" in part.get("data", {}):
            return copy.deepcopy(part["data"]["a2a.ucp.checkout"])
    raise AssertionError(f"{step}: no checkout recorded")


def text_of(step: str) -> str:
    return str(recorded(step)["answer"]["result"]["parts"][0]["text"])


@dataclass
class Agent:
    """The fake agent: what it was sent, its checkouts by context, and which
    actions it runs and then leaves unanswered (``unanswered``) until released."""

    url: str = ""
    messages: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    checkouts: dict[str, dict[str, Any]] = field(default_factory=dict)
    unanswered: set[str] = field(default_factory=set)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    posted: list[str] = field(default_factory=list)  # the Host of each JSON-RPC POST

    def actions(self) -> list[list[str]]:
        return [[p["data"].get("action") for p in m["params"]["message"]["parts"]
                 if "action" in p["data"]] for _, m in self.messages]


def app_of(agent: Agent) -> Starlette:
    async def profile(request: Request) -> Response:
        found = recorded("profile")  # its card URL says localhost:10999: say where it is
        found["ucp"]["services"]["dev.ucp.shopping"]["a2a"]["endpoint"] = (
            f"{agent.url}/.well-known/agent-card.json")
        return JSONResponse(found)

    async def card(request: Request) -> Response:
        return JSONResponse(recorded("agent_card"))  # url: http://localhost:10999, as served

    async def rpc(request: Request) -> Response:
        body = await request.json()
        headers = {k.lower(): v for k, v in request.headers.items()}
        agent.messages.append((headers, body))
        agent.posted.append(headers["host"])
        if EXTENSIONS[versions.OLD] not in headers.get("x-a2a-extensions", ""):
            return JSONResponse({**recorded("no_extension")["answer"], "id": body["id"]})
        message = body["params"]["message"]
        context = message["contextId"]
        parts = [p["data"] for p in message["parts"] if p.get("kind") == "data"]
        said = run(context, parts)
        held = agent.checkouts.get(context)
        if said.startswith("complete_checkout: success"):
            agent.checkouts.pop(context)  # the context forgets a completed checkout
        asked = {p.get("action") for p in parts}
        if asked & agent.unanswered:  # it ran: the answer is lost
            await agent.release.wait()
            return Response(status_code=204)
        answer: dict[str, Any] = {"kind": "message", "role": "agent",
                                  "messageId": str(uuid.uuid4()), "contextId": context,
                                  "parts": [{"kind": "text", "text": said}]}
        if said == "update_customer_details: success.":  # recorded: the checkout only
            answer["parts"] = []
        if held is not None and said.endswith(": success."):
            answer["parts"].append({"kind": "data", "data": {
                "a2a.ucp.checkout": held, "status": "success"}})
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": answer})

    def run(context: str, parts: list[dict[str, Any]]) -> str:
        """Each tool the message names, in order, as the agent runs them; the
        stand-in model's text for the last."""
        said = "No tool named"
        extra = {k: v for p in parts for k, v in p.items() if k != "action"}
        for data in (p for p in parts if "action" in p):
            action = data["action"]
            held = agent.checkouts.get(context)
            if action == "add_to_checkout":
                if data.get("product_id") not in PRODUCTS:
                    return text_of("add_unknown_product")
                made = held or {**checkout_of("add_to_checkout"), "id": str(uuid.uuid4()),
                                "line_items": []}
                line = copy.deepcopy(checkout_of("add_to_checkout")["line_items"][0])
                line["item"]["id"], line["quantity"] = data["product_id"], data.get("quantity", 1)
                made["line_items"].append(line)
                agent.checkouts[context] = made
            elif held is None:
                return text_of("get_checkout_after_complete").replace("get_checkout", action)
            elif action == "update_customer_details":
                missing = [k for k in MANDATORY if k not in data]
                if missing:
                    return f"{action}: error (mandatory input parameters missing: {missing})."
                agent.checkouts[context] = {**checkout_of("update_customer_details"),
                                            "id": held["id"], "line_items": held["line_items"]}
            elif action == "complete_checkout":
                if "a2a.ucp.checkout.risk_signals" not in extra:
                    return ("complete_checkout: error (Sorry, there was an error completing "
                            "the checkout, please try again.).")
                done = checkout_of("complete_checkout")
                done["id"], done["line_items"] = held["id"], held["line_items"]
                done["order"] = json.loads(json.dumps(done["order"]).replace(
                    checkout_of("update_customer_details")["id"], held["id"]))
                done["payment"]["instruments"] = [extra["a2a.ucp.checkout.payment_data"]]
                agent.checkouts[context] = done
            elif action != "get_checkout":
                return f"No tool named {action}; the tools are add_to_checkout, ..."
            said = f"{action}: success."
        return said

    return Starlette(routes=[Route("/.well-known/ucp", profile),
                             Route("/.well-known/agent-card.json", card),
                             Route("/", rpc, methods=["POST"])])


@asynccontextmanager
async def fake(**options: Any) -> AsyncIterator[Agent]:
    agent = Agent(**options)
    try:
        async with serve(app_of(agent)) as url:
            agent.url = url
            yield agent
            agent.release.set()
    finally:
        agent.release.set()


async def checkout(agent: Agent, *, product: str = "BISC-001", wait: float = 10.0
                   ) -> tuple[list[Any], Any]:
    """One SimpleUCP checkout through the fake; ``wait``: the proxy's timeout."""
    return await a2a_checkout(agent.url, {"line_items": line_items_of(product), "buyer": BUYER},
                              wait=wait, ucp_version=versions.OLD)


async def a2a_checkout(url: str, buying: dict[str, Any], wait: float | None = None,
                       **options: Any) -> tuple[list[Any], Any]:
    """One SimpleUCP checkout over A2A with the merchant at ``url``, the Platform
    buying ``buying`` (nothing given: the bundled merchant's default), until it
    ends or the proxy escalates; its history and the proxy."""
    executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
    proxy = business_proxy(executor, url, transport="a2a", **options)
    if wait is not None:
        proxy.timeout = wait
    platform, done = platform_agent(executor, **buying)
    async with proxy, platform:
        ended = asyncio.ensure_future(done.wait())
        escalated = asyncio.ensure_future(proxy.escalated.wait())
        await asyncio.wait({ended, escalated}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        ended.cancel()
        escalated.cancel()
        await platform.drain()
    return history(platform), proxy


async def test_a_checkout_completes_with_a_tool_style_agent() -> None:
    async with fake() as agent:
        seen, proxy = await checkout(agent)
        assert [i.name for i in seen] == ["Create", "Created", "Complete", "Completed"], seen
        made = next(i for i in seen if i.name == "Created")["id"]
        assert seen[-1]["order"]["id"] == f"ORD-{made}"
        assert agent.actions() == [["add_to_checkout"], ["update_customer_details"],
                                   ["complete_checkout"]]
        (_, add), (_, details), (headers, complete) = agent.messages
        assert add["params"]["message"]["parts"] == [{"kind": "data", "data": {
            "action": "add_to_checkout", "product_id": "BISC-001", "quantity": 1}}]
        assert details["params"]["message"]["parts"][0]["data"] == {
            "action": "update_customer_details", **SAMPLE_ADDRESS, "email": SAMPLE_BUYER["email"]}
        pay, signals = complete["params"]["message"]["parts"][1]["data"].items()
        assert pay[0] == PAYMENT_KEYS[versions.OLD][0] and signals[0] == PAYMENT_KEYS[
            versions.OLD][1]
        assert pay[1]["handler_id"] == "example_payment_provider"  # the one the checkout offers
        assert {"id", "type", "brand", "last_digits"} <= set(pay[1])
        contexts = {m["params"]["message"]["contextId"] for _, m in agent.messages}
        assert len(contexts) == 1 and headers["x-a2a-extensions"] == EXTENSIONS[versions.OLD]
        # the card says localhost:10999; every message went where the card was read
        assert set(agent.posted) == {agent.url.removeprefix("http://")}
        assert proxy._mcp.dialect == TOOL and proxy._mcp.seen[made]["status"] == "completed"


async def test_a_complete_left_unanswered_is_never_sent_again() -> None:
    async with fake(unanswered={"complete_checkout"}) as agent:
        seen, proxy = await checkout(agent, wait=1.0)
        assert [i.name for i in seen] == ["Create", "Created", "Complete"], seen
        # run once, then read (the context forgot it: completed), never resent
        assert agent.actions()[2:] == [["complete_checkout"], ["get_checkout"]]
        [escalation] = proxy.escalations
        assert escalation.action == "Complete" and escalation.attempts == 1
        assert escalation.error["code"] == "outcome_unknown", escalation.error
        assert "not resent" in escalation.error["message"]
        assert "has not yet been created" in escalation.error["message"]


async def test_an_add_left_unanswered_is_settled_by_reading_the_context() -> None:
    async with fake(unanswered={"add_to_checkout"}) as agent:
        seen, _ = await checkout(agent, wait=1.0)
        assert [i.name for i in seen] == ["Create", "Created", "Complete", "Completed"], seen
        assert agent.actions() == [["add_to_checkout"], ["get_checkout"],
                                   ["update_customer_details"], ["complete_checkout"]]
        assert agent.checkouts == {}  # completed: forgotten


async def test_a_tool_failure_is_a_4xx_with_its_text() -> None:
    async with fake() as agent:
        seen, proxy = await checkout(agent, product="bouquet_roses")
        assert [i.name for i in seen] == ["Create", "Failed"], seen
        reason = seen[-1]["reason"]
        assert reason["code"] == "tool_failed", reason
        assert reason["message"] == text_of("add_unknown_product")
        assert len(agent.messages) == 1  # a 4xx: not resent
        client = A2aCheckout(f"{agent.url}/.well-known/agent-card.json", versions.OLD)
        headers = {"UCP-Agent": f'profile="{proxy.profile_url}"', "Idempotency-Key": "k"}
        try:
            gone = await client.send("get_checkout", "nowhere", None, headers)
            cancel = await client.send("cancel_checkout", "nowhere", None, headers)
            other = A2aCheckout(client.card_url, versions.NEW)  # another extension: refused
            refused = await other.send("get_checkout", "nowhere", None, headers)
            await other.aclose()
        finally:
            await client.aclose()
        assert gone.status_code == 422 and "has not yet been created" in gone.json()["message"]
        assert cancel.status_code == 501 and cancel.json()["code"] == "not_supported"
        assert refused.status_code == 400 and "UCP Extension is required" in refused.text
        assert len(agent.messages) == 3  # the cancel was not sent


def test_the_dialect_is_the_cards() -> None:
    assert dialect_of(recorded("agent_card")) == TOOL
    assert dialect_of({"name": "no skills"}) == "session"
    ours = {"capabilities": {"extensions": [{"params": {"actions": ["create_checkout"]}}]},
            "skills": [{"id": "x", "description": "checkout"}]}
    assert dialect_of(ours) == "session"
    assert rebased("http://localhost:10999", "http://127.0.0.1:4711/card") == (
        "http://127.0.0.1:4711")
    assert rebased("http://127.0.0.1:9/a2a", "http://127.0.0.1:4711/card") == (
        "http://127.0.0.1:9/a2a")
    assert rebased("http://localhost:10999/", "https://shop.example/card") == (
        "http://localhost:10999/")
    keys = PAYMENT_KEYS[versions.OLD]
    known = {"status": "incomplete"}
    refused = plan("complete_checkout", {"payment_data": {}}, keys, known)
    assert refused[0] == 409  # never completed before the buyer's details
    _, parts = plan("complete_checkout", {"payment_data": {"id": "i"}}, keys,
                    {"status": "ready_for_complete"})
    assert parts[1]["data"] == {keys[0]: {"id": "i"}, keys[1]: {}}  # the key, always
    assert plan("update_checkout", {"line_items": []}, keys) == (
        "get_checkout", [{"kind": "data", "data": {"action": "get_checkout"}}])


@pytest.mark.parametrize("protocol", ["atomic", "incremental"])
async def test_the_demo_with_a_tool_style_agent(protocol: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    async with fake() as agent:
        status = await demo(protocol, None, agent.url, 30, transport="a2a",
                            product="BISC-001")  # the version: the profile's
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "(completed)" in out and "order     ORD-" in out, out
    assert agent.actions()[0] == ["add_to_checkout"]
    assert agent.actions()[-1] == ["complete_checkout"]
