"""Event streams whose clients abort mid-flow are dropped at once, writing nothing more.

Regression: a stream takes a batch already queued without yielding to the loop,
and the protocol's ``connection_lost`` comes a loop step after the transport
found its peer gone. Meanwhile the stream wrote the rest of its backlog to the
dead transport, and asyncio logged ``socket.send() raised exception.`` for each
write past the fifth (hundreds of kB to megabytes of them on the server's
stderr when bench/soak.py's sse part aborted its streams), and the backlog was
held until the stream had gone through all of it (syncserver/_stream.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

import syncserver.app
from langshaw import ActionInstance
from strabo.serving import serve
from syncserver import Limits, SyncServer, create_app, uvicorn_options
from syncserver._presence import Presence
from syncserver.batch import Batch
from tests.hostile._support import SIMPLE, create

AGENTS = {"p1": ["Platform"]}
PATH = "/mas/default/protocols/SimpleUCP"
FLOOD = "socket.send() raised exception"


class WatchedPresence(Presence):
    """The app's table of open streams, waking a waiter whenever one closes."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    def closed(self, mas: str, agent: str, protocol: str) -> None:
        super().closed(mas, agent, protocol)
        self.changed.set()

    async def none_open(self, seconds: float) -> None:
        async def wait() -> None:
            while self.total:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), seconds)


class WatchedSubscribers(set[Any]):
    """A ledger's subscribers, waking a waiter whenever one leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    def discard(self, item: Any) -> None:
        super().discard(item)
        self.changed.set()

    async def empty(self, seconds: float) -> None:
        async def wait() -> None:
            while self:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), seconds)


class Served:
    """A served SyncServer, its open streams and its one ledger's subscribers."""

    def __init__(self, server: SyncServer, url: str, presence: WatchedPresence) -> None:
        self.server = server
        self.url = url
        self.presence = presence
        self.ledger = server.ledgers[("default", "SimpleUCP")]
        self.subscribers = self.ledger.subscribers = WatchedSubscribers()

    async def publish(self, cid: str, size: int) -> None:
        agent = self.server.agent("default", "p1")
        await self.server.attempt("default", "SimpleUCP", agent, [big_create(cid, size)])

    async def streams_left(self) -> int:
        """What ``GET /health`` says."""
        host, port = self.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = await reader.read()
        writer.close()
        body = answer.partition(b"\r\n\r\n")[2]
        return int(json.loads(body)["streams"])


@pytest.fixture
def watched_presence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(syncserver.app, "Presence", WatchedPresence)


@contextlib.asynccontextmanager
async def served(limits: Limits, guarded: bool = True) -> AsyncIterator[Served]:
    """A SyncServer as ``strabo syncserver`` serves it (every connection guard),
    or ``guarded=False``, by uvicorn as it comes."""
    server = SyncServer.embedded([SIMPLE], AGENTS, tokens={"p1": "p1-token"})
    app = create_app(server, limits=limits)
    presence = app.state.served.presence
    assert isinstance(presence, WatchedPresence)
    async with serve(app, **(uvicorn_options(limits) if guarded else {})) as url:
        yield Served(server, url, presence)


def big_create(cid: str, size: int) -> ActionInstance:
    bindings = create(cid)["bindings"]
    bindings["line_items"] = [{"item": {"id": "x" * size, "title": "big"}, "quantity": 1}]
    return ActionInstance(SIMPLE.action("Create"), bindings)


async def open_stream(url: str, rcvbuf: int | None = None) -> socket.socket:
    """A plain socket holding an event stream, past its ``: connected`` line. It
    aborts when closed: the server gets a reset, not an orderly end."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, int(port)))
    request = f"GET {PATH}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer p1-token\r\n\r\n"
    await loop.sock_sendall(sock, request.encode())
    received = b""
    while b": connected\n\n" not in received:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 4096), 5)
        assert chunk, received
        received += chunk
    return sock


class AbortOnPublish:
    """Stands among a ledger's subscribers: when the next batch is published, it
    aborts the given sockets then and there, so that every stream finds its
    batch queued and its client already gone in the same step."""

    def __init__(self, sockets: list[socket.socket]) -> None:
        self.sockets = sockets

    def push(self, batch: Batch) -> None:
        for sock in self.sockets:
            sock.close()  # SO_LINGER 0: a reset, sent before close() returns
        self.sockets = []

    def close(self) -> None:
        pass


def floods(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if FLOOD in r.getMessage()]


@pytest.mark.usefixtures("watched_presence")
@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "plain-uvicorn"])
async def test_a_stream_whose_client_aborted_writes_nothing_more(
    caplog: pytest.LogCaptureFixture, guarded: bool
) -> None:
    caplog.set_level(logging.WARNING, logger="asyncio")
    async with served(Limits(), guarded) as s:
        sockets = [await open_stream(s.url) for _ in range(20)]
        assert s.presence.total == 20
        aborter = AbortOnPublish(sockets)
        s.subscribers.add(aborter)
        # One batch of about 400 kB, written in pieces of 8 KiB: 49 writes to make
        # after the first one finds the connection reset.
        await s.publish("c1", 400_000)
        s.subscribers.discard(aborter)
        await s.subscribers.empty(5)
        await s.presence.none_open(5)
        assert await s.streams_left() == 0
    assert floods(caplog) == []


@pytest.mark.usefixtures("watched_presence")
async def test_streams_aborted_mid_flow_are_all_dropped(caplog: pytest.LogCaptureFixture) -> None:
    # As in bench/soak.py: clients that never read (a small receive buffer), a
    # backlog of 40 kB batches behind each, aborted while batches keep coming.
    caplog.set_level(logging.WARNING, logger="asyncio")
    async with served(Limits()) as s:
        sockets = [await open_stream(s.url, rcvbuf=4096) for _ in range(30)]
        for i in range(10):
            await s.publish(f"a{i}", 40_000)
        for n, sock in enumerate(sockets):
            sock.close()
            await s.publish(f"b{n}", 40_000)
        await s.subscribers.empty(10)
        await s.presence.none_open(10)
        assert await s.streams_left() == 0
        # The agent may open streams again: nothing of the aborted ones is counted.
        again = [await open_stream(s.url) for _ in range(Limits().max_streams_per_agent)]
        assert s.presence.total == len(again)
        for sock in again:
            sock.close()
        await s.presence.none_open(10)
    assert floods(caplog) == []
