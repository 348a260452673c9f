"""The proxy's lean HTTP client, reading answers, (syncserver.http1 through syncserver.client)
against real servers on loopback that misbehave.

Whatever the merchant does (garbles, truncates, trickles, never answers, closes
kept-alive connections, sends gzip, chunks, 1xx, 204/304), a proxy request ends
in a correct answer or a precise ProxyError (ProxyUnreachable, ProxyHTTPError,
ProxyRequestError), in bounded time, with every connection closed at the end,
and a request the server received and answered is never sent again by the
client on its own (the server counts what it received).

The servers: :class:`RawServer`, an asyncio socket server each test scripts
byte by byte, and uvicorn (``syncserver.serving.serve``) for well-formed
answers. Every server connection must be closed when the proxy has stopped:
:class:`RawServer` fails the test otherwise (a leaked connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
import zlib
from collections.abc import Awaitable, Callable

import pytest

from strabo.proxy import (
    ProxyUnreachable,
)
from syncserver.client import LeanClient
from tests.hostile._proxy_wire import (
    CREATED,
    SENT,
    Conn,
    RawServer,
    Script,
    bridged,
    chunked,
    http,
    keep_alive,
    no_proxy_environment,  # noqa: F401 (autouse)
    once,
    unreachable,
)

# A connection dropped without being closed is a failure, not a warning. Only
# sockets and transports: a file another test of the same worker left open may
# be collected during any test, and is not this test's failure.
pytestmark = [
    pytest.mark.filterwarnings("error:unclosed <socket:ResourceWarning"),
    pytest.mark.filterwarnings("error:unclosed transport:ResourceWarning"),
]


# Well-formed answers, every framing -------------------------------------------------------


async def test_requests_go_out_lean_and_well_formed_on_one_kept_connection() -> None:
    async with (
        RawServer(keep_alive(http("201 Created", b'{"id": "chk_1"}'))) as raw,
        bridged(raw.url) as bridge,
    ):
        assert isinstance(bridge.client, LeanClient)
        answers = [await bridge.create(f"key-{i}") for i in range(3)]
    assert answers == [{"id": "chk_1"}] * 3
    assert raw.connections == 1 and raw.keys() == ["key-0", "key-1", "key-2"]
    first = raw.requests[0]
    assert (first.method, first.target) == ("POST", "/c")
    assert first.header("host") == [raw.url.removeprefix("http://")]
    assert first.header("content-type") == ["application/json"]
    assert first.header("content-length") == [str(len(first.body))]
    assert first.header("accept-encoding") == ["identity"]
    assert json.loads(first.body) == SENT  # the internal cid stays off the wire


FRAMINGS = {
    # name: (response, does the server close after it, connections two requests take)
    "content-length": (http(), False, 1),
    "chunked, extensions and trailers": (
        http("201 Created", chunked(b'{"id": ', b'"chk_1"}', extension=";x=y",
                                    trailers="X-Trailer: t\r\n"),
             "Transfer-Encoding: chunked", length=False),
        False, 1,
    ),
    "chunked wins over content-length": (
        http("201 Created", chunked(CREATED), "Transfer-Encoding: chunked",
             "Content-Length: 3", length=False),
        False, 1,
    ),
    "until the end of the connection": (http(length=False), True, 2),
    "connection: close, socket left open": (http("201 Created", CREATED, "Connection: close"),
                                            False, 2),
    "HTTP/1.0 without keep-alive, socket left open": (http(version="HTTP/1.0"), False, 2),
    "HTTP/1.0 keep-alive": (http("200 OK", CREATED, "Connection: keep-alive",
                                 version="HTTP/1.0"), False, 1),
    "gzip": (http("201 Created", gzip.compress(CREATED), "Content-Encoding: gzip"), False, 1),
    "deflate (zlib)": (http("201 Created", zlib.compress(CREATED), "Content-Encoding: deflate"),
                       False, 1),
    "gzip in chunks": (
        http("201 Created", chunked(*(bytes([b]) for b in gzip.compress(CREATED))),
             "Transfer-Encoding: chunked", "Content-Encoding: GZIP", length=False),
        False, 1,
    ),
    "100 Continue and 103 Early Hints first": (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + http(),
        False, 1,
    ),
    "no reason phrase, odd header case": (
        b'HTTP/1.1 201\r\nCONTENT-length: 15\r\ncOnTeNt-TyPe: application/json\r\n\r\n'
        + CREATED, False, 1,
    ),
    "a 60 KB head": (http("201 Created", CREATED, "X-Big: " + "b" * 60_000), False, 1),
    "a thousand headers": (http("201 Created", CREATED, *(f"X-{i}: {i}" for i in range(1000))),
                           False, 1),
}


@pytest.mark.parametrize("framing", list(FRAMINGS))
async def test_answers_framed_every_way_are_read_and_the_connection_kept_or_not(
    framing: str,
) -> None:
    data, close, connections = FRAMINGS[framing]

    async def script(conn: Conn) -> None:
        while await conn.request() is not None:
            conn.send(data)
            if close:
                await conn.close()
                return

    async with RawServer(script) as raw, bridged(raw.url) as bridge:
        assert await bridge.create("key-1") == {"id": "chk_1"}
        assert await bridge.create("key-2") == {"id": "chk_1"}
    assert raw.keys() == ["key-1", "key-2"]
    assert raw.connections == connections


async def test_a_large_body_arrives_whole() -> None:
    big = {"id": "chk_1", "blob": "x" * 3_000_000}
    body = json.dumps(big).encode()
    plain = http("201 Created", body)
    zipped = http("201 Created", gzip.compress(body), "Content-Encoding: gzip")
    unframed = http("201 Created", body, "Connection: close", length=False)

    async def script(conn: Conn) -> None:
        while await conn.request() is not None:
            conn.send([plain, zipped, unframed][len(conn.server.requests) - 1])
            if len(conn.server.requests) == 3:
                await conn.close()
                return

    async with RawServer(script) as raw, bridged(raw.url) as bridge:
        for key in ("a", "b", "c"):
            assert await bridge.create(key) == big
    assert len(raw.requests) == 3


async def test_204_and_304_have_no_body_and_keep_the_connection() -> None:
    answers = (http("204 No Content", b"", length=False), http("304 Not Modified", b"",
               length=False), http())
    async with RawServer(keep_alive(*answers)) as raw, bridged(raw.url) as bridge:
        bindings = {"cid": "c-1", "id": "chk 1/x"}
        assert await bridge.proxy.request("Cancel", bindings, idempotency_key="k1") == {}
        assert await bridge.create("k2") == {}
        assert await bridge.create("k3") == {"id": "chk_1"}
    cancel = raw.requests[0]
    assert (cancel.method, cancel.target, cancel.body) == ("DELETE", "/c/chk%201%2Fx", b"")
    assert cancel.header("content-length") == [] and cancel.header("content-type") == []
    assert raw.connections == 1 and len(raw.requests) == 3


# An empty body is empty in any content coding (a 204 or 304 may name one).
@pytest.mark.parametrize("status", ["204 No Content", "304 Not Modified", "200 OK"])
async def test_an_empty_body_with_a_content_coding_is_empty(status: str) -> None:
    answer = http(status, b"", "Content-Encoding: gzip", length=status == "200 OK")
    async with RawServer(keep_alive(answer)) as raw, bridged(raw.url) as bridge:
        assert await bridge.create() == {}
    assert len(raw.requests) == 1


async def test_a_trickling_answer_is_read_whole() -> None:
    body = chunked(b'{"id":', b' "chk_1"}')
    data = http("201 Created", body, "Transfer-Encoding: chunked", "Content-Encoding: identity",
                length=False)
    cuts = [3, 9, 13, 14, 20, data.index(b"\r\n\r\n") + 1, data.index(b"\r\n\r\n") + 3,
            data.index(b"\r\n\r\n") + 5, len(data) - 4, len(data) - 1]

    async def script(conn: Conn) -> None:
        while await conn.request() is not None:
            start = 0
            for cut in [*cuts, len(data)]:
                conn.send(data[start:cut])
                await conn.writer.drain()
                await asyncio.sleep(0.005)  # the server's pace: a slow merchant, not a race fix
                start = cut

    async with RawServer(script) as raw, bridged(raw.url) as bridge:
        assert await bridge.create("a") == {"id": "chk_1"}
        assert await bridge.create("b") == {"id": "chk_1"}
    assert raw.connections == 1


# Hostile answers: a precise ProxyUnreachable, one try, the connection dropped ----------

HUGE = 70 * 1024
HOSTILE = {
    # name: (bytes sent, does the server close after them, what the error says)
    "closed before answering": (b"", True, "closed the connection before answering"),
    "garbage status line": (b"garbage\r\n\r\n", False, "not an HTTP/1.1 status line"),
    "four-digit status": (b"HTTP/1.1 2000 OK\r\n\r\n", False, "not an HTTP/1.1 status line"),
    "HTTP/2 status line": (b"HTTP/2 200 OK\r\n\r\n", False, "not an HTTP/1.1 status line"),
    "binary junk": (b"\x00\xff\xfe\x16\x03\r\n\r\n", False, "not an HTTP/1.1 status line"),
    "header without colon": (b"HTTP/1.1 200 OK\r\nnocolon\r\n\r\n", False, "bad header line"),
    "folded header": (b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", False, "bad header line"),
    "bad content-length": (b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", False,
                           "bad Content-Length"),
    "negative content-length": (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", False,
                                "bad Content-Length"),
    "two content-lengths": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n"
                            b"\r\n{}", False, "bad Content-Length"),
    "head cut short": (b"HTTP/1.1 200 OK\r\nContent-Le", True, "in the middle of the response"),
    "body cut short": (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{", True,
                       "closed the connection in mid-response"),
    "bad chunk size": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", False,
                       "bad chunk size line"),
    "chunk longer than said": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                               b"2\r\n{}XX\r\n0\r\n\r\n", False, "does not end where its size"),
    "chunks cut short": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"20\r\n{", True, "mid-response"),
    "endless chunk size line": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                + b"f" * HUGE, False, "chunk size line is too long"),
    "not gzip": (http("200 OK", b"not gzip at all", "Content-Encoding: gzip"), False,
                 "does not decode"),
    "unknown coding": (http("200 OK", b"xx", "Content-Encoding: br"), False,
                       "content coding this client cannot read"),
    "switching protocols": (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", False,
                            "switched protocols"),
    "a 70 KB head": (http("200 OK", CREATED, "X-Big: " + "b" * HUGE), False, "exceeds"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_a_hostile_answer_is_unreachable_after_one_try(case: str) -> None:
    data, close, says = HOSTILE[case]
    async with RawServer(once(data, close=close)) as raw, bridged(raw.url) as bridge:
        error = await unreachable(bridge)
        assert raw.open == 0 or not close  # the server's own closes are done
    assert says in str(error), str(error)
    assert str(error).startswith(f"POST {raw.url}/c: no answer (")
    assert error.code == "unreachable" and error.attempts == 1 and error.route == "Create"
    assert len(raw.requests) == 1  # not resent by the client


# Digits str.isdigit() takes but int() does not ("²") are a garbled answer, not
# a request that cannot be sent.
@pytest.mark.parametrize(
    "data",
    [b"HTTP/1.1 2\xb2\xb2 OK\r\nContent-Length: 0\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n{}"],
    ids=["status", "content-length"],
)
async def test_unicode_digits_in_a_head_are_garbage_not_an_unsendable_request(
    data: bytes,
) -> None:
    async with RawServer(once(data, close=False)) as raw, bridged(raw.url) as bridge:
        error = await unreachable(bridge)
    assert "no answer (" in str(error) and len(raw.requests) == 1


async def test_retries_of_a_garbled_answer_carry_one_key_on_fresh_connections() -> None:
    async with (
        RawServer(once(b"HTTP/9 OK\r\n\r\n", close=False)) as raw,
        bridged(raw.url, retries=2) as bridge,
    ):
        error = await unreachable(bridge, "the-key")
    assert error.attempts == 3 and error.gave_up is not None
    assert raw.keys() == ["the-key"] * 3 and raw.connections == 3


async def test_a_server_that_never_answers_times_out_and_is_hung_up_on() -> None:
    async def silent(conn: Conn) -> None:
        await conn.request()  # then nothing: the client must give up and close

    async with RawServer(silent) as raw, bridged(raw.url, timeout=0.3, retries=1) as bridge:
        started = time.monotonic()
        error = await unreachable(bridge, "k")
        took = time.monotonic() - started
        await raw.wait(lambda: raw.open == 0, "both connections closed by the client")
    assert "no answer within 0.3s" in str(error) and error.attempts == 2
    assert raw.keys() == ["k", "k"] and raw.connections == 2
    assert 0.6 <= took < 2.0


async def test_an_answer_trickling_past_the_timeout_is_cut_off() -> None:
    async def trickle(conn: Conn) -> None:
        await conn.request()
        data = http("200 OK", b"x" * 10_000)
        for i in range(len(data)):  # one byte every 20 ms: 200 s for the whole
            conn.send(data[i : i + 1])
            await conn.writer.drain()
            await asyncio.sleep(0.02)  # the server's pace, not a race fix

    async with RawServer(trickle) as raw, bridged(raw.url, timeout=0.4) as bridge:
        started = time.monotonic()
        error = await unreachable(bridge)
        assert time.monotonic() - started < 1.5
    assert "no answer within 0.4s" in str(error) and len(raw.requests) == 1


async def test_a_cancelled_request_drops_its_connection() -> None:
    async def silent(conn: Conn) -> None:
        await conn.request()

    async with RawServer(silent) as raw, bridged(raw.url) as bridge:
        task = asyncio.create_task(bridge.create())
        await raw.wait(lambda: len(raw.requests) == 1, "the request")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await raw.wait(lambda: raw.open == 0, "the connection closed by the client")


# Kept-alive connections the server closes: resent only when nothing was answered -------


def on_second(then: Callable[[Conn], Awaitable[None]]) -> Script:
    """Connection 0 answers its first request and keeps alive; its second
    request gets ``then``. Later connections answer everything."""

    async def script(conn: Conn) -> None:
        while await conn.request() is not None:
            if conn.index == 0 and len(conn.server.requests) == 2:
                await then(conn)
                return
            conn.send(http())

    return script


async def test_a_reused_connection_closed_unanswered_is_resent_with_its_key() -> None:
    async def hang_up(conn: Conn) -> None:
        await conn.close()

    async with RawServer(on_second(hang_up)) as raw, bridged(raw.url) as bridge:
        assert await bridge.create("k1") == {"id": "chk_1"}
        assert await bridge.create("k2") == {"id": "chk_1"}
    first, lost, again = raw.requests
    assert (first.connection, lost.connection, again.connection) == (0, 0, 1)
    assert lost.raw == again.raw and again.key == "k2"  # the very same request, same key


@pytest.mark.parametrize(
    ("partial", "says"),
    [(b"HTTP/1.1 201 Created\r\nContent-Length: 15\r\n\r\n{\"id", "mid-response"),
     (b"HTTP/1.1 201 Cre", "in the middle of the response head")],
    ids=["body cut", "head cut"],
)
async def test_an_answer_cut_short_on_a_reused_connection_is_not_resent(
    partial: bytes, says: str
) -> None:
    async def cut(conn: Conn) -> None:
        conn.send(partial)
        await conn.close()

    async with RawServer(on_second(cut)) as raw, bridged(raw.url) as bridge:
        await bridge.create("k1")
        error = await unreachable(bridge, "k2")
    assert says in str(error)
    assert raw.keys() == ["k1", "k2"]  # k2 received and (partly) answered: sent once


# An interim answer (100, 102, 103) proves the request arrived: a connection that
# closes after it does not make the request go out again.
async def test_a_request_answered_with_100_continue_is_not_resent() -> None:
    async def interim_then_close(conn: Conn) -> None:
        conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        await conn.writer.drain()
        await conn.close()

    async with RawServer(on_second(interim_then_close)) as raw, bridged(raw.url) as bridge:
        await bridge.create("k1")
        with contextlib.suppress(ProxyUnreachable):
            await bridge.create("k2")
    assert raw.keys() == ["k1", "k2"]


async def test_a_server_closing_every_kept_connection_gets_each_request_once() -> None:
    async def answer_and_close(conn: Conn) -> None:
        if await conn.request() is not None:
            conn.send(http())  # keep-alive said (HTTP/1.1, no Connection: close), yet closed
            await conn.close()

    async with RawServer(answer_and_close) as raw, bridged(raw.url) as bridge:
        for i in range(4):
            assert await bridge.create(f"k{i}") == {"id": "chk_1"}
    assert raw.keys() == ["k0", "k1", "k2", "k3"] and raw.connections == 4


async def test_concurrent_requests_get_their_own_answers() -> None:
    count = 4
    answered = [0]

    async def echo_in_reverse(conn: Conn) -> None:
        server = conn.server
        while (req := await conn.request()) is not None:
            rank = server.requests.index(req)
            if rank < count:  # the first batch: all in, then answered last first
                await server.wait(lambda r=rank: answered[0] == count - 1 - r, "my turn")
            conn.send(http("201 Created", json.dumps({"id": req.key}).encode()))
            answered[0] += 1
            server.changed.set()

    async with RawServer(echo_in_reverse) as raw, bridged(raw.url) as bridge:
        keys = [f"k{i}" for i in range(count)]
        answers = await asyncio.gather(*(bridge.create(k) for k in keys))
        assert answers == [{"id": k} for k in keys]
        again = [await bridge.create(f"again-{i}") for i in range(count)]
        assert again == [{"id": f"again-{i}"} for i in range(count)]
    assert raw.connections == count  # the later ones reused the kept connections


