"""A hostile look at the lean MCP path (strabo/ucp/_mcp_lean.py) and the way
``McpCheckout`` hands over to the SDK's client: answers test_mcp_lean.py's
table lacks, each compared with ``client="sdk"`` as the oracle; endpoints that
are not URLs; discover answers with odd fields; servers that hang or close
mid-body; concurrent calls during a hand-over; cancellation; ``aclose`` while
calls are in flight.

Where the SDK's client waits for its timeout (an answer to another request id)
the lean path says "no answer" at once: the same outcome, sooner. One known
difference is kept as a strict xfail: the SDK checks a result against the
tool's ``outputSchema`` (listing the tools first), the lean path does not.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from strabo import serve
from strabo.ucp.mcp_transport import McpCheckout
from tests.strabo.ucp.test_mcp_lean import (
    ANSWERS,
    JSON,
    MODERN,
    RESULT,
    Stub,
    jsonrpc,
    outcome,
)

Script = tuple[int, str, Callable[[Any], bytes]]


def _with(**what: Any) -> Callable[[Any], bytes]:
    return lambda i: jsonrpc(i, result={**RESULT, **what})


#: Answers to tools/call the SDK reads in its own way; ours must read them alike.
HOSTILE: dict[str, Script] = {
    "error code as a string": (200, JSON, lambda i: jsonrpc(i, error={
        "code": "-32000", "message": "m", "data": {"status": 409}})),
    "error code as a string, at 400": (400, JSON, lambda i: jsonrpc(i, error={
        "code": "-32602", "message": "m"})),
    "error code as a bool": (200, JSON, lambda i: jsonrpc(i, error={"code": True, "message": "m"})),
    "error code as a whole float": (200, JSON, lambda i: jsonrpc(i, error={
        "code": -32602.0, "message": "m"})),
    "error code 1.5": (200, JSON, lambda i: jsonrpc(i, error={"code": 1.5, "message": "m"})),
    "error without a message": (200, JSON, lambda i: jsonrpc(i, error={"code": -32602})),
    "error without a message, at 400": (400, JSON, lambda i: jsonrpc(i, error={"code": -32602})),
    "error message not a string": (200, JSON, lambda i: jsonrpc(i, error={
        "code": -32602, "message": 5})),
    "error not an object": (200, JSON, lambda i: jsonrpc(i, error="boom")),
    "error and result both": (200, JSON, lambda i: jsonrpc(i, error={
        "code": -32602, "message": "m"}, result=RESULT)),
    "error to another id": (200, JSON, lambda i: jsonrpc(i + 7, error={
        "code": -32602, "message": "m"})),
    "error to id null": (200, JSON, lambda i: jsonrpc(None, error={
        "code": -32602, "message": "m"})),
    "error to id null, at 400": (400, JSON, lambda i: jsonrpc(None, error={
        "code": -32602, "message": "m"})),
    "result to id as a string": (200, JSON, lambda i: jsonrpc(str(i), result=RESULT)),
    "result to id as a float": (200, JSON, lambda i: jsonrpc(float(i), result=RESULT)),
    "result to id true": (200, JSON, lambda i: jsonrpc(True, result=RESULT)),
    "no jsonrpc member": (200, JSON, lambda i: json.dumps({"id": i, "result": RESULT}).encode()),
    "jsonrpc 1.0": (200, JSON, lambda i: json.dumps({
        "jsonrpc": "1.0", "id": i, "result": RESULT}).encode()),
    "a batch": (200, JSON, lambda i: b"[" + jsonrpc(i, result=RESULT) + b"]"),
    "result null": (200, JSON, lambda i: jsonrpc(i, result=None)),
    "result a list": (200, JSON, lambda i: jsonrpc(i, result=[1])),
    "200 with JSON, not JSON-RPC": (200, JSON, lambda i: b"{\"busy\": true}"),
    "200 with an empty body": (200, JSON, lambda i: b""),
    "JSON nested too deep": (200, JSON, lambda i: jsonrpc(i, result=RESULT).replace(
        b"\"incomplete\"", b"[" * 5000 + b"]" * 5000)),
    "JSON nested too deep, at 400": (400, JSON, lambda i: b"{\"a\":" + b"[" * 5000 + b"]" * 5000
                                     + b"}"),
    "a BOM": (200, JSON, lambda i: b"\xef\xbb\xbf" + jsonrpc(i, result=RESULT)),
    "UTF-16": (200, JSON, lambda i: jsonrpc(i, result=RESULT).decode().encode("utf-16")),
    "not UTF-8": (200, JSON, lambda i: jsonrpc(i, result=RESULT).replace(b"c1", b"c\xe91")),
    "a request from the server": (200, JSON, lambda i: json.dumps({
        "jsonrpc": "2.0", "id": 99, "method": "ping"}).encode()),
    "charset": (200, "application/json; charset=utf-8", lambda i: jsonrpc(i, result=RESULT)),
    "upper case": (200, "Application/JSON", lambda i: jsonrpc(i, result=RESULT)),
    "application/json-seq": (200, "application/json-seq", lambda i: jsonrpc(i, result=RESULT)),
    "text/plain": (200, "text/plain", lambda i: jsonrpc(i, result=RESULT)),
    "201 with JSON": (201, JSON, lambda i: jsonrpc(i, result=RESULT)),
    "302": (302, "text/plain", lambda i: b"elsewhere"),
    "401": (401, "text/plain", lambda i: b"who are you"),
    "403 with a JSON-RPC error": (403, JSON, lambda i: jsonrpc(i, error={
        "code": -32000, "message": "forbidden", "data": {"status": 403}})),
    "400 with a result": (400, JSON, lambda i: jsonrpc(i, result=RESULT)),
    "a huge body": (200, JSON, _with(structuredContent={"blob": "x" * 2_000_000})),
    "a negative ttlMs": (200, JSON, _with(ttlMs=-5)),
    "resultType not a string": (200, JSON, _with(resultType=5)),
    "structuredContent a list": (200, JSON, _with(structuredContent=[1])),
    "isError a string": (200, JSON, _with(isError="yes")),
    "a header mismatch, every time": (400, JSON, lambda i: jsonrpc(i, error={
        "code": -32020, "message": "Mcp-Name does not match"})),
    "-32022 to a tool call": (400, JSON, lambda i: jsonrpc(i, error={
        "code": -32022, "message": "v", "data": {"supported": ["2099-01-01"]}})),
}
#: Those the SDK's client waits on until its timeout (no answer for both).
WAITED_ON = {"error to another id", "error to id null", "a request from the server"}


def same(answer: tuple[int, Any] | str) -> tuple[int, Any] | str:
    """An outcome without what differs by the request's id: the parser's words
    quote the body, so only their first line is compared."""
    if isinstance(answer, tuple) and isinstance(answer[1], dict) and str(
            answer[1].get("content", "")).startswith("Failed to parse JSON response: "):
        return answer[0], {**answer[1], "content": answer[1]["content"].split("\n")[0]}
    return answer


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_a_hostile_answer_is_read_as_the_sdk_reads_it(case: str) -> None:
    stub = Stub()
    timeout = 1.0 if case in WAITED_ON else 5
    async with serve(stub.app) as url:
        lean = McpCheckout(url + "/mcp", timeout)
        sdk = McpCheckout(url + "/mcp", timeout, client="sdk")
        try:
            assert await outcome(lean) == await outcome(sdk)  # both warm, on the lean path
            assert lean._lean is not None
            stub.answer = HOSTILE[case]
            ours, theirs = await asyncio.gather(outcome(lean), outcome(sdk))
            assert same(ours) == same(theirs), (case, ours, theirs)
        finally:
            await lean.aclose()
            await sdk.aclose()


@pytest.mark.parametrize("endpoint", ["ftp://127.0.0.1:9/mcp", "http:///mcp", "not a url"])
async def test_an_endpoint_that_is_not_a_url_is_no_answer_for_both(endpoint: str) -> None:
    # A profile names the endpoint: any string. The lean client's HTTP client
    # refused it with a ValueError, which no caller of call() expects.
    for client in ("auto", "sdk"):
        mcp = McpCheckout(endpoint, 2, client=client)
        try:
            assert await outcome(mcp) == "no answer"
        finally:
            await mcp.aclose()


# discover ------------------------------------------------------------------------------

DISCOVERED = {"supportedVersions": [MODERN], "capabilities": {"tools": {}},
              "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}


class Scripted(Stub):
    """The stub, with server/discover answered by a script when there is one,
    and each method gated: a request of a method in :attr:`held` waits for
    :attr:`release` (after setting :attr:`arrived`)."""

    def __init__(self, discover: Script | None = None, held: str = "") -> None:
        super().__init__()
        self.discover, self.held = discover, held
        self.arrived, self.release = asyncio.Event(), asyncio.Event()
        self.methods: list[str] = []

    async def endpoint(self, request: Request) -> Response:
        message = json.loads(await request.body())  # Starlette keeps it for super()
        method = message.get("method")
        self.methods.append(method)
        if method == self.held and not self.release.is_set():
            self.arrived.set()
            await self.release.wait()
        if method == "server/discover" and self.discover is not None:
            status, kind, body = self.discover
            return Response(body(message["id"]), status_code=status, headers={"content-type": kind})
        return await super().endpoint(request)


DISCOVERIES: dict[str, tuple[Script, bool]] = {
    # name: (the answer to server/discover, whether the lean client keeps it)
    "a negative ttlMs": ((200, JSON, lambda i: jsonrpc(i, result={**DISCOVERED, "ttlMs": -1})),
                         True),
    "an id as a string": ((200, JSON, lambda i: jsonrpc(str(i), result=DISCOVERED)), True),
    "without resultType": ((200, JSON, lambda i: jsonrpc(i, result={
        k: v for k, v in DISCOVERED.items() if k != "resultType"})), True),
    "old and unknown versions too": ((200, JSON, lambda i: jsonrpc(i, result={
        **DISCOVERED, "supportedVersions": ["2025-11-25", MODERN, "2099-01-01"]})), True),
    "only old versions": ((200, JSON, lambda i: jsonrpc(i, result={
        **DISCOVERED, "supportedVersions": ["2025-11-25"]})), False),
    "versions as a string": ((200, JSON, lambda i: jsonrpc(i, result={
        **DISCOVERED, "supportedVersions": MODERN})), False),
    "-32022 naming ours": ((200, JSON, lambda i: jsonrpc(i, error={
        "code": -32022, "message": "v", "data": {"supported": [MODERN]}})), False),
    "-32022 naming a future one": ((400, JSON, lambda i: jsonrpc(i, error={
        "code": -32022, "message": "v", "data": {"supported": ["2099-01-01"]}})), False),
    "an event stream": ((200, "text/event-stream", lambda i: b"event: message\ndata: "
                         + jsonrpc(i, result=DISCOVERED) + b"\n\n"), False),
    "malformed JSON": ((200, JSON, lambda i: b"{"), False),
    "a 404": ((404, "text/plain", lambda i: b"no"), False),
}


@pytest.mark.parametrize("case", list(DISCOVERIES))
async def test_an_odd_discover_answer_gives_the_outcome_the_sdk_gives(case: str) -> None:
    script, kept = DISCOVERIES[case]
    stub = Scripted(script)
    async with serve(stub.app) as url:
        lean, sdk = McpCheckout(url + "/mcp", 5), McpCheckout(url + "/mcp", 5, client="sdk")
        try:
            assert await outcome(lean) == await outcome(sdk), case
            # spoken to lean only where the SDK's client goes modern too
            assert (lean._lean is not None) == kept, (case, stub.methods)
            assert lean.client == ("auto" if kept else "sdk")
        finally:
            await lean.aclose()
            await sdk.aclose()


async def test_a_discover_answered_for_another_id_is_no_answer_within_the_timeout() -> None:
    # The SDK's probe waits for its own id; a session still opening when the
    # timeout ran out was waited on a second time (a call took twice its timeout).
    stub = Scripted((200, JSON, lambda i: jsonrpc(i + 5, result=DISCOVERED)))
    async with serve(stub.app) as url:
        lean, sdk = McpCheckout(url + "/mcp", 1), McpCheckout(url + "/mcp", 1, client="sdk")
        try:
            started = time.monotonic()
            assert list(await asyncio.gather(outcome(lean), outcome(sdk))) == ["no answer"] * 2
            assert time.monotonic() - started < 1.9
        finally:
            await lean.aclose()
            await sdk.aclose()


# servers that hang or break ------------------------------------------------------------

@pytest.mark.parametrize("held", ["tools/call", "server/discover"])
async def test_a_server_that_never_answers_is_no_answer_within_the_timeout(held: str) -> None:
    stub = Scripted(held=held)
    async with serve(stub.app) as url:
        lean, sdk = McpCheckout(url + "/mcp", 1), McpCheckout(url + "/mcp", 1, client="sdk")
        if held == "tools/call":  # discovered, and the SDK's session open, first
            stub.release.set()
            assert isinstance(await outcome(lean), tuple) and isinstance(await outcome(sdk), tuple)
            stub.release.clear()
        try:
            started = time.monotonic()
            assert list(await asyncio.gather(outcome(lean), outcome(sdk))) == ["no answer"] * 2
            assert time.monotonic() - started < 1.9
        finally:
            stub.release.set()
            await lean.aclose()
            await sdk.aclose()


@asynccontextmanager
async def breaking_server() -> AsyncIterator[str]:
    """Discover answered; each tools/call answered with half its body, then the
    connection closed."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                message = json.loads(await reader.readexactly(length))
                out = jsonrpc(message["id"], result=(
                    DISCOVERED if message["method"] == "server/discover" else RESULT))
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n" % len(out))
                if message["method"] != "server/discover":
                    writer.write(out[:20])
                    await writer.drain()
                    return
                writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp"
    finally:
        server.close()
        await server.wait_closed()


