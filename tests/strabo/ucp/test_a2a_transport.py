"""The Business proxies' A2A client (``transport="a2a"``) against a small A2A
agent of the test's own: a Starlette app on a real loopback server that serves
a UCP profile listing its agent card, the card, and ``message/send`` as
/tmp/helpers' wire says (strabo's convention, docs/proxy.md *Transports*).

The fake answers each message by its data part's ``action`` and keeps what it
was sent, so the tests read the messages as the wire carried them: a retry is
the same message (``messageId`` is the Idempotency-Key, ``contextId`` the same),
an ``a2a.ucp.error`` is its status to the proxy, no answer is ``NoAnswer``.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from peach import LocalExecutor
from strabo import serve
from strabo.proxy import ProxyHTTPError
from strabo.ucp import versions
from strabo.ucp.a2a_transport import (
    EXTENSIONS,
    A2aCheckout,
    a2a_endpoint,
    answer_of_error,
    answer_of_result,
    parts_of,
    rpc_url,
)
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.incremental_proxy import incremental_proxy
from strabo.ucp.platform_agent import platform_agent
from syncserver import SyncServer
from syncserver.client import NoAnswer, open_client
from tests.conftest import load

from .test_version_merchant import ROLES, history

CARD = "/a2a/.well-known/agent-card.json"


@dataclass
class Agent:
    """What the fake agent was sent, and how it should misbehave."""

    url: str = ""
    messages: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)
    busy_once: set[str] = field(default_factory=set)  # actions answered 503 once
    lists_a2a: bool = True
    rpc_at: str | None = None  # the card's JSON-RPC URL (default: its own)
    answered: dict[str, dict[str, Any]] = field(default_factory=dict)

    def parts(self, n: int = -1) -> list[dict[str, Any]]:
        return list(self.messages[n][1]["params"]["message"]["parts"])


def checkout(id: str, status: str = "incomplete") -> dict[str, Any]:
    return {"id": id, "status": status, "currency": "USD", "line_items": [], "totals": [],
            "links": [], "payment": {"handlers": []}, "messages": []}


def app_of(agent: Agent) -> Starlette:
    async def profile(request: Request) -> Response:
        agent.rest.append(request.url.path)
        base = str(request.base_url).rstrip("/")
        entries = [{"version": versions.NEW, "transport": "rest", "endpoint": base + "/",
                    "spec": "https://ucp.dev/2026-04-08/specification/overview"}]
        if agent.lists_a2a:
            entries.append({"version": versions.NEW, "transport": "a2a", "endpoint": base + CARD,
                            "spec": "https://ucp.dev/2026-04-08/specification/overview"})
        return JSONResponse({"ucp": {"version": versions.NEW,
                                     "services": {"dev.ucp.shopping": entries},
                                     "capabilities": {}, "payment_handlers": {}}})

    async def card(request: Request) -> Response:
        return JSONResponse({"name": "fake", "protocolVersion": "0.3.0",
                             "url": agent.rpc_at or "/a2a", "preferredTransport": "JSONRPC",
                             "capabilities": {"extensions": [{"uri": u} for u in
                                                             EXTENSIONS.values()]}})

    async def rpc(request: Request) -> Response:
        body = await request.json()
        headers = {k.lower(): v for k, v in request.headers.items()}
        agent.messages.append((headers, body))
        message = body["params"]["message"]
        data = message["parts"][0]["data"]
        action, key = data["action"], message["messageId"]
        if action in agent.busy_once:
            agent.busy_once.discard(action)
            return PlainTextResponse("busy", status_code=503, headers={"Retry-After": "0"})
        if data.get("id") == "broken":
            return PlainTextResponse("<html>oops</html>")
        if key not in agent.answered:
            agent.answered[key] = answer(action, data)
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": {
            "kind": "message", "role": "agent", "messageId": f"a-{key}",
            "contextId": message["contextId"],
            "parts": [{"kind": "data", "data": agent.answered[key]}]}})

    def answer(action: str, data: dict[str, Any]) -> dict[str, Any]:
        if data.get("id") == "gone":
            return {"a2a.ucp.error": {"status": 404, "code": "not_found",
                                      "content": "no such checkout"}}
        if action == "create_checkout":
            return {"a2a.ucp.checkout": checkout("c-1")}
        done = "completed" if action == "complete_checkout" else "incomplete"
        return {"a2a.ucp.checkout": checkout(data["id"], done)}

    return Starlette(routes=[Route("/.well-known/ucp", profile), Route(CARD, card),
                             Route("/a2a", rpc, methods=["POST"])])


@asynccontextmanager
async def fake(**options: Any) -> AsyncIterator[Agent]:
    agent = Agent(**options)
    async with serve(app_of(agent)) as url:
        agent.url = url
        yield agent


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


HEADERS = {"UCP-Agent": 'profile="http://platform.test/p.json"', "Idempotency-Key": "k-1",
           "Request-Id": "r-1"}


async def test_a_message_carries_the_headers_the_action_and_the_session() -> None:
    async with fake() as agent:
        client = A2aCheckout(agent.url + CARD, versions.NEW)
        try:
            made = await client.send("create_checkout", None, {"line_items": []}, HEADERS)
            again = await client.send("create_checkout", None, {"line_items": []}, HEADERS)
            updated = await client.send("update_checkout", "c-1", {"id": "c-1"},
                                        {**HEADERS, "Idempotency-Key": "k-2"})
        finally:
            await client.aclose()
        assert made.status_code == 200 and made.json()["id"] == "c-1"
        assert again.json() == made.json() and updated.json()["id"] == "c-1"
        (h1, m1), (_, m2), (_, m3) = agent.messages
        assert h1["x-a2a-extensions"] == EXTENSIONS[versions.NEW]
        assert h1["ucp-agent"] == HEADERS["UCP-Agent"] and h1["request-id"] == "r-1"
        assert "idempotency-key" not in h1  # it is the messageId
        first, second, third = (m["params"]["message"] for m in (m1, m2, m3))
        assert m1["method"] == "message/send" and m1["id"] != m2["id"]
        assert first["messageId"] == second["messageId"] == "k-1"
        assert first["contextId"] == second["contextId"] == third["contextId"]
        assert first["role"] == "user" and first["kind"] == "message"
        assert first["parts"] == [{"kind": "data", "data": {
            "action": "create_checkout", "a2a.ucp.checkout": {"line_items": []}}}]
        assert third["parts"][0]["data"] == {"action": "update_checkout", "id": "c-1",
                                             "a2a.ucp.checkout": {"id": "c-1"}}
        assert client.contexts == {"c-1": first["contextId"]} and client.calls == 3


def test_a_complete_sends_payment_under_the_version_keys() -> None:
    new = parts_of("complete_checkout", "c1", {"payment": {"instruments": []},
                                               "signals": {"dev.ucp.buyer_ip": "1"},
                                               "ap2": {"m": 1}}, versions.NEW)
    assert new == [{"kind": "data", "data": {"action": "complete_checkout", "id": "c1"}},
                   {"kind": "data", "data": {"a2a.ucp.checkout.payment": {"instruments": []},
                                             "a2a.ucp.checkout.signals": {"dev.ucp.buyer_ip": "1"},
                                             "ap2": {"m": 1}}}]
    old = parts_of("complete_checkout", "c1", {"payment_data": {"id": "i"},
                                               "risk_signals": None}, versions.OLD)
    assert old[1]["data"] == {"a2a.ucp.checkout.payment_data": {"id": "i"}}
    assert parts_of("cancel_checkout", "c1", None, versions.OLD) == [
        {"kind": "data", "data": {"action": "cancel_checkout", "id": "c1"}}]
    assert parts_of("get_checkout", "c1", None, versions.NEW)[0]["data"] == {
        "action": "get_checkout", "id": "c1"}


def proxy_of(url: str, transport: str = "a2a", version: str | None = versions.OLD) -> Any:
    executor = LocalExecutor(SyncServer.embedded([load("incremental-ucp.lsh")], ROLES))
    return incremental_proxy(executor, url, ucp_version=version, transport=transport)


async def test_a_retry_is_the_same_message() -> None:
    async with fake(busy_once={"get_checkout"}) as agent:
        proxy = proxy_of(agent.url)
        async with proxy:
            got = await proxy.request("Get", {"id": "c-9"}, idempotency_key="get-c-9")
        assert got["id"] == "c-9" and got["status"] == "incomplete"
        (h1, first), (h2, second) = agent.messages  # a 503, then the answer
        one, two = first["params"]["message"], second["params"]["message"]
        assert one["messageId"] == two["messageId"] == "get-c-9"
        assert one["contextId"] == two["contextId"]
        assert first["id"] != second["id"]  # a new JSON-RPC request, the same message
        # the proxy's UCP version picks the extension: 2026-01-11 here
        assert h1["x-a2a-extensions"] == h2["x-a2a-extensions"] == EXTENSIONS[versions.OLD]
        assert agent.rest == ["/.well-known/ucp"]  # the profile, for the agent card
        assert proxy._mcp is not None and proxy._mcp.calls == 2


async def test_an_error_answer_is_its_status_to_the_proxy() -> None:
    async with fake() as agent:
        proxy = proxy_of(agent.url, version=versions.NEW)
        async with proxy:
            with pytest.raises(ProxyHTTPError) as raised:
                await proxy.request("Get", {"id": "gone"}, idempotency_key="get-gone")
        assert raised.value.status == 404 and raised.value.code == "not_found"
        assert len(agent.messages) == 1  # a 404 is not retried
        assert agent.messages[0][0]["x-a2a-extensions"] == EXTENSIONS[versions.NEW]
    conflict = answer_of_error({"status": 409, "code": "idempotency_conflict",
                                "content": "reused", "retry_after": 2})
    assert (conflict.status_code, conflict.json()) == (
        409, {"code": "idempotency_conflict", "content": "reused"})
    assert conflict.headers["retry-after"] == "2"
    assert answer_of_error({"code": "x"}).status_code == 500


async def test_no_answer_is_no_answer() -> None:
    refused = A2aCheckout(f"http://127.0.0.1:{closed_port()}{CARD}", versions.NEW, timeout=2)
    with pytest.raises(NoAnswer):  # the card's server refuses
        await refused.send("get_checkout", "c-1", None, HEADERS)
    async with fake(rpc_at=f"http://127.0.0.1:{closed_port()}/a2a") as agent:
        client = A2aCheckout(agent.url + CARD, versions.NEW, timeout=2)
        with pytest.raises(NoAnswer):  # the JSON-RPC endpoint refuses
            await client.send("get_checkout", "c-1", None, HEADERS)
        await client.aclose()
    async with fake() as agent:
        client = A2aCheckout(agent.url + CARD, versions.NEW, timeout=2)
        with pytest.raises(NoAnswer, match="not JSON-RPC"):  # a 200 that is not JSON-RPC
            await client.send("get_checkout", "broken", None, HEADERS)
        agent.busy_once.add("get_checkout")  # an HTTP error with no JSON-RPC: its status
        busy = await client.send("get_checkout", "c-1", None, HEADERS)
        assert busy.status_code == 503 and busy.headers["retry-after"] == "0"
        await client.aclose()


async def test_discovery_and_orders_stay_on_rest() -> None:
    async with fake() as agent:
        client = A2aCheckout(agent.url + CARD, versions.NEW)
        rest = open_client(agent.url, 5)
        routed = client.over(rest)
        answer = await routed.request("GET", "/.well-known/ucp")
        assert answer.status_code == 200 and agent.rest == ["/.well-known/ucp"]
        assert agent.messages == [] and client.calls == 0
        await routed.aclose()


async def test_a_merchant_without_a2a_fails_the_create_with_the_reason() -> None:
    async with fake(lists_a2a=False) as agent:
        executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
        proxy = business_proxy(executor, agent.url, transport="a2a")
        platform, done = platform_agent(executor)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 20)
            await platform.drain()
        seen = history(platform)
        assert [i.name for i in seen] == ["Create", "Failed"]
        assert seen[-1]["reason"]["code"] == "transport_unsupported"
        assert "A2A" in seen[-1]["reason"]["message"] and agent.messages == []


def test_profiles_cards_and_answers_are_read_in_both_shapes() -> None:
    new = {"ucp": {"services": {"dev.ucp.shopping": [
        {"transport": "mcp", "endpoint": "http://m/mcp"},
        {"transport": "a2a", "endpoint": "http://m/card.json"}]}}}
    old = {"ucp": {"services": {"dev.ucp.shopping": {
        "rest": {"endpoint": "http://m/"}, "a2a": {"endpoint": "http://m/old-card.json"}}}}}
    assert a2a_endpoint(new) == "http://m/card.json"
    assert a2a_endpoint(old) == "http://m/old-card.json"
    assert a2a_endpoint({"ucp": {"services": {"dev.ucp.shopping": []}}}) is None
    assert a2a_endpoint("nonsense") is None
    card = "http://m/ucp/a2a/.well-known/agent-card.json"
    assert rpc_url({"url": "/ucp/a2a", "preferredTransport": "JSONRPC"}, card) == (
        "http://m/ucp/a2a")
    assert rpc_url({"url": "http://m/grpc", "preferredTransport": "GRPC",
                    "additionalInterfaces": [{"url": "http://m/rpc", "transport": "JSONRPC"}]},
                   card) == "http://m/rpc"
    assert rpc_url({"supportedInterfaces": [
        {"url": "http://m/v1", "protocolBinding": "HTTP+JSON"},
        {"url": "http://m/jr", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]},
        card) == "http://m/jr"
    assert rpc_url({"name": "no url"}, card) is None
    task = {"kind": "task", "id": "t", "contextId": "ctx", "status": {"state": "completed"},
            "artifacts": [{"parts": [{"kind": "data", "data": {"a2a.ucp.checkout": {"id": "c"}}}]}]}
    answer = answer_of_result(task)
    assert (answer.status_code, answer.json(), answer.context) == (200, {"id": "c"}, "ctx")
    text = answer_of_result({"kind": "message", "parts": [{"kind": "text", "text": "hi"}]})
    assert text.status_code == 502 and "hi" in json.loads(text.content)["content"]
