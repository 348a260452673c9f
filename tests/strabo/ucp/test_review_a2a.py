"""Review of the Business proxies' A2A client (strabo.ucp.a2a_transport): what
a merchant's agent card or answer may hold must end in a clear answer or
``Unsendable``, never in a Python error escaping the client, and a card read
that failed must not decide anything for the reads after it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from strabo import serve
from strabo.ucp import versions
from strabo.ucp.a2a_tools import TOOL
from strabo.ucp.a2a_transport import A2aCheckout, answer_of_result
from syncserver.client import Unsendable

CARD = "/card.json"
TOOL_CARD = {"name": "tool agent", "url": "/a2a", "preferredTransport": "JSONRPC",
             "skills": [{"id": "checkout", "description": "adds to a cart, checks out"}]}


@dataclass
class Agent:
    """Cards to give, in turn (the last one again and again); what was posted."""

    cards: list[Response]
    posted: list[dict[str, Any]] = field(default_factory=list)


@asynccontextmanager
async def agent_at(*cards: Response) -> AsyncIterator[tuple[str, Agent]]:
    agent = Agent(list(cards))

    async def card(request: Request) -> Response:
        return agent.cards.pop(0) if len(agent.cards) > 1 else agent.cards[0]

    async def rpc(request: Request) -> Response:
        body = await request.json()
        agent.posted.append(body)
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": {
            "kind": "message", "role": "agent", "messageId": "a-1",
            "contextId": body["params"]["message"]["contextId"],
            "parts": [{"kind": "data", "data": {"a2a.ucp.checkout": {
                "id": "c-1", "status": "incomplete", "line_items": []}}}]}})

    app = Starlette(routes=[Route(CARD, card), Route("/a2a", rpc, methods=["POST"])])
    async with serve(app) as url:
        yield url, agent


@pytest.mark.parametrize("result", [
    {"kind": "task", "status": {"state": "completed"}, "artifacts": 1},
    {"kind": "task", "status": {"state": "completed"}, "history": 5},
    {"kind": "task", "status": {"state": "completed"}, "artifacts": [{"parts": 3}]},
])
def test_a_task_with_odd_lists_is_a_malformed_answer(result: dict[str, Any]) -> None:
    answer = answer_of_result(result)
    assert answer.status_code == 502
    assert answer.json()["code"] == "malformed_answer"


async def test_a_card_read_that_failed_does_not_fix_the_dialect() -> None:
    async with agent_at(PlainTextResponse("busy", status_code=503),
                        JSONResponse(TOOL_CARD)) as (url, agent):
        client = A2aCheckout(url + CARD, versions.OLD)
        try:
            with pytest.raises(Unsendable, match="answered HTTP 503"):
                await client.send("get_checkout", "c-1", None, {})
            answer = await client.send("get_checkout", "c-1", None, {})
        finally:
            await client.aclose()
    assert client.dialect == TOOL  # the card that was read says so
    assert answer.status_code == 200
    # the tool dialect's get: no id, the context names the checkout
    assert agent.posted[-1]["params"]["message"]["parts"] == [
        {"kind": "data", "data": {"action": "get_checkout"}}]


@pytest.mark.parametrize("card", [
    Response("[" * 100_000 + "]" * 100_000, media_type="application/json"),
    JSONResponse({**TOOL_CARD, "url": "http://[not-an-address/a2a"}),
])
async def test_an_unreadable_card_is_unsendable(card: Response) -> None:
    async with agent_at(card) as (url, _):
        client = A2aCheckout(url + CARD, versions.OLD)
        try:
            with pytest.raises(Unsendable, match="agent card"):
                await client.send("get_checkout", "c-1", None, {})
        finally:
            await client.aclose()


async def test_a_card_url_that_is_no_url_is_unsendable() -> None:
    client = A2aCheckout("http://[not-an-address/card.json", versions.OLD)
    with pytest.raises(Unsendable, match="not an http"):
        await client.send("get_checkout", "c-1", None, {})


@pytest.mark.parametrize("created", ["\xb2", "\xb9\xb2\xb3"])  # "²", "¹²³": latin-1 digits
def test_a_signature_time_in_other_digits_is_refused_as_such(created: str) -> None:
    """A header is read as latin-1, whose superscripts are digits to str.isdigit
    but not to int(): a webhook must get signature_invalid, not a 500."""
    from strabo.ucpwire.signatures import SignatureError, verify_request

    headers = {"signature-input": f'sig1=("@method");created={created};keyid="k"',
               "signature": "sig1=:AAAA:"}
    with pytest.raises(SignatureError, match="created is not a time"):
        verify_request("POST", "http://x.test/w", headers, b"", lambda kid: None)


def fake_gemini() -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[3] / "samples" / "a2a" / "fake_gemini.py"
    spec = importlib.util.spec_from_file_location("fake_gemini_under_review", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("body", [
    [], 3, {"contents": [5]}, {"contents": "text"}, {"tools": [{"functionDeclarations": [{}]}]},
    {"contents": [{"parts": [{"text": 5}, 7]}]},
])
async def test_the_stand_in_model_answers_a_bad_request_with_400(body: Any) -> None:
    import httpx

    async with serve(fake_gemini().app()) as url, httpx.AsyncClient() as http:
        answer = await http.post(f"{url}/v1beta/models/m:generateContent", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize(("status", "settled"), [(408, True), (429, True), (503, True),
                                                 (501, False), (505, False)])
async def test_the_tool_dialect_settles_what_the_proxy_would_resend(status: int,
                                                                    settled: bool) -> None:
    """docs/proxy.md: an answer to ``complete_checkout`` that the proxy would
    resend (408, 429, 500, 502-504) is settled as ``outcome_unknown``, never
    resent; any other answer is given back as it is (the proxy resends none)."""
    completes: list[Any] = []

    async def card(request: Request) -> Response:
        return JSONResponse(TOOL_CARD)

    async def rpc(request: Request) -> Response:
        body = await request.json()
        action = body["params"]["message"]["parts"][0]["data"]["action"]
        if action == "complete_checkout":
            completes.append(body)
            return PlainTextResponse("no", status_code=status)
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": {
            "kind": "message", "role": "agent", "messageId": "a", "parts": [
                {"kind": "text", "text": "get_checkout: error (no checkout)."}]}})

    app = Starlette(routes=[Route(CARD, card), Route("/a2a", rpc, methods=["POST"])])
    async with serve(app) as url:
        client = A2aCheckout(url + CARD, versions.OLD)
        try:
            answer = await client.send("complete_checkout", "c-1", {"payment_data": {}}, {})
        finally:
            await client.aclose()
    assert len(completes) == 1
    if settled:
        assert (answer.status_code, answer.json()["code"]) == (409, "outcome_unknown")
    else:
        assert answer.status_code == status


@pytest.mark.parametrize(("code", "status"), [(-32700, 400), (-32602, 400), (-32001, 404),
                                              (-32002, 409), (-32005, 415), (-32601, 501),
                                              (-32603, 500), (-1, 500)])
def test_a_json_rpc_error_is_the_status_the_docs_say(code: int, status: int) -> None:
    from strabo.ucp.a2a_transport import answer_of_rpc_error

    assert answer_of_rpc_error({"code": code, "message": "m"}).status_code == status


@pytest.mark.parametrize("quantity", ["1", None, 1.5, [1]])
def test_an_add_whose_quantity_is_no_count_is_not_found_held(quantity: Any) -> None:
    """``holds`` settles an unanswered add: a quantity it cannot count says
    "not found" (then 409 outcome_unknown), never a TypeError."""
    from strabo.ucp.a2a_tools import holds

    checkout = {"line_items": [{"item": {"id": "BISC-001"}, "quantity": 3}]}
    asked = {"line_items": [{"item": {"id": "BISC-001"}, "quantity": quantity}]}
    assert holds(checkout, asked) is False
    assert holds(checkout, {"line_items": [{"item": {"id": "BISC-001"}}]}) is True


def test_a_complete_of_unknown_outcome_is_not_declined() -> None:
    """The tool dialect answers an unanswered ``complete_checkout`` with a 409
    ``outcome_unknown`` (the order may exist). ResilientUCP must not read that
    4xx as Declined (no order: pay again): only the session can tell, and when
    it cannot be read the ending is Escalated."""
    from strabo.proxy import ProxyHTTPError
    from strabo.ucp import outcomes

    error = ProxyHTTPError(409, "complete_checkout over A2A: timed out; not resent",
                           code="outcome_unknown", route="Complete")
    assert outcomes.failed_completion(error) is None
    assert outcomes.unknown(error, None)[0] == "Escalated"
    # a 4xx that says the complete was refused is still Declined
    refused = ProxyHTTPError(409, "not ready", code="not_ready", route="Complete")
    assert outcomes.failed_completion(refused) is not None


async def test_the_demo_refuses_a_product_for_resilient_ucp_before_it_starts() -> None:
    """``strabo demo`` refuses ``--product`` with ``--protocol resilient``; so
    must ``demo()`` itself, with a ValueError saying why (it was a TypeError
    from the resilient Platform, once the servers had started)."""
    from strabo.demo import demo

    with pytest.raises(ValueError, match="product"):
        await demo("resilient", None, "http://127.0.0.1:9", 5.0, product="BISC-001")