async def test_a_server_that_closes_mid_body_is_no_answer_for_both() -> None:
    async with breaking_server() as url:
        lean, sdk = McpCheckout(url, 2), McpCheckout(url, 2, client="sdk")
        try:
            assert await outcome(lean) == await outcome(sdk) == "no answer"
            assert lean._lean is None and lean.client == "auto"  # discovered anew next time
        finally:
            await lean.aclose()
            await sdk.aclose()


# concurrency, cancellation, aclose -----------------------------------------------------

def session_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("mcp session")]


async def test_concurrent_calls_discover_once_and_hand_over_together() -> None:
    stub = Scripted()
    async with serve(stub.app) as url:
        mcp = McpCheckout(url + "/mcp", 5)
        try:
            first = await asyncio.gather(*[outcome(mcp) for _ in range(20)])
            assert first == [(200, RESULT["structuredContent"])] * 20
            assert stub.methods.count("server/discover") == 1 and stub.calls == 20
            stub.answer = ANSWERS["an event stream"]  # what only the SDK speaks
            then = await asyncio.gather(*[outcome(mcp) for _ in range(20)])
            assert then == [(200, RESULT["structuredContent"])] * 20
            assert stub.calls == 60  # each sent lean once, then once through the SDK
            assert mcp.client == "sdk" and len(session_tasks()) == 1
            assert len(mcp._retired) == 1
        finally:
            await mcp.aclose()
        assert session_tasks() == []


