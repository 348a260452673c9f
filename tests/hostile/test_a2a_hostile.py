"""UCP over A2A, hostile: a client attacking the bundled merchant's ``/ucp/a2a``
(strabo/merchant/_a2a.py), and a merchant attacking the Business proxies' A2A
client (strabo/ucp/a2a_transport.py). Real servers on loopback, raw JSON-RPC
bodies (what no SDK would write: NaN, bytes that are not UTF-8, nesting
without end), and the answers read as the wire carries them.

The rules: a message the merchant cannot read is an ``a2a.ucp.error`` 400 (or a
JSON-RPC error saying what is wrong), never a 500 nor a traceback; nothing it
keeps grows with what a client makes up; a merchant's answer the proxy's client
cannot read is an answer it says so of, never an exception.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from strabo.merchant import create_app, merchant_of
from strabo.serving import serve
from strabo.ucp import versions
from strabo.ucp.a2a_transport import A2aCheckout
from tests.strabo.merchant.conftest import SIMULATION_SECRET
from tests.strabo.merchant.test_merchant_schemas import platform  # noqa: F401  (fixture)

NEW_URI = "https://ucp.dev/2026-04-08/specification/reference"


def rpc(data: Any, *, message_id: str = "m-1", context_id: str = "c-1") -> dict[str, Any]:
    """A 0.3 ``message/send`` with one data part."""
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
        "role": "user", "kind": "message", "messageId": message_id, "contextId": context_id,
        "parts": [{"kind": "data", "data": data}]}}}


@asynccontextmanager
async def merchant(profile: str = "http://127.0.0.1:9/profile.json"
                   ) -> AsyncIterator[tuple[Any, Any]]:
    """A 2026-04-08 merchant on loopback and a poster of raw bodies to its /ucp/a2a."""
    app = create_app(ucp_version=versions.NEW, simulation_secret=SIMULATION_SECRET)
    headers = {"UCP-Agent": f'profile="{profile}"', "X-A2A-Extensions": NEW_URI,
               "content-type": "application/json"}
    async with serve(app) as url, httpx.AsyncClient(timeout=30) as http:
        async def post(body: Any) -> dict[str, Any]:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            response = await http.post(f"{url}/ucp/a2a", content=raw, headers=headers)
            assert response.status_code < 500, response.text
            return response.json()  # type: ignore[no-any-return]
        yield app, post


def error_of(answer: dict[str, Any]) -> dict[str, Any]:
    [part] = answer["result"]["parts"]
    return part["data"]["a2a.ucp.error"]  # type: ignore[no-any-return]


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    logged = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert logged == [], [r.getMessage() for r in logged]


# The merchant ---------------------------------------------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_a_number_json_does_not_have_is_a_400(
        literal: str, caplog: pytest.LogCaptureFixture) -> None:
    """Python's json reads NaN, Infinity and 1e400 (inf); protobuf's Value holds them
    but cannot write them back: the merchant answered 500 internal_error."""
    body = json.dumps(rpc({"action": "add_to_checkout", "product_id": "bouquet_roses",
                           "quantity": 1, "n": 0})).replace('"n": 0', f'"n": {literal}')
    async with merchant() as (_, post):
        error = error_of(await post(body.encode()))
    assert error["status"] == 400 and error["code"] == "invalid_request", error
    assert "number" in error["content"]
    no_traceback(caplog)


@pytest.mark.parametrize(("body", "code"), [
    (b'{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": '
     b'{"messageId": "m-\xff", "role": "user", "parts": []}}}', -32700),  # not UTF-8
    (b'{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": '
     b'{"messageId": "m", "role": "user", "kind": "message", "parts": [{"kind": "data", '
     b'"data": {"x": ' + b'{"a": ' * 200 + b'1' + b'}' * 200 + b'}}]}}}', -32600),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": '
     + b'[' * 100_000 + b']' * 100_000 + b'}', -32600),
])
async def test_unreadable_bodies_are_json_rpc_errors_saying_why(
        body: bytes, code: int, caplog: pytest.LogCaptureFixture) -> None:
    """Not UTF-8, or nested past what protobuf (100) or Python (1000) parse: the SDK
    answered -32603 Internal error, with a traceback logged."""
    async with merchant() as (_, post):
        answer = await post(body)
    assert answer["error"]["code"] == code, answer
    no_traceback(caplog)


async def test_a_context_id_too_long_is_refused() -> None:
    """contextId keys what the merchant keeps per context (100,000 of them): one of a
    megabyte each would hold 100 GB. It is bounded as messageId is."""
    async with merchant() as (_, post):
        answer = await post(rpc({"action": "get_checkout", "id": "chk_1"},
                                context_id="c" * 1_000_000))
    error = error_of(answer)
    assert error["status"] == 400 and "contextId" in error["content"], error


async def test_a_message_id_replayed_in_another_context_is_a_conflict(
        platform: str) -> None:  # noqa: F811
    """The same messageId and data part in another context is another request (its
    checkout is the context's): 409, not the first context's checkout."""
    async with merchant(f"{platform}/profiles/{versions.NEW}.json") as (app, post):
        add = {"action": "add_to_checkout", "product_id": "bouquet_roses", "quantity": 1}
        first = await post(rpc(add, message_id="m-1", context_id="alice"))
        [part] = first["result"]["parts"]
        assert "a2a.ucp.checkout" in part["data"], part
        other = error_of(await post(rpc(add, message_id="m-1", context_id="bob")))
        assert other["status"] == 409 and other["code"] == "idempotency_conflict", other
        assert len(merchant_of(app).checkouts()) == 1


# The proxy's A2A client against a hostile merchant ------------------------------------


@asynccontextmanager
async def answering(raw: bytes) -> AsyncIterator[A2aCheckout]:
    """A merchant whose card is fine and whose every message/send answer is ``raw``."""
    async def card(request: Request) -> Response:
        return JSONResponse({"name": "m", "url": f"{request.base_url}a2a",
                             "preferredTransport": "JSONRPC",
                             "capabilities": {"extensions": [{"uri": NEW_URI, "params": {
                                 "actions": ["create_checkout", "get_checkout"]}}]}})

    async def send(request: Request) -> Response:
        return Response(raw, media_type="application/json")

    app = Starlette(routes=[Route("/card.json", card), Route("/a2a", send, methods=["POST"])])
    async with serve(app) as url:
        client = A2aCheckout(f"{url}/card.json", versions.NEW, timeout=10)
        try:
            yield client
        finally:
            await client.aclose()


def result(value: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": None, "result": value}).encode()


async def test_an_answer_nested_without_end_is_not_an_exception() -> None:
    """json.loads raises RecursionError (not a ValueError) past ~1000 levels."""
    raw = b'{"jsonrpc": "2.0", "id": null, "result": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    async with answering(raw) as client:
        try:
            answer = await client.send("get_checkout", "chk_1", None, {})
        except RecursionError as exc:  # what it does: up through the proxy as a 500
            pytest.fail(f"RecursionError: {exc}")
        except Exception as exc:  # NoAnswer is fine
            assert type(exc).__name__ == "NoAnswer", exc
        else:
            assert answer.status_code >= 400


async def test_a_checkout_that_is_not_an_object_is_not_a_200() -> None:
    """{"a2a.ucp.checkout": "lol"}: the proxy's field mapping reads a dict."""
    message = {"kind": "message", "role": "agent", "messageId": "x", "contextId": "c",
               "parts": [{"kind": "data", "data": {"a2a.ucp.checkout": "lol"}}]}
    async with answering(result(message)) as client:
        answer = await client.send("get_checkout", "chk_1", None, {})
    assert answer.status_code == 502 and isinstance(answer.json(), dict), answer


async def test_a_failed_task_is_not_answered_with_a_stale_checkout() -> None:
    """A Task answer, failed, whose history holds an agent message with an earlier
    checkout: the transport answered 200 with that checkout."""
    stale = {"id": "chk_1", "status": "ready_for_complete"}
    task = {"kind": "task", "id": "t", "contextId": "c",
            "status": {"state": "failed", "message": {
                "kind": "message", "role": "agent", "messageId": "f",
                "parts": [{"kind": "text", "text": "payment declined"}]}},
            "history": [{"kind": "message", "role": "agent", "messageId": "old",
                         "parts": [{"kind": "data", "data": {"a2a.ucp.checkout": stale}}]}]}
    async with answering(result(task)) as client:
        answer = await client.send("complete_checkout", "chk_1", {"payment": {}}, {})
    assert answer.status_code >= 400, (answer.status_code, answer.json())


async def test_a_merchant_chosen_context_id_is_not_kept_at_any_size() -> None:
    """The answer's contextId is kept per checkout (4096 of them): a megabyte each."""
    message = {"kind": "message", "role": "agent", "messageId": "x",
               "contextId": "c" * 1_000_000,
               "parts": [{"kind": "data", "data": {"a2a.ucp.checkout": {"id": "chk_1"}}}]}
    async with answering(result(message)) as client:
        await client.send("get_checkout", "chk_1", None, {})
        assert all(len(c) <= 255 for c in client.contexts.values())


async def test_a_client_gone_before_its_body_leaves_no_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """Headers, a byte of the body, then the connection closed: the SDK logged an
    "Unhandled exception" with a traceback (and -32603) for it."""
    app = create_app(ucp_version=versions.NEW, simulation_secret=SIMULATION_SECRET)
    handled = asyncio.Event()

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        finally:
            if scope["type"] == "http":
                handled.set()

    async with serve(watched) as url:
        host, port = url.removeprefix("http://").split(":")
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /ucp/a2a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 1000\r\n\r\n{")
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        await asyncio.wait_for(handled.wait(), 10)
    no_traceback(caplog)
