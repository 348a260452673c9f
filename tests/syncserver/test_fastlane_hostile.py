"""The fast lane (syncserver/_fastlane.py) against hostile and odd clients.

Each test sends the same raw bytes to a SyncServer with the lane on and to one
with it off (both behind the guarded uvicorn protocol, as ``strabo syncserver``
serves them): the lane may only be faster, never different. What is compared
is everything the server sends until it closes the connection (Date and Server
aside), so a different answer, a different framing, or a connection left in a
different state (closed early, or kept open) all fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from strabo.serving import serve
from syncserver import Limits, SyncServer, create_app, uvicorn_options
from syncserver._guard import GuardedProtocol
from tests.hostile._support import raw
from tests.syncserver.test_fastlane import AGENTS, HEALTH, PURCHASE, SIMPLE, create, post

LIMITS = Limits(max_body=4096, header_timeout=5, body_timeout=0.5)
#: Asks for /health, then for the end of the connection: read to EOF, it ends
#: every exchange below, unless the server closed the connection before.
LAST = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


@dataclass
class Seen:
    """The server's side of the connections: their protocols, and whether one
    has stopped writing to a client that does not read."""

    protocols: list[GuardedProtocol] = field(default_factory=list)
    stalled: asyncio.Event = field(default_factory=asyncio.Event)


@contextlib.asynccontextmanager
async def served(
    lane: bool, limits: Limits = LIMITS, sndbuf: int | None = None
) -> AsyncIterator[tuple[str, Seen]]:
    """A server with the lane on or off, as ``strabo syncserver`` serves it;
    ``sndbuf``: the send buffer of its connections' sockets (fixed, so the
    kernel does not grow it to megabytes for a client that does not read)."""
    server = SyncServer.embedded(
        [SIMPLE, PURCHASE], AGENTS, tokens={a: f"{a}-token" for a in AGENTS}, policy="instant"
    )
    seen = Seen()

    class Recorded(GuardedProtocol):
        def connection_made(self, transport: Any) -> None:
            if sndbuf is not None:
                sock = transport.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            super().connection_made(transport)
            seen.protocols.append(self)

        def pause_writing(self) -> None:
            super().pause_writing()
            seen.stalled.set()

    Recorded.limits = limits
    options = {**uvicorn_options(limits), "http": Recorded}
    async with serve(create_app(server, limits=limits, fast_lane=lane), **options) as url:
        yield url, seen


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


def without_date_and_server(data: bytes) -> bytes:
    return re.sub(rb"(?im)^(date|server): [^\r]*\r\n", b"", data)


async def to_the_end(url: str, data: bytes, half_close: bool = False) -> bytes:
    """Everything the server sends for ``data`` until it closes the connection."""
    reader, writer = await connect(url)
    try:
        writer.write(data)
        if half_close:
            writer.write_eof()
        return without_date_and_server(await asyncio.wait_for(reader.read(), 10))
    finally:
        writer.close()


async def both(data: bytes, half_close: bool = False) -> tuple[bytes, bytes]:
    """What the lane answers ``data``, and what h11 and the app answer."""
    async with served(True) as (fast, _), served(False) as (slow, _):
        return await to_the_end(fast, data, half_close), await to_the_end(slow, data, half_close)


def with_length(request: bytes, length: bytes) -> bytes:
    head, _, body = request.partition(b"\r\n\r\n")
    head = re.sub(rb"Content-Length: \d+", b"Content-Length: " + length, head)
    return head + b"\r\n\r\n" + body


def odd_requests() -> dict[str, bytes]:
    """Requests at or past the edge of what the lane takes; each must be read
    as h11 reads it (the lane hands over what it does not take)."""
    cases: dict[str, bytes] = {}

    def add(name: str, old: bytes, new: bytes, method: str = "POST") -> None:
        request = post(create(f"odd{len(cases)}"), method=method)
        assert old in request, name
        cases[name] = request.replace(old, new, 1)

    length = b"Content-Length: "
    host = b"Host: x\r\n"
    add("a length with leading zeros", length, length + b"0000")
    add("a length with a plus sign", length, length + b"+")
    add("a length with a space in it", length + b"1", length + b"1 ")
    add("a length then a tab", b"\r\n\r\n", b"\t\r\n\r\n")
    add("a length twice in one field", length + b"1", length + b"9, 1")
    add("a length in another script's digits", length + b"1", length + b"\xb2")
    for te in [b"chunked ,", b"identity", b"CHUNKED", b"chunked\r\nTransfer-Encoding: chunked"]:
        add(f"Transfer-Encoding: {te!r}", host, host + b"Transfer-Encoding: " + te + b"\r\n")
    add("an obs-fold", b"Host: x\r\n", b"Host: x\r\n y\r\n")
    add("a space before a length's colon", b"Content-Length:", b"Content-Length :")
    add("names in odd case", b"Content-Length:", b"cOnTeNt-LeNgTh:")
    add("a NUL in a value", b"Host: x", b"Host: x\x00y")
    add("a CR in a value", b"Host: x", b"Host: x\ry")
    add("a non-ASCII value", b"Host: x", b"Host: x\xe9")
    add("the absolute form", b"POST /", b"POST http://x/")
    add("a leading //", b"POST /", b"POST //")
    add("an inner //", b"/protocols", b"//protocols")
    add("%2F in the MAS", b"/default/", b"/de%2Ffault/")
    add("%2F between the names", b"/default/protocols/", b"/default%2Fprotocols%2F")
    add("a fragment", b"/attempts", b"/attempts#f")
    add("a request line of 9000 bytes", b"/attempts", b"/attempts?" + b"a" * 9000)
    add("a head of 9000 bytes", b"Host: x\r\n", b"Host: x\r\nX-Pad: " + b"p" * 9000 + b"\r\n")
    add("a head of 20000 bytes", b"Host: x\r\n", b"Host: x\r\nX-Pad: " + b"p" * 20000 + b"\r\n")
    for connection in [b"close, keep-alive", b"keep-alive, close"]:
        add(f"Connection: {connection!r}", host, host + b"Connection: " + connection + b"\r\n")
    add("a Host with a port", b"Host: x", b"Host: x:8080")
    add("an empty Host", b"Host: x", b"Host:")
    add("two Hosts", b"Host: x\r\n", b"Host: x\r\nHost: y\r\n")
    add("lower-case bearer", b"Bearer", b"bearer")
    add("two spaces after Bearer", b"Bearer ", b"Bearer  ")
    add("a tab after Bearer", b"Bearer ", b"Bearer\t")
    add("two Authorizations", host, host + b"Authorization: Bearer business-token\r\n")
    add("HEAD on the path", b"HEAD", b"HEAD", method="HEAD")
    add("OPTIONS on the path", b"OPTIONS", b"OPTIONS", method="OPTIONS")
    add("a lower-case method", b"POST", b"post")
    add("HTTP/1.2", b"HTTP/1.1", b"HTTP/1.2")
    add("a leading CRLF", b"POST", b"\r\nPOST")
    cases["bare line feeds"] = post(create("odd-lf")).replace(b"\r\n", b"\n")
    return cases


async def test_odd_requests_are_read_alike() -> None:
    """Each odd request, then /health and the end: the same bytes from both,
    and the connection kept or closed alike (what follows shows which)."""
    async with served(True) as (fast, _), served(False) as (slow, _):
        for name, request in odd_requests().items():
            got = await to_the_end(fast, request + LAST)
            assert got == await to_the_end(slow, request + LAST), name


@pytest.mark.parametrize("digits", [20, 21, 5000])
async def test_a_content_length_of_many_digits_is_read_as_h11_reads_it(digits: int) -> None:
    """h11 refuses a Content-Length of more than 20 digits, leading zeros or
    not (400, closed); the lane took 21 digits for a length, and crashed on
    5000 (Python's bound on int() of a string: the connection dropped without
    a word, a traceback in the log)."""
    body = create("c1")
    request = with_length(post(body), str(len(body)).encode().rjust(digits, b"0"))
    fast, slow = await both(request + LAST)
    assert fast == slow
    assert (b"200 OK" in fast.partition(b"\r\n")[0]) is (digits <= 20), fast


@pytest.mark.parametrize(
    "after",
    [b"GARBAGE\r\n\r\n", b"\r\n" + LAST],
    ids=["garbage", "a-stray-crlf"],
)
async def test_an_invalid_request_after_an_answer_gets_the_same_400(after: bytes) -> None:
    """After a request of the lane's, h11 answers an invalid one with the 400
    of a connection that has seen an HTTP/1.1 request (chunked), as it does
    after a request of its own; it had answered that of a fresh connection
    (delimited by the close): other bytes."""
    fast, slow = await both(post(create("c1")) + after)
    assert fast == slow
    assert b"Invalid HTTP request received." in fast


async def test_a_body_longer_than_declared_is_read_the_same() -> None:
    """The bytes past the declared length begin the next request, for both."""
    body = create("c1")
    request = with_length(post(body), b"5")  # the rest of the body: a bad next request
    fast, slow = await both(request + LAST)
    assert fast == slow
    assert fast.count(b"HTTP/1.1 400 Bad Request") == 2, fast


async def test_pipelined_attempts_then_a_half_close_are_all_answered() -> None:
    """A client sends five attempts and shuts its side down (``nc -N``, a
    script): h11 stops reading while it answers, so it reads the end of the
    stream only after the fifth answer; the lane read on, saw the end and
    closed the connection after the first."""
    data = b"".join(post(create(f"c{i}")) for i in range(5))
    fast, slow = await both(data, half_close=True)
    assert fast == slow
    assert fast.count(b"HTTP/1.1 200 OK") == 5, fast


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "h11"])
async def test_a_client_that_pipelines_and_never_reads_holds_little_memory(lane: bool) -> None:
    """Megabytes of attempts sent ahead, no answer read: once the server can
    write no more, it reads no more, and holds little of what was sent. The
    lane resumed reading after each answer, taking in a whole read (256 KiB)
    for each ~150-byte answer: all of it, in the end."""
    async with served(lane, sndbuf=4096) as (url, seen):
        _, writer = await raw(url, rcvbuf=4096)
        request = post(create("c1"))  # the first is committed, the others are duplicates
        writer.write(request * (8 * 2**20 // len(request)))
        await asyncio.wait_for(seen.stalled.wait(), 20)  # the server can write no more
        protocol = seen.protocols[0]
        held = len(protocol.conn.trailing_data[0])
        if protocol._lane is not None:
            held += len(protocol._lane.buffer)
        writer.transport.abort()
        assert held < 2**20, held


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "h11"])
async def test_a_pipelined_head_trickled_after_an_answer_is_not_cut_short(lane: bool) -> None:
    """An attempt, the first bytes of another sent with it, the rest of that
    one's head trickled in after the answer: uvicorn's keep-alive timer stops
    at the first byte received after an answer (a request is under way), and
    header_timeout governs it; the lane left it running, and the connection
    was closed under a client still sending."""
    limits = LIMITS.replace(keep_alive_timeout=1.0, header_timeout=10.0, body_timeout=10.0)
    async with served(lane, limits) as (url, _):
        reader, writer = await connect(url)
        second = post(create("c2"))
        writer.write(post(create("c1")) + second[:10])
        first = await asyncio.wait_for(reader.readuntil(b"}"), 10)
        assert first.startswith(b"HTTP/1.1 200 OK"), first
        head = second.index(b"\r\n\r\n")
        for start in range(10, head, 12):  # about 2 s in all, twice the keep-alive
            await asyncio.sleep(0.1)  # the client's slowness is what is under test
            writer.write(second[start : min(start + 12, head)])
        writer.write(second[head:] + LAST)
        rest = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert rest.startswith(b"HTTP/1.1 200 OK"), rest


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "h11"])
async def test_a_pipelined_body_that_stops_gets_408(lane: bool) -> None:
    """A request answered by the app (here /health), then an attempt whose body
    stops short, sent with it: when h11 takes up the attempt, after the first
    answer, no timer was armed (the guard armed them only on bytes received),
    and the connection was held open for ever at no cost to the client."""
    async with served(lane) as (url, _):
        data = HEALTH + post(create("c1"))[:-5]
        answer = await to_the_end(url, data)
        assert answer.count(b"HTTP/1.1 200 OK") == 1, answer
        assert b"body-timeout" in answer, answer