async def test_aclose_during_a_hand_over_opens_no_sdk_session() -> None:
    stub = Scripted(held="tools/call")
    async with serve(stub.app) as url:
        mcp = McpCheckout(url + "/mcp", 5)
        try:
            stub.release.set()
            assert isinstance(await outcome(mcp), tuple)
            stub.release.clear()
            stub.answer = ANSWERS["an event stream"]
            call = asyncio.create_task(outcome(mcp))
            await stub.arrived.wait()
            await mcp.aclose()
            stub.release.set()
            assert await call == "no answer"
            assert mcp._session is None and session_tasks() == []
        finally:
            await mcp.aclose()


async def test_aclose_during_discover_keeps_no_lean_client_and_a_new_call_opens_anew() -> None:
    stub = Scripted(held="server/discover")
    async with serve(stub.app) as url:
        mcp = McpCheckout(url + "/mcp", 5)
        try:
            call = asyncio.create_task(outcome(mcp))
            await stub.arrived.wait()
            await mcp.aclose()
            stub.release.set()
            assert await call == "no answer"
            assert mcp._lean is None and mcp._session is None
            # aclose is no end: a restarted proxy calls again (strabo/ucp/negotiation.py)
            assert await outcome(mcp) == (200, RESULT["structuredContent"])
            assert mcp._lean is not None
        finally:
            await mcp.aclose()


