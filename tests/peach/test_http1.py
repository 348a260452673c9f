"""The SyncExecutor's lean HTTP/1.1 client and its event-stream decoder, against
real servers on loopback: uvicorn for well-formed answers, raw asyncio servers
for answers no server should send."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from peach import PeachAdapter, SyncExecutor
from peach._sse import Decoder, Event
from peach.errors import ExecutorError
from syncserver.http1 import Client, ProtocolError, TransportError
from syncserver.serving import free_port, serve
from tests.conftest import load

SIMPLE = load("atomic-ucp.lsh")


async def whoami(request: Request) -> JSONResponse:
    """The client's port: the same port twice means the same connection."""
    assert request.client is not None
    body = await request.body()
    return JSONResponse({"port": request.client.port, "body": body.decode()})


async def ticks(request: Request) -> StreamingResponse:
    async def frames() -> AsyncIterator[bytes]:
        yield b": hello\n\n"
        for i in range(3):
            yield b'id: %d\nevent: batch\ndata: {"n": %d}\n\n' % (i, i)

    return StreamingResponse(frames(), media_type="text/event-stream")


APP = Starlette(routes=[Route("/who", whoami, methods=["GET", "POST"]), Route("/ticks", ticks)])


async def test_keep_alive_reuses_one_connection() -> None:
    async with serve(APP) as url:
        client = Client(url)
        first = (await client.request("GET", "/who")).json()
        second = (await client.request("POST", "/who", json_body={"a": 1})).json()
        assert first["port"] == second["port"]
        assert second["body"] == '{"a":1}'
        # Two requests at once need two connections; both are kept afterwards.
        both = await asyncio.gather(*(client.request("GET", "/who") for _ in range(2)))
        assert len({r.json()["port"] for r in both}) == 2
        await client.aclose()


async def test_a_restarted_server_is_reached_on_a_new_connection() -> None:
    port = free_port()
    async with serve(APP, port=port) as url:
        client = Client(url)
        before = (await client.request("GET", "/who")).json()["port"]
    # The kept connection is now closed by the server; the next request notices
    # before any byte of an answer and goes out again on a fresh connection.
    async with serve(APP, port=port):
        after = await client.request("GET", "/who")
        assert after.status == 200 and after.json()["port"] != before
    await client.aclose()


async def test_a_stream_is_read_as_it_arrives() -> None:
    async with serve(APP) as url:
        client = Client(url)
        decoder = Decoder()
        events: list[Event] = []
        async with client.stream("GET", "/ticks", read_timeout=5) as (response, body):
            assert response.status == 200
            async for chunk in body:
                events += decoder.feed(chunk)
        assert events == [Event("batch", f'{{"n": {i}}}', str(i)) for i in range(3)]
        await client.aclose()


@contextlib.asynccontextmanager
async def raw_server(
    answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    """A server that reads a request head and lets ``answer`` reply, bytes as given."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            await answer(reader, writer)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def replying(data: bytes) -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()

    return answer


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",  # cut short
        b"HELLO THERE\r\n\r\n",  # not HTTP
        b"HTTP/1.1 2x0 OK\r\n\r\n",  # no status code
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n",
    ],
)
async def test_a_garbled_or_partial_answer_is_a_protocol_error(data: bytes) -> None:
    async with raw_server(replying(data)) as url:
        client = Client(url)
        with pytest.raises(ProtocolError):
            await client.request("GET", "/x")
        await client.aclose()


async def test_a_connection_closed_before_any_answer_is_an_error() -> None:
    async with raw_server(replying(b"")) as url:
        client = Client(url)
        with pytest.raises(TransportError, match="closed the connection before answering"):
            await client.request("GET", "/x")
        await client.aclose()


async def test_bodies_framed_by_chunks_or_by_the_end_of_the_connection() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    async with raw_server(replying(chunked)) as url:
        assert (await Client(url).request("GET", "/x")).body == b"abcde"
    until_close = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"
    async with raw_server(replying(until_close)) as url:
        assert (await Client(url).request("GET", "/x")).body == b"all of it"


async def test_a_body_in_gzip_or_deflate_is_decoded_any_other_coding_refused() -> None:
    for coding, data in (
        ("gzip", gzip.compress(b"squeezed")),
        ("deflate", zlib.compress(b"squeezed")),
    ):
        head = f"HTTP/1.1 200 OK\r\nContent-Encoding: {coding}\r\nContent-Length: {len(data)}"
        async with raw_server(replying(head.encode() + b"\r\n\r\n" + data)) as url:
            assert (await Client(url).request("GET", "/x")).body == b"squeezed"
    brotli = b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc"
    async with raw_server(replying(brotli)) as url:
        with pytest.raises(ProtocolError, match="content coding this client cannot read: 'br'"):
            await Client(url).request("GET", "/x")


async def test_what_a_request_says_of_itself() -> None:
    """An empty POST says its length (some servers wait for a body otherwise); a
    request's own headers go with it only; none may carry a line break."""
    heads: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError):
            while True:
                heads.append(await reader.readuntil(b"\r\n\r\n"))
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    async with server:
        client = Client(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        await client.request("POST", "/x", headers={"Idempotency-Key": "k1"})
        await client.request("GET", "/x")
        with pytest.raises(ValueError, match="invalid header"):
            await client.request("GET", "/x", headers={"Request-Id": "r\r\nX-Smuggled: 1"})
        await client.aclose()
    post, get = heads
    assert b"Content-Length: 0\r\n" in post and b"Idempotency-Key: k1\r\n" in post
    assert b"Content-Length" not in get and b"Idempotency-Key" not in get
    assert b"Accept-Encoding: identity\r\n" in get


async def test_a_quiet_stream_times_out() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client leaves

    async with raw_server(silent) as url:
        client = Client(url)
        with pytest.raises(TransportError, match="nothing received"):
            async with client.stream("GET", "/events", read_timeout=0.05) as (_, body):
                async for _ in body:
                    pass


async def test_connection_refused() -> None:
    client = Client(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(TransportError, match="cannot connect"):
        await client.request("GET", "/x")


async def test_the_executor_reports_a_refused_or_garbled_server_clearly() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    adapter = PeachAdapter("platform", SIMPLE, "Platform", SyncExecutor(url, "t"))
    with pytest.raises(ExecutorError, match=f"cannot reach the SyncServer at {url}"):
        await adapter.start()
    async with raw_server(replying(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{")) as url:
        adapter = PeachAdapter("platform", SIMPLE, "Platform", SyncExecutor(url, "t"))
        with pytest.raises(ExecutorError, match="in mid-response"):
            await adapter.start()


def test_the_decoder_follows_the_event_stream_rules() -> None:
    decoder = Decoder()
    # CRLF split across chunks, a comment, a field without value, multi-line data.
    assert decoder.feed(b": ping\r\n\r\nid: 7\r") == []
    assert decoder.feed(b"\nevent: batch\r\ndata: a\r\ndata\r\ndata: b\r\n") == []
    assert decoder.feed(b"\r\n") == [Event("batch", "a\n\nb", "7")]
    # The last id carries over; the type does not; no data, no event.
    assert decoder.feed(b"data:x\n\nevent: batch\n\n") == [Event("message", "x", "7")]
    assert decoder.feed(b"id\ndata: y\r\rdata: z\n\n") == [
        Event("message", "y", ""),
        Event("message", "z", ""),
    ]
