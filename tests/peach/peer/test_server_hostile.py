"""The peer's own HTTP/1.1 server (``peach.peer._app``) against hostile clients.

What test_server.py does not try: heads shaped to be read one way here and
another way by a proxy or another server (a request hidden in a body), lengths
that are not plain numbers, a client that shuts its side down after its
requests, one that pipelines megabytes and reads nothing, slowloris trickles,
many idle connections. The standard: a precise 4xx and the connection closed
(nothing of the endpoint run), or every answer owed; never a buffer that grows
with what the client sends, never a connection held past the timeout; and the
server serves others after each (the fixture checks it).
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import AsyncIterator

import pytest

from peach.peer import _app
from peach.peer._app import MAX_HEAD, PeerServer
from peach.peer._wire import MAX_BODY
from tests.peach.peer.test_server import Recorder, answer, connect, request

TIMEOUT = 0.5  # the servers' timeout: short, so that each test is quick
WAIT = 10.0  # seconds any one wait may take before the test fails


@pytest.fixture
async def served() -> AsyncIterator[tuple[PeerServer, Recorder, str]]:
    recorder = Recorder()
    server = PeerServer(recorder, timeout=TIMEOUT, grace=1.0)
    url = await server.start("127.0.0.1", None)
    try:
        yield server, recorder, url
        reader, writer = await connect(url)  # whatever happened, others are served
        writer.write(request(extra="Connection: close\r\n"))
        assert (await answer(reader))[0] == 200
        writer.close()
    finally:
        await server.close()


async def to_the_end(url: str, data: bytes, half_close: bool = False) -> bytes:
    """Everything the server sends for ``data`` until it closes the connection."""
    reader, writer = await connect(url)
    try:
        writer.write(data)
        if half_close:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), WAIT)
    finally:
        writer.close()


def statuses(data: bytes) -> list[int]:
    """The statuses of the responses in ``data`` (their JSON bodies hold none)."""
    return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


BODY = b'{"hidden":0}'  # 12 bytes: a body whose length is written oddly below
HIDDEN = b"POST /peer/flush HTTP/1.1\r\nHost: peer\r\nContent-Length: 0\r\n\r\n"


def smuggling(header: bytes) -> bytes:
    """A request with ``header`` among its headers and HIDDEN as its body, if
    the header is read as declaring the body's length, or after it if not."""
    return (
        b"POST /peer/messages HTTP/1.1\r\nHost: peer\r\n" + header + b"\r\n\r\n" + HIDDEN
    ).replace(b"<N>", str(len(HIDDEN)).encode())


@pytest.mark.parametrize(
    "header",
    [
        b"X-A: a\nContent-Length: <N>",  # a bare LF: a line's end to some readers
        b"X-A: a\rContent-Length: <N>",  # a bare CR
        b"Content-Length\x00: <N>",  # a NUL in a name
        b"X-A: \x00\r\nContent-Length: <N>",  # a NUL in a value
        b"X-A: \x01\x7f",  # other control characters
    ],
    ids=["bare-lf", "bare-cr", "nul-in-name", "nul-in-value", "controls"],
)
async def test_control_characters_in_a_head_are_a_400_and_nothing_runs(
    served: tuple[PeerServer, Recorder, str], header: bytes
) -> None:
    """A bare LF or CR, a NUL or another control character in a head is a 400,
    the connection closed. They were taken into the header's value (or name):
    the request was read without a body, and HIDDEN, the body another reader
    would see, ran as a second request."""
    _, recorder, url = served
    got = await to_the_end(url, smuggling(header))
    assert statuses(got) == [400], got
    assert b"connection: close" in got and recorder.calls == []