async def test_aclose_while_lean_calls_are_in_flight_leaves_no_connection_open() -> None:
    stub = Scripted(held="tools/call")
    async with serve(stub.app) as url:
        mcp = McpCheckout(url + "/mcp", 5)
        try:
            stub.release.set()
            assert isinstance(await outcome(mcp), tuple)
            lean = mcp._lean
            assert lean is not None
            stub.release.clear()
            calls = [asyncio.create_task(outcome(mcp)) for _ in range(5)]
            await stub.arrived.wait()
            await mcp.aclose()
            stub.release.set()
            for answer in await asyncio.gather(*calls):
                assert answer == (200, RESULT["structuredContent"])
            http = lean.client.http  # type: ignore[attr-defined]
            assert http._closed and http._idle == []
        finally:
            await mcp.aclose()


@pytest.mark.parametrize("held", ["tools/call", "server/discover"])
async def test_a_call_cancelled_mid_flight_leaves_the_next_one_working(held: str) -> None:
    stub = Scripted(held=held)
    async with serve(stub.app) as url:
        mcp = McpCheckout(url + "/mcp", 5)
        try:
            call = asyncio.create_task(outcome(mcp))
            await stub.arrived.wait()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert not mcp._opening.locked()
            stub.release.set()
            assert await outcome(mcp) == (200, RESULT["structuredContent"])
            assert mcp.client == "auto" and mcp._lean is not None
        finally:
            stub.release.set()
            await mcp.aclose()


