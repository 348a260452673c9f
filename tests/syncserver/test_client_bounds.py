"""The HTTP clients read bounded answers: a body of at most ``max_body`` bytes,
as it arrives and once decoded, and each event of a stream as much.

Against a raw HTTP/1.1 server on loopback that answers as a hostile or broken
service would: a ``Content-Length`` of a gigabyte with little behind it, a
chunked or close-delimited body that goes on past the bound, a gzip bomb, an
event stream whose one event never ends. The lean client and httpx alike
(where their code differs): each refusal is a ``TooLarge`` (a ``NoAnswer``)
naming the URL and the bound, comes at once (not at the timeout), and closes
the connection, which is never reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import tracemalloc
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from syncserver import http1
from syncserver.client import (
    Client,
    HttpxClient,
    LeanClient,
    NoAnswer,
    TooLarge,
    open_client,
)

MiB = 1024 * 1024
BOUND = MiB
#: What the endless answers send at most: far past the bound, and past what the
#: loopback's socket buffers hold, so that a server that could send it all
#: shows a client that read it all.
FLOOD = 32 * MiB
#: Long enough never to be what ends a test: a refusal must come before it.
TIMEOUT = 60.0
#: What a test waits for a refusal (against TIMEOUT, the client's own).
PROMPTLY = 10.0

GIGABYTE = 1_000_000_000
#: A few KiB of gzip that inflate to 32 MiB of zeros (made here, not while a
#: test counts what is allocated).
BOMB = gzip.compress(bytes(FLOOD))


class Service:
    """A raw HTTP/1.1 server on loopback answering by path (see :meth:`answer`);
    it counts the connections, and tells each one the client closed."""

    def __init__(self) -> None:
        self.url = ""
        self.connections = 0
        self.sent = 0  # bytes of the last flood
        self.left: asyncio.Queue[str] = asyncio.Queue()  # a connection's last path

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        path = ""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                if not await self.answer(path, writer):
                    break
            with contextlib.suppress(ConnectionError):
                await reader.read()  # until the client closes its end
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client left
        finally:
            writer.close()
            self.left.put_nowait(path)

    async def answer(self, path: str, writer: asyncio.StreamWriter) -> bool:
        """Write the answer ``path`` names; whether the connection stays open
        for another request."""
        name, _, arg = path.strip("/").partition("/")
        if name == "small":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            return True
        if name == "claims":  # a gigabyte said, a kilobyte sent, then nothing
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % GIGABYTE)
            writer.write(b"x" * 1024)
            return False
        if name == "big-chunk":  # one chunk said to be a gigabyte
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            writer.write(b"%x\r\n" % GIGABYTE + b"x" * 1024)
            return False
        if name == "chunks":  # chunks of 64 KiB, past the bound
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            piece = b"10000\r\n" + b"x" * 65536 + b"\r\n"
            if await self.flood(writer, piece):
                writer.write(b"0\r\n\r\n")
            return False
        if name == "until-close":  # no framing: the body ends with the connection
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            await self.flood(writer, b"x" * 65536)
            return False
        if name == "bomb":  # a few KiB of gzip that inflate to 32 MiB of zeros
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
                % len(BOMB)
                + BOMB
            )
            return True
        if name == "exact":  # a body of exactly the bound, in each framing
            body = b"y" * BOUND
            if arg == "gzip":
                packed = gzip.compress(body)
                head = b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed)
                writer.write(b"HTTP/1.1 200 OK\r\n" + head + packed)
            elif arg == "chunked":
                half = BOUND // 2
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                writer.write(b"%x\r\n" % half + body[:half] + b"\r\n")
                writer.write(b"%x\r\n" % half + body[half:] + b"\r\n0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % BOUND + body)
            return True
        if name == "events":  # an event stream: short events, three times the bound
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            event = b"event: batch\r\ndata: " + b"e" * 100_000 + b"\r\n\r\n"
            for _ in range(3 * BOUND // len(event)):
                writer.write(b"%x\r\n" % len(event) + event + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            return True
        if name == "endless-event":  # one event whose data lines never end it
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            line = b"data: " + b"e" * 1000 + b"\n"
            await self.flood(writer, b"%x\r\n" % (64 * len(line)) + line * 64 + b"\r\n")
            return False
        if name == "error":  # an error answer on a stream, its body endless
            writer.write(
                b"HTTP/1.1 500 Oops\r\nContent-Type: text/plain\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            await self.flood(writer, b"10000\r\n" + b"\n" * 65536 + b"\r\n")
            return False
        if name == "upgrade":  # switched, then one endless event
            writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: strabo-channel\r\n\r\n")
            await self.flood(writer, b"data: " + b"e" * 65530)
            return False
        raise AssertionError(f"no such answer: {path}")

    async def flood(self, writer: asyncio.StreamWriter, piece: bytes) -> bool:
        """Write ``piece`` until FLOOD bytes went or the client left; whether
        all went."""
        self.sent = 0
        try:
            while self.sent < FLOOD:
                writer.write(piece)
                await writer.drain()
                self.sent += len(piece)
        except ConnectionError:
            return False
        return True


@contextlib.asynccontextmanager
async def service() -> AsyncIterator[Service]:
    found = Service()
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield found
    finally:
        server.close()
        await server.wait_closed()


def lean(url: str, max_body: int | None) -> Client:
    return LeanClient(url, TIMEOUT) if max_body is None else LeanClient(
        url, TIMEOUT, max_body=max_body
    )


def through_httpx(url: str, max_body: int | None) -> Client:
    # A transport of its own: no proxy from the environment.
    transport = httpx.AsyncHTTPTransport()
    if max_body is None:
        return HttpxClient(url, TIMEOUT, transport)
    return HttpxClient(url, TIMEOUT, transport, max_body=max_body)


CLIENTS = [pytest.param(lean, id="lean"), pytest.param(through_httpx, id="httpx")]
Make = Callable[[str, int | None], Client]


async def refused(client: Client, path: str) -> TooLarge:
    """The TooLarge ``GET path`` gets, promptly."""
    async with asyncio.timeout(PROMPTLY):
        with pytest.raises(TooLarge) as caught:
            await client.request("GET", path)
    return caught.value


@pytest.mark.parametrize("make", CLIENTS)
async def test_a_content_length_over_the_bound_is_refused_unread(make: Make) -> None:
    async with service() as shop:
        client = make(shop.url, BOUND)
        error = await refused(client, "/claims")
        assert isinstance(error, NoAnswer)  # the callers' "no usable answer"
        assert str(error).startswith(f"the answer of {shop.url}/claims exceeds 1 MiB")
        assert f"{GIGABYTE} bytes" in str(error) and "max_body" in str(error)
        # The connection is closed, not kept: the server sees the client leave.
        async with asyncio.timeout(PROMPTLY):
            assert await shop.left.get() == "/claims"
        await client.aclose()


@pytest.mark.parametrize("make", CLIENTS)
async def test_the_default_bound_is_64_mib(make: Make) -> None:
    async with service() as shop:
        client = make(shop.url, None)
        error = await refused(client, "/claims")
        assert str(error).startswith(f"the answer of {shop.url}/claims exceeds 64 MiB")
        await client.aclose()


async def test_open_client_passes_the_bound_to_either_client() -> None:
    lean_client = open_client("http://127.0.0.1:9", 5, max_body=123)
    assert isinstance(lean_client, LeanClient) and lean_client.http.max_body == 123
    other = open_client("http://127.0.0.1:9", 5, httpx.AsyncHTTPTransport(), max_body=123)
    assert isinstance(other, HttpxClient) and other.max_body == 123
    default = open_client("http://127.0.0.1:9", 5)
    assert isinstance(default, LeanClient) and default.http.max_body == 64 * MiB
    for client in (lean_client, other, default):
        await client.aclose()
    with pytest.raises(ValueError, match="max_body"):
        open_client("http://127.0.0.1:9", 5, max_body=0)


async def test_a_chunk_said_to_be_over_the_bound_is_refused_unread() -> None:
    async with service() as shop:
        client = lean(shop.url, BOUND)
        error = await refused(client, "/big-chunk")
        assert f"a chunk of {GIGABYTE} bytes" in str(error)
        await client.aclose()


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize("path", ["/chunks", "/until-close"])
async def test_a_body_growing_past_the_bound_is_cut_there(make: Make, path: str) -> None:
    async with service() as shop:
        client = make(shop.url, BOUND)
        error = await refused(client, path)
        assert str(error).startswith(f"the answer of {shop.url}{path} exceeds 1 MiB")
        async with asyncio.timeout(PROMPTLY):
            await shop.left.get()
        # The client stopped reading near the bound: the server could not send
        # all it meant to (a client reading it all would have let it).
        assert shop.sent < FLOOD
        await client.aclose()


@pytest.mark.parametrize("make", CLIENTS)
async def test_a_gzip_bomb_is_inflated_no_further_than_the_bound(make: Make) -> None:
    async with service() as shop:
        client = make(shop.url, BOUND)
        tracemalloc.start()
        try:
            error = await refused(client, "/bomb")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert str(error).startswith(f"the answer of {shop.url}/bomb exceeds 1 MiB once its gzip")
        # 32 MiB inflated whole would have been seen here: a few MiB at most.
        assert peak < 8 * MiB, f"{peak} bytes allocated to refuse a gzip bomb"
        await client.aclose()


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize("framing", ["length", "chunked", "gzip"])
async def test_a_body_of_exactly_the_bound_is_read(make: Make, framing: str) -> None:
    async with service() as shop:
        client = make(shop.url, BOUND)
        async with asyncio.timeout(PROMPTLY):
            answer = await client.request("GET", f"/exact/{framing}")
            assert answer.status_code == 200 and answer.content == b"y" * BOUND
            # Read whole, its connection is kept and reused.
            assert (await client.request("GET", "/small")).json() == {}
        assert shop.connections == 1
        await client.aclose()


@pytest.mark.parametrize("make", CLIENTS)
async def test_a_refused_answers_connection_is_not_reused(make: Make) -> None:
    async with service() as shop:
        client = make(shop.url, BOUND)
        assert (await client.request("GET", "/small")).json() == {}
        await refused(client, "/claims")  # on the kept connection
        async with asyncio.timeout(PROMPTLY):
            assert await shop.left.get() == "/claims"
            assert (await client.request("GET", "/small")).json() == {}
        assert shop.connections == 2
        await client.aclose()


@pytest.mark.parametrize("make", CLIENTS)
async def test_a_stream_is_bounded_per_event_not_as_a_whole(make: Make) -> None:
    async with service() as shop:
        client = make(shop.url, BOUND)
        received = 0
        async with asyncio.timeout(PROMPTLY):
            async with client.stream("GET", "/events") as (response, chunks):
                assert response.status == 200
                async for chunk in chunks:
                    received += len(chunk)
        assert received > 2 * BOUND  # short events, three times the bound in all
        with pytest.raises(TooLarge, match="exceeds 1 MiB in one event of its stream"):
            async with asyncio.timeout(PROMPTLY):
                async with client.stream("GET", "/endless-event") as (_, chunks):
                    async for _ in chunks:
                        pass
        assert shop.sent < FLOOD
        await client.aclose()


@pytest.mark.parametrize("make", CLIENTS)
async def test_an_error_answer_on_a_stream_is_bounded_as_a_whole(make: Make) -> None:
    # Its body is no event stream: a caller reads it whole (to say the error),
    # and blank lines in it do not reset the count.
    async with service() as shop:
        client = make(shop.url, BOUND)
        with pytest.raises(TooLarge, match=f"the answer of {shop.url}/error exceeds 1 MiB"):
            async with asyncio.timeout(PROMPTLY):
                async with client.stream("GET", "/error") as (response, chunks):
                    assert response.status == 500
                    async for _ in chunks:
                        pass
        assert shop.sent < FLOOD
        await client.aclose()


async def test_an_upgraded_connection_is_bounded_per_event() -> None:
    async with service() as shop:
        client = http1.Client(shop.url, max_body=BOUND)
        with pytest.raises(http1.TooLarge, match="in one event of its stream"):
            async with asyncio.timeout(PROMPTLY):
                async with client.upgrade("/upgrade", "strabo-channel") as (response, _, body):
                    assert response.status == 101
                    async for _ in body:
                        pass
        assert shop.sent < FLOOD
        await client.aclose()