async def test_a_control_character_in_the_request_line_is_a_400(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    _, recorder, url = served
    got = await to_the_end(url, request(path="/peer/messages\x00"))
    assert statuses(got) == [400] and recorder.calls == [], got


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (smuggling(b"Content-Length: <N>\r\nTransfer-Encoding: chunked"), 411),
        (smuggling(b"Transfer-Encoding: identity\r\nContent-Length: <N>"), 411),
        (smuggling(b"Content-Length: <N>\r\nContent-Length: 0"), 400),
        (smuggling(b"Content-Length: +<N>"), 400),
        (smuggling(b"Content-Length: -1"), 400),
        (smuggling(b"Content-Length: 0x<N>"), 400),
        (smuggling(b"Content-Length: <N>.0"), 400),
        (smuggling(b"Content-Length: \xd9\xa1"), 400),  # Arabic-Indic digits
        (smuggling(b"Content-Length: <N> <N>"), 400),
        (smuggling(b"Content-Length : <N>"), 400),  # a space before the colon
        (smuggling(b"Content-Length\t: <N>"), 400),
        (smuggling(b" Content-Length: <N>"), 400),
        (smuggling(b"X-A: a\r\n Content-Length: <N>"), 400),  # an obs-fold
        (smuggling(b"X-A: a\r\n\tContent-Length: <N>"), 400),
        (smuggling(b"Content-Length: " + b"9" * 5000), 413),  # int() refuses it
        (smuggling(b"Content-Length: 1" + b"0" * 30), 413),
        (smuggling(b"Expect: 100-continue\r\nContent-Length: %d" % (MAX_BODY + 1)), 413),
        (request().replace(b"Host: peer\r\n", b""), 400),  # HTTP/1.1 without a Host
        (request(extra="Host: other\r\n"), 400),  # two Hosts
        (request().replace(b"/peer/messages", b"http://peer/peer/messages"), 404),
        (b"OPTIONS * HTTP/1.1\r\nHost: peer\r\n\r\n", 404),
        (request().replace(b"POST", b"post"), 405),
        (b"GET /peer/messages\r\n\r\n", 400),  # HTTP/0.9
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400),  # HTTP/2's preface
        (request().replace(b"HTTP/1.1", b"HTTP/1.2"), 400),
        (request().replace(b"POST ", b"POST  "), 400),
        (b"\r\n" + request(), 400),  # a stray CRLF first
    ],
)
async def test_odd_heads_get_a_precise_4xx_and_nothing_runs(
    served: tuple[PeerServer, Recorder, str], data: bytes, status: int
) -> None:
    """Each is answered at once (no 100 Continue first), the connection closed:
    what follows (HIDDEN, for the smuggling shapes) is never read as a request."""
    _, recorder, url = served
    got = await to_the_end(url, data)
    assert statuses(got) == [status], got
    assert recorder.calls == []


@pytest.mark.parametrize(
    "length", [b"0" * 5000 + b"12", b"  12  ", b"012"], ids=["zeros", "spaces", "zero"]
)
async def test_plain_lengths_written_oddly_are_read_as_numbers(
    served: tuple[PeerServer, Recorder, str], length: bytes
) -> None:
    """Leading zeros (thousands: int() refused them) and spaces around a length
    are allowed by HTTP; the body is read whole, the next request after it."""
    _, recorder, url = served
    head = b"POST /peer/messages HTTP/1.1\r\nHost: peer\r\nContent-Length: %s\r\n\r\n" % length
    last = HIDDEN.replace(b"1.1\r\n", b"1.1\r\nConnection: close\r\n")
    got = await to_the_end(url, head + BODY + last)
    assert statuses(got) == [200, 200], got
    assert [(kind, body) for kind, _, body in recorder.calls] == [
        ("messages", BODY),
        ("flush", b""),
    ]