# a known difference ---------------------------------------------------------------------

class Schemed(Stub):
    """Tools listed with an output schema the results do not meet."""

    async def endpoint(self, request: Request) -> Response:
        message = json.loads(await request.body())
        if message.get("method") == "tools/list":
            return Response(jsonrpc(message["id"], result={"tools": [{
                "name": "get_checkout", "inputSchema": {"type": "object"},
                "outputSchema": {"type": "object", "required": ["totals"]}}],
                "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}), media_type=JSON)
        return await super().endpoint(request)


@pytest.mark.xfail(strict=True, reason="the lean path does not list the tools to check a "
                   "result against its outputSchema; the SDK's client refuses it (no answer)")
async def test_a_result_against_the_tools_output_schema() -> None:
    stub = Schemed()
    async with serve(stub.app) as url:
        lean, sdk = McpCheckout(url + "/mcp", 5), McpCheckout(url + "/mcp", 5, client="sdk")
        try:
            assert await outcome(sdk) == "no answer"
            assert await outcome(lean) == "no answer"
        finally:
            await lean.aclose()
            await sdk.aclose()



@pytest.mark.parametrize("client", ["auto", "sdk"])
async def test_aclose_while_the_sdk_session_opens_is_no_answer_not_a_cancellation(
        client: str) -> None:
    # A session still opening is cancelled at once (aclose waited out the whole
    # timeout on it); a call waiting for it to open must not take that
    # cancellation for its own.
    stub = Scripted(DISCOVERIES["only old versions"][0], held="initialize")
    async with serve(stub.app) as url:
        mcp = McpCheckout(url + "/mcp", 5, client=client)
        try:
            call = asyncio.create_task(outcome(mcp))
            await stub.arrived.wait()
            started = time.monotonic()
            await mcp.aclose()
            assert await call == "no answer"
            assert time.monotonic() - started < 2.5  # not the timeout, 5 s
            assert session_tasks() == []
        finally:
            stub.release.set()
            await mcp.aclose()
