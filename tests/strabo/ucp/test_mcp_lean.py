"""The lean MCP path of ``McpCheckout`` (strabo/ucp/_mcp_lean.py), checked
against the SDK's client as its oracle.

A server that speaks MCP's stateless revision in plain JSON (the bundled
merchant, and a scripted stub) is spoken to with one POST per call; anything
else is handed to the SDK. The differential test sends the same scripted
answers to ``client="auto"`` and to ``client="sdk"`` (the SDK's ``mcp.Client``)
and requires the same outcome: the same status and body, or no answer for both.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from strabo import serve
from strabo.merchant import create_app
from strabo.ucp import versions
from strabo.ucp.mcp_transport import McpAnswer, McpCheckout
from syncserver.client import NoAnswer

ARGUMENTS: dict[str, Any] = {
    # A profile nobody serves: the merchant answers 424, which is an answer.
    "meta": {"ucp-agent": {"profile": "http://127.0.0.1:9/profile.json"}},
    "id": "no-such-checkout",
}
MODERN = "2026-07-28"


async def outcome(mcp: McpCheckout, tool: str = "get_checkout") -> tuple[int, Any] | str:
    try:
        answer = await mcp.call(tool, ARGUMENTS)
    except NoAnswer:
        return "no answer"
    return answer.status_code, answer.body


class Seen:
    """ASGI middleware: the JSON-RPC methods of the requests that pass."""

    def __init__(self, app: ASGIApp, refuse_discover: bool = False) -> None:
        self.app, self.refuse_discover = app, refuse_discover
        self.methods: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        method = json.loads(body).get("method", "?")
        self.methods.append(method)
        if method == "server/discover" and self.refuse_discover:  # as a legacy server
            request_id = json.loads(body)["id"]
            answer = JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": {
                "code": -32601, "message": "Method not found"}})
            return await answer(scope, receive, send)
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


@asynccontextmanager
async def merchant(refuse_discover: bool = False) -> AsyncIterator[tuple[str, Seen]]:
    app = create_app(ucp_version=versions.NEW)
    seen = Seen(app, refuse_discover)
    async with serve(seen) as url:
        yield url + "/ucp/mcp", seen


async def test_the_merchant_is_spoken_to_in_plain_posts_and_answers_as_to_the_sdk() -> None:
    async with merchant() as (endpoint, seen):
        lean, sdk = McpCheckout(endpoint, 5), McpCheckout(endpoint, 5, client="sdk")
        try:
            first, second = await outcome(lean), await outcome(lean)
            assert lean._lean is not None and lean._session is None  # no SDK session
            assert lean.client == "auto"
            assert seen.methods == ["server/discover", "tools/call", "tools/call"]
            assert first == second == await outcome(sdk)
            assert isinstance(first, tuple) and first[0] == 424, first
            assert sdk._session is not None and sdk._lean is None
        finally:
            await lean.aclose()
            await sdk.aclose()


async def test_a_server_without_the_stateless_revision_gets_the_sdk() -> None:
    async with merchant(refuse_discover=True) as (endpoint, seen):
        mcp = McpCheckout(endpoint, 5)
        try:
            answer = await outcome(mcp)
            assert isinstance(answer, tuple) and answer[0] == 424, answer
            assert mcp.client == "sdk" and mcp._lean is None and mcp._session is not None
            assert "initialize" in seen.methods  # the SDK's handshake
            assert seen.methods.count("tools/call") == 1
        finally:
            await mcp.aclose()


async def test_no_answer_drops_the_discovery_and_a_new_server_is_discovered_again() -> None:
    mcp = McpCheckout("", timeout=5)
    try:
        async with merchant() as (endpoint, _):
            mcp.endpoint = endpoint
            assert isinstance(await outcome(mcp), tuple)
        port = int(endpoint.split(":")[2].split("/")[0])
        assert await outcome(mcp) == "no answer"  # the merchant is gone
        assert mcp._lean is None and mcp.client == "auto"
        with pytest.raises(NoAnswer, match="cannot open an MCP session"):
            await mcp.call("get_checkout", ARGUMENTS)  # nobody to discover
        app = Seen(create_app(ucp_version=versions.NEW))
        async with serve(app, port=port):
            assert isinstance(await outcome(mcp), tuple)
            assert app.methods == ["server/discover", "tools/call"]
    finally:
        await mcp.aclose()


# The differential test: scripted answers to tools/call ---------------------------------

RESULT = {"content": [{"type": "text", "text": "{\"id\": \"c1\"}"}],
          "structuredContent": {"id": "c1", "status": "incomplete"}, "resultType": "complete"}


def jsonrpc(ident: Any, **what: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": ident, **what}).encode()


def sse(ident: Any, **what: Any) -> bytes:
    return b"event: message\ndata: " + jsonrpc(ident, **what) + b"\n\n"


JSON = "application/json"
#: name: (status, content type, body of the request id); the SDK's reading of
#: each is the oracle.
ANSWERS: dict[str, tuple[int, str, Any]] = {
    "a result": (200, JSON, lambda i: jsonrpc(i, result=RESULT)),
    "a result without resultType": (200, JSON, lambda i: jsonrpc(
        i, result={k: v for k, v in RESULT.items() if k != "resultType"})),
    "a text result": (200, JSON, lambda i: jsonrpc(i, result={
        "content": [{"type": "text", "text": "{\"id\": \"c2\"}"}], "resultType": "complete"})),
    "an error result": (200, JSON, lambda i: jsonrpc(i, result={
        "content": [{"type": "text", "text": "out of stock"}], "isError": True,
        "resultType": "complete"})),
    "a result that is not one": (200, JSON, lambda i: jsonrpc(i, result={
        "content": "no list", "resultType": "complete"})),
    "a UCP error, 409": (200, JSON, lambda i: jsonrpc(i, error={
        "code": -32000, "message": "conflict", "data": {"status": 409, "code": "conflict"}})),
    "a negotiation failure": (200, JSON, lambda i: jsonrpc(i, error={
        "code": -32001, "message": "profile", "data": {"code": "profile_unreachable"}})),
    "invalid params at 400": (400, JSON, lambda i: jsonrpc(i, error={
        "code": -32602, "message": "bad arguments"})),
    "a 404 without JSON-RPC": (404, "text/plain", lambda i: b"not found"),
    "a 500 without JSON-RPC": (500, "text/plain", lambda i: b"oops"),
    "a 503 with JSON, not JSON-RPC": (503, JSON, lambda i: b"{\"busy\": true}"),
    "malformed JSON": (200, JSON, lambda i: b"{\"jsonrpc\": "),
    "an event stream": (200, "text/event-stream", lambda i: sse(i, result=RESULT)),
    "an event stream with an error": (200, "text/event-stream", lambda i: sse(i, error={
        "code": -32000, "message": "gone", "data": {"status": 410}})),
    "202 Accepted": (202, JSON, lambda i: b""),
    "a timeout error without data": (200, JSON, lambda i: jsonrpc(i, error={
        "code": -32001, "message": "timed out"})),
}


class Stub:
    """A stateless MCP server: discover and tools/list answered, tools/call
    answered by the script."""

    def __init__(self) -> None:
        self.answer: tuple[int, str, Any] = ANSWERS["a result"]
        self.calls = 0
        self.app = Starlette(routes=[Route("/mcp", self.endpoint, methods=["POST"])])

    async def endpoint(self, request: Request) -> Response:
        message = json.loads(await request.body())
        ident, method = message.get("id"), message.get("method")
        if method == "server/discover":
            return Response(jsonrpc(ident, result={
                "supportedVersions": [MODERN], "capabilities": {"tools": {}},
                "resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "stub", "version": "1"}},
            }), media_type=JSON)
        if method == "tools/list":
            return Response(jsonrpc(ident, result={"tools": [
                {"name": "get_checkout", "inputSchema": {"type": "object"}}],
                "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}), media_type=JSON)
        if method != "tools/call":
            return Response(jsonrpc(ident, error={"code": -32601, "message": method}),
                            media_type=JSON)
        self.calls += 1
        status, kind, body = self.answer
        return Response(body(ident), status_code=status, headers={"content-type": kind})


@pytest.mark.parametrize("case", list(ANSWERS))
async def test_each_answer_is_read_as_the_sdk_reads_it(case: str) -> None:
    stub = Stub()
    async with serve(stub.app) as url:
        lean = McpCheckout(url + "/mcp", 5)
        sdk = McpCheckout(url + "/mcp", 5, client="sdk")
        try:
            assert await outcome(lean) == await outcome(sdk) == await outcome(sdk)  # warm
            stub.answer = ANSWERS[case]
            ours, theirs = await outcome(lean), await outcome(sdk)
            if case == "malformed JSON":  # the parser's own words differ
                assert isinstance(ours, tuple) and isinstance(theirs, tuple)
                assert ours[0] == theirs[0] == 500 and ours[1]["code"] == theirs[1]["code"]
                for said in ours[1]["content"], theirs[1]["content"]:
                    assert said.startswith("Failed to parse JSON response: "), said
            else:
                assert ours == theirs, (case, ours, theirs)
        finally:
            await lean.aclose()
            await sdk.aclose()


async def test_what_only_the_sdk_speaks_hands_the_call_over_once_and_for_good() -> None:
    stub = Stub()
    async with serve(stub.app) as url:
        mcp = McpCheckout(url + "/mcp", 5)
        try:
            assert isinstance(await outcome(mcp), tuple) and mcp.client == "auto"
            stub.answer = ANSWERS["an event stream"]
            calls = stub.calls
            assert await outcome(mcp) == (200, RESULT["structuredContent"])
            assert stub.calls == calls + 2  # sent lean, then again through the SDK
            assert mcp.client == "sdk" and mcp._session is not None
            stub.answer = ANSWERS["a result"]
            assert await outcome(mcp) == (200, RESULT["structuredContent"])
            assert stub.calls == calls + 3  # later calls go to the SDK only
        finally:
            await mcp.aclose()


async def test_an_answer_to_another_request_is_no_answer() -> None:
    stub = Stub()
    async with serve(stub.app) as url:
        mcp = McpCheckout(url + "/mcp", 5)
        try:
            await outcome(mcp)
            stub.answer = (200, JSON, lambda i: jsonrpc(i + 1000, result=RESULT))
            assert await outcome(mcp) == "no answer"
            assert mcp._lean is None  # dropped: the next call discovers again
        finally:
            await mcp.aclose()


def test_a_client_not_in_clients_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, sdk"):
        McpCheckout("http://127.0.0.1:9/mcp", client="fast")
    assert McpAnswer(200, {}).reason_phrase == "OK"