async def test_thousands_of_tiny_headers_within_the_bound_are_read(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    _, recorder, url = served
    extra = "a:\r\n" * ((MAX_HEAD - 200) // 4)
    got = await to_the_end(url, request(extra=extra + "Connection: close\r\n"))
    assert statuses(got) == [200] and len(recorder.calls) == 1, got


async def test_a_client_that_shuts_its_side_down_gets_every_answer(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    """Three requests, then ``shutdown(SHUT_WR)`` (``nc -N``, a script, an
    HTTP/1.0 habit): three answers, then the end. asyncio closed a connection
    at the end of its stream unless told otherwise: no answer at all."""
    _, recorder, url = served
    got = await to_the_end(url, b"".join(request(b'"%d"' % n) for n in range(3)), True)
    assert statuses(got) == [200, 200, 200], got
    assert [body for _, _, body in recorder.calls] == [b'"0"', b'"1"', b'"2"']


async def test_a_half_close_in_the_middle_of_a_request_closes_at_once(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    """What cannot end is not waited for: closed well before the timeout."""
    _, recorder, url = served
    started = time.monotonic()
    got = await to_the_end(url, request(b'"whole"') + request(b'"cut"')[:-3], True)
    assert statuses(got) == [200], got
    assert time.monotonic() - started < TIMEOUT
    assert [body for _, _, body in recorder.calls] == [b'"whole"']


async def test_a_slowloris_trickle_gets_408_a_timeout_after_its_first_byte(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    """A byte every fifth of the timeout: each read is in time, the request
    never is; the deadline runs from its first byte."""
    _, recorder, url = served
    reader, writer = await connect(url)
    data = request()
    started = time.monotonic()
    reply = asyncio.ensure_future(reader.read())
    for byte in data[:-1]:
        writer.write(bytes([byte]))
        done, _ = await asyncio.wait([reply], timeout=TIMEOUT / 5)  # the client's slowness
        if done:
            break
    got = await asyncio.wait_for(reply, WAIT)
    writer.close()
    assert statuses(got) == [408], got
    assert time.monotonic() - started < 2 * TIMEOUT
    assert recorder.calls == []


async def test_a_client_that_pipelines_megabytes_and_never_reads_is_bounded_then_dropped(
    served: tuple[PeerServer, Recorder, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the server can write no more, it reads no more, and holds about a
    head's worth of what was sent and its write buffer's high-water mark of
    answers; a timeout later the connection is dropped. Reading resumed after
    each answer, one read (256 KiB) ahead of each: all of it was read, all of
    it answered into a write buffer of megabytes, and the connection, closed
    when idle, waited for ever for a client that reads nothing."""
    server, recorder, url = served
    stalled, lost = asyncio.Event(), asyncio.Event()
    pause_writing = _app._Connection.pause_writing
    connection_lost = _app._Connection.connection_lost

    def pause(self: _app._Connection) -> None:
        pause_writing(self)
        stalled.set()

    def gone(self: _app._Connection, exc: Exception | None) -> None:
        connection_lost(self, exc)
        lost.set()

    monkeypatch.setattr(_app._Connection, "pause_writing", pause)
    monkeypatch.setattr(_app._Connection, "connection_lost", gone)
    assert server._server is not None  # small buffers, inherited by what it accepts
    server._server.sockets[0].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    _, writer = await asyncio.open_connection(sock=sock)
    one = request()
    writer.write(one * (8 * 2**20 // len(one)))
    await asyncio.wait_for(stalled.wait(), WAIT)
    (connection,) = server.connections
    assert connection.transport is not None
    held = len(connection.buffer) + connection.transport.get_write_buffer_size()
    assert held < 2**20, held
    await asyncio.wait_for(lost.wait(), WAIT)  # dropped: the client read nothing
    assert len(recorder.calls) < 2**20 // len(one)
    writer.transport.abort()


async def test_many_idle_connections_are_all_closed_after_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No cap on connections, but an idle one costs a protocol object until its
    timeout, a request begun one more: all of them are closed in time. (Opened
    by the hundred, the listening backlog: past it, the kernel makes a client
    wait for a SYN-ACK sent again, a second or more.)"""
    accepted, made = asyncio.Event(), _app._Connection.connection_made
    count = 0

    def counted(self: _app._Connection, transport: asyncio.BaseTransport) -> None:
        nonlocal count
        made(self, transport)
        count += 1
        if count % 100 == 0:
            accepted.set()

    monkeypatch.setattr(_app._Connection, "connection_made", counted)
    server = PeerServer(Recorder(), timeout=2.0)  # longer: 1000 connections to open first
    url = await server.start("127.0.0.1", None)
    try:
        clients: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        for _ in range(10):
            accepted.clear()
            batch = await asyncio.gather(*(connect(url) for _ in range(100)))
            for _, writer in batch[::2]:
                writer.write(b"POST /peer/mess")  # a request begun, never finished
            await asyncio.wait_for(accepted.wait(), WAIT)
            clients += batch
        ends = await asyncio.gather(*(asyncio.wait_for(r.read(), WAIT) for r, _ in clients))
        assert all(statuses(end) == [408] for end in ends[::2])
        assert all(end == b"" for end in ends[1::2])
        for _, writer in clients:
            writer.close()
        assert not server.connections
    finally:
        await server.close()


async def test_closed_connections_are_not_read_again(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    """After a refused request, what follows it is never answered."""
    _, recorder, url = served
    reader, writer = await connect(url)
    writer.write(request(method="GET") + request())
    got = await asyncio.wait_for(reader.read(), WAIT)
    writer.close()
    assert statuses(got) == [405] and recorder.calls == []


async def test_connections_past_the_cap_are_told_and_closed() -> None:
    # Each open connection costs a protocol, a buffer and a timer: a client
    # opening them by the thousand is bounded, as the SyncServer bounds its own.
    recorder = Recorder()
    server = PeerServer(recorder, timeout=5.0, grace=1.0, max_connections=3)
    url = await server.start("127.0.0.1", None)
    held = []
    try:
        for _ in range(3):  # each answered once: accepted, and kept open
            reader, writer = await connect(url)
            writer.write(request())
            assert (await answer(reader))[0] == 200
            held.append((reader, writer))
        refused = await to_the_end(url, b"")
        assert statuses(refused) == [503] and b'"overloaded"' in refused, refused
        assert b"maximum of 3 connections" in refused
        reader, writer = held.pop()  # one ends (the server closes it after this)
        writer.write(request(extra="Connection: close\r\n"))
        assert statuses(await asyncio.wait_for(reader.read(), WAIT)) == [200]
        writer.close()
        again = await to_the_end(url, request(extra="Connection: close\r\n"))
        assert statuses(again) == [200], again
    finally:
        for _, writer in held:
            writer.close()
        await server.close()
