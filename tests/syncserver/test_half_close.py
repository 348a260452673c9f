"""A client that shuts its side down (``shutdown(SHUT_WR)``, ``nc -N``, a
script) right after its requests.

uvicorn's ``eof_received`` returns None, so asyncio closed the connection at
the client's end of input, and an answer a batch window away was lost. The
guard (syncserver/_guard.py) keeps the connection open for writing while what
the client sent whole is answered, in order, then closes it; a part of a
request, or an idle connection, is closed at once. Each case runs with the
fast lane and without it (h11 and the app), under the batched policy (every
attempt is answered a window after it is read), and each ends by waiting for
the server's set of connections (uvicorn's own, which handed-over connections
join) to be empty: nothing is left open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from strabo.serving import serve
from syncserver import Limits, SyncServer, create_app, uvicorn_options
from syncserver._guard import GuardedProtocol
from tests.hostile._support import raw
from tests.hostile.test_slow_clients import Watched
from tests.syncserver.test_fastlane import AGENTS, HEALTH, PURCHASE, SIMPLE, Counted, create, post

#: Every timer long: a connection closed within the tests' 5 s was closed by
#: the end of input, not by a timer.
SLOW = Limits(max_body=4096, header_timeout=30, body_timeout=30, keep_alive_timeout=30)
LANES = pytest.mark.parametrize("lane", [True, False], ids=["lane", "h11"])
LOG = (
    b"GET /mas/default/protocols/SimpleUCP/log HTTP/1.1\r\nHost: x\r\n"
    b"Authorization: Bearer platform-token\r\n\r\n"
)
EVENTS = b"GET /mas/default/protocols/SimpleUCP/events HTTP/1.1\r\nHost: x\r\n"
CHANNEL = (
    b"GET /mas/default/protocols/SimpleUCP/channel HTTP/1.1\r\nHost: x\r\n"
    b"Authorization: Bearer platform-token\r\nConnection: Upgrade\r\n"
    b"Upgrade: strabo-channel\r\n\r\n"
)


@dataclass
class Served:
    url: str
    server: SyncServer
    app: Gated  # the requests that reached the app (none of the lane's)
    connections: Watched  # the server's open connections (uvicorn's set)
    ended: asyncio.Event  # the server has seen a client's end of input

    async def committed(self) -> list[str]:
        """The cids of the Creates committed, in the log's order (asked with a
        half-close too)."""
        got = await half_close(self.url, LOG)
        assert statuses(got) == [200], got
        events = json.loads(got.partition(b"\r\n\r\n")[2])["events"]
        return [i["bindings"]["cid"] for e in events for i in e["instances"]]


class Gated(Counted):
    """The app, which takes an event stream or a channel up only once ``gate``
    is set, when one is given (the server has seen the end of input before
    the connection is handed over)."""

    gate: asyncio.Event | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if self.gate is not None and path.endswith(("/events", "/channel")):
            await asyncio.wait_for(self.gate.wait(), 5)
        await super().__call__(scope, receive, send)


@contextlib.asynccontextmanager
async def batched(lane: bool) -> AsyncIterator[Served]:
    """A server whose attempts are answered a batch window (50 ms) after they
    are read; on leaving, every connection it had must be closed."""
    server = SyncServer.embedded(
        [SIMPLE, PURCHASE],
        AGENTS,
        tokens={a: f"{a}-token" for a in AGENTS},
        policy="batched",
        batch_window_ms=50,
    )
    connections = Watched()
    ended = asyncio.Event()

    class Watching(GuardedProtocol):
        """The guard, its server's set of connections made one that wakes a
        waiter, and the end of input noted."""

        def __init__(self, config: Any, server_state: Any, *args: Any, **kwargs: Any) -> None:
            if server_state.connections is not connections:
                connections.update(server_state.connections)
                server_state.connections = connections
            super().__init__(config, server_state, *args, **kwargs)

        def eof_received(self) -> bool:  # type: ignore[override]
            ended.set()
            return super().eof_received()

    Watching.limits = SLOW
    app = Gated(create_app(server, limits=SLOW, fast_lane=lane))
    async with serve(app, **{**uvicorn_options(SLOW), "http": Watching}) as url:
        yield Served(url, server, app, connections, ended)
        await connections.empty(5)  # nothing is left open


async def half_close(url: str, data: bytes, first: bytes = b"") -> bytes:
    """Send ``data`` and the end of input (once ``first`` is read, if given);
    all the server sends until it closes the connection (within 5 s: long
    before any timer of SLOW)."""
    reader, writer = await raw(url)
    try:
        writer.write(data)
        got = await asyncio.wait_for(reader.readuntil(first), 5) if first else b""
        writer.write_eof()
        return got + await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


def statuses(data: bytes) -> list[int]:
    return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def posted(*cids: str) -> bytes:
    return b"".join(post(create(cid)) for cid in cids)


@LANES
@pytest.mark.parametrize(
    ("data", "requests", "to_the_app"),
    [
        pytest.param(posted("p1", "p2"), 2, 0, id="two attempts"),
        pytest.param(posted("p1") + HEALTH + posted("p2"), 3, 2, id="attempt, health, attempt"),
        pytest.param(HEALTH + posted("p1", "p2"), 3, 3, id="health, two attempts"),
    ],
)
async def test_pipelined_requests_then_a_half_close_are_all_answered_in_order(
    lane: bool, data: bytes, requests: int, to_the_app: int
) -> None:
    """Sent in one go with the end of input: every answer, in order, then the
    end of the connection. ``to_the_app``: the requests that reach the app when
    the lane is on (what follows a request of h11's stays h11's)."""
    async with batched(lane) as served:
        got = await half_close(served.url, data)
        assert statuses(got) == [200] * requests, got
        # In the order sent: p1's answer (the first) names the batch before p2's.
        assert re.findall(rb'"seq":(\d+)', got) == [b"1", b"2"], got
        # The requests went the lane's way or h11's, as the case says.
        assert len(served.app.seen) == (to_the_app if lane else requests)
        assert await served.committed() == ["p1", "p2"]


@LANES
@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(lambda r: r[:20], id="in the request line"),
        pytest.param(lambda r: r[: r.index(b"\r\n\r\n") - 3], id="in a header"),
        pytest.param(lambda r: r[: r.index(b"\r\n\r\n") + 2], id="before the blank line"),
        pytest.param(lambda r: r[:-5], id="in the body"),
    ],
)
async def test_a_half_close_within_a_request_closes_at_once(lane: bool, cut: Any) -> None:
    """A request only partly sent never ends: no answer, nothing finalized, and
    the connection closes now, not at the header or body timeout (30 s)."""
    async with batched(lane) as served:
        assert await half_close(served.url, cut(post(create("c1")))) == b""
        assert await served.committed() == []


@LANES
async def test_a_half_close_after_whole_requests_and_a_part_answers_the_whole_ones(
    lane: bool,
) -> None:
    """Two attempts, then half of a third: the two are answered, the third is
    not read as a request, and the connection closes after the second answer."""
    async with batched(lane) as served:
        got = await half_close(served.url, posted("p1", "p2") + posted("p3")[:40])
        assert statuses(got) == [200, 200], got
        assert await served.committed() == ["p1", "p2"]


@LANES
async def test_a_half_close_on_an_idle_connection_closes_it_at_once(lane: bool) -> None:
    """Between requests (after an answer, or before the first request), the end
    of input closes the connection now, not at the keep-alive timeout."""
    async with batched(lane) as served:
        assert await half_close(served.url, b"") == b""
        reader, writer = await raw(served.url)
        try:
            writer.write(post(create("c1")))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert statuses(head) == [200], head
            length = int(re.search(rb"content-length: (\d+)", head, re.I)[1])  # type: ignore[index]
            await asyncio.wait_for(reader.readexactly(length), 5)
            writer.write_eof()  # idle now, the answer read
            assert await asyncio.wait_for(reader.read(), 5) == b""
        finally:
            writer.close()


HAND_OVER = pytest.mark.parametrize("before", [True, False], ids=["before", "after"])


@HAND_OVER
async def test_an_event_stream_request_then_a_half_close_ends_the_stream(before: bool) -> None:
    """A connection handed over follows its new protocol's rule for the end of
    input, whether the end came before the hand-over (the app takes the
    request up only once the server has seen it) or after: an event stream
    ends (its head and its first comment written), and is not counted as one
    of the agent's streams any more."""
    async with batched(True) as served:
        served.app.gate = served.ended if before else None
        request = EVENTS + b"Authorization: Bearer platform-token\r\n\r\n"
        got = await half_close(served.url, request, b"" if before else b": connected\n\n")
        assert statuses(got) == [200] and got.endswith(b": connected\n\n"), got
        served.app.gate = None
        health = await half_close(served.url, HEALTH)
        assert json.loads(health.partition(b"\r\n\r\n")[2])["streams"] == 0


@HAND_OVER
async def test_a_channel_written_whole_then_a_half_close_answers_its_attempts(
    before: bool,
) -> None:
    """A script that writes the upgrade and its attempts without waiting for
    the 101, then ends at once, or once the 101 is read: the channel answers
    what it was sent, then closes. (h11 stops reading at an upgrade request,
    so the server sees the end after the hand-over either way: this pins that
    the hand-over still hears it.)"""
    async with batched(True) as served:
        attempts = b"".join(
            json.dumps({"instances": [json.loads(create(c))["instances"][0]], "attempt_id": c})
            .encode()
            + b"\n"
            for c in ("k1", "k2")
        )
        got = await half_close(served.url, CHANNEL + attempts, b"" if before else b"\r\n\r\n")
        assert statuses(got) == [101], got
        for cid in ("k1", "k2"):
            assert f'"id":"{cid}","status":200'.encode() in got, got
        assert sorted(await served.committed()) == ["k1", "k2"]


@LANES
async def test_many_half_closed_connections_at_once_leave_nothing_open(lane: bool) -> None:
    """Every kind at once, on 40 connections: whole requests answered, parts
    and idle connections closed, and the server's set of connections empty
    again (``batched`` waits for it on leaving)."""
    async with batched(lane) as served:
        def case(i: int) -> tuple[bytes, list[int]]:
            kind = i % 4
            if kind == 0:
                return posted(f"a{i}", f"b{i}"), [200, 200]  # answered
            if kind == 1:
                return post(create(f"c{i}"))[:30], []  # a part of a head: closed
            if kind == 2:
                return post(create(f"d{i}"))[:-3], []  # a part of a body: closed
            return b"", []  # idle: closed

        cases = [case(i) for i in range(40)]
        got = await asyncio.gather(*(half_close(served.url, data) for data, _ in cases))
        for (data, expected), answered in zip(cases, got, strict=True):
            assert statuses(answered) == expected, (data, answered)
        assert len(await served.committed()) == 20
