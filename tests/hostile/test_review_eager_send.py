"""Hostile review of the eager send (``http1.Client.start``, ``HTTPTransport.start``,
``PeerExecutor._post``): places and connections given back on every path.

The servers are asyncio servers on loopback that speak just enough HTTP/1.1 and
can be told to hold an answer, stop reading, or reset a connection, each step
signalled by an event (no sleeps).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from peach.peer.directory import Peer
from peach.peer.transport import HTTPTransport, Unreachable
from syncserver.client import LeanClient
from syncserver.http1 import Client, Connection

BIG = 32 * 1024 * 1024  # more than loopback's socket buffers take: the writer waits in drain


@dataclass
class Behaviour:
    """What the server does with the n-th request it reads (0-based, over all
    connections): 'answer', 'hold' (never answer), 'stall' (stop reading after
    the head), 'reset' (abort the connection after the head)."""

    plan: list[str] = field(default_factory=list)
    seen: int = 0
    head: asyncio.Event = field(default_factory=asyncio.Event)  # a request's head read
    connections: int = 0
    hold: asyncio.Event = field(default_factory=asyncio.Event)  # never set: held for good
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    messages: int = 0  # messages in the requests answered


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, b: Behaviour) -> None:
    b.connections += 1
    b.writers.append(writer)
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            what = b.plan[b.seen] if b.seen < len(b.plan) else "answer"
            b.seen += 1
            b.head.set()
            if what == "stall":
                await b.hold.wait()
            if what == "reset":
                writer.transport.abort()
                return
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = await reader.readexactly(length)
            if what == "hold":
                await b.hold.wait()
            try:  # a peer's request: each message accepted
                count = len(json.loads(body)["messages"])
            except (ValueError, KeyError, TypeError):
                count = 0
            b.messages += count
            answer = json.dumps({"results": [{"status": "accepted"}] * count}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer)
            )
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def server(*plan: str) -> AsyncIterator[tuple[str, Behaviour]]:
    b = Behaviour(list(plan))
    srv = await asyncio.start_server(lambda r, w: _serve(r, w, b), "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", b
    finally:
        srv.close()
        for task in asyncio.all_tasks():  # the handlers held for good
            if task is not asyncio.current_task() and "_serve" in repr(task.get_coro()):
                task.cancel()


def settled(client: Client, opened: list[Connection]) -> list[Connection]:
    """The connections ``client`` opened that are neither kept idle nor closed:
    leaked (open, and never to be used or closed again)."""
    return [c for c in opened if not c.writer.is_closing() and c not in client._idle]


def recording(client: Client) -> list[Connection]:
    opened: list[Connection] = []
    real = client._open

    async def _open() -> Connection:
        connection = await real()
        opened.append(connection)
        return connection

    client._open = _open  # type: ignore[method-assign]
    return opened


# http1.Client.start ------------------------------------------------------------------


async def test_a_started_request_cancelled_before_it_runs_gives_back_its_place_and_connection() -> (
    None
):
    async with server() as (url, _):
        client = Client(url, max_connections=2)
        opened = recording(client)
        await client.request("POST", "/x", content=b"1")
        task = client.start("POST", "/x", content=b"2", headers={})
        assert task is not None
        task.cancel()  # before its first step: its coroutine never runs
        await asyncio.gather(task, return_exceptions=True)
        assert client._places.free == 2
        assert settled(client, opened) == []
        await client.aclose()


async def test_a_started_request_cancelled_while_it_waits_gives_back_its_place() -> None:
    async with server("answer", "hold") as (url, b):
        client = Client(url, max_connections=1)
        opened = recording(client)
        await client.request("POST", "/x", content=b"1")
        b.head.clear()
        task = client.start("POST", "/x", content=b"2", headers={})
        assert task is not None
        await b.head.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert client._places.free == 1
        assert settled(client, opened) == []
        await client.aclose()


async def test_a_request_cancelled_while_its_body_drains_closes_its_connection() -> None:
    async with server("stall") as (url, b):
        client = Client(url)
        opened = recording(client)
        task = asyncio.create_task(client.request("POST", "/x", content=b"x" * BIG))
        await b.head.wait()  # the client wrote all it could and waits in drain
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert client._places.free == client.max_connections
        assert settled(client, opened) == []
        await client.aclose()


async def test_a_kept_connection_reset_while_a_big_body_drains_is_sent_again() -> None:
    # The second request goes on the kept connection, which the server resets
    # after its head: stale (nothing answered), so sent again on a new one, as
    # before the change (send was part of the exchange that retries).
    async with server("answer", "reset", "answer") as (url, b):
        client = Client(url)
        opened = recording(client)
        await client.request("POST", "/x", content=b"1")
        response = await client.request("POST", "/x", content=b"x" * BIG)
        assert response.status_code == 200
        assert b.seen == 3 and b.connections == 2
        assert settled(client, opened) == []
        await client.aclose()


# HTTPTransport.start -------------------------------------------------------------------


def _peer(url: str) -> Peer:
    return Peer(name="bob", secret="s", roles={}, url=url)


async def test_a_transport_start_cancelled_before_it_runs_cancels_its_request() -> None:
    async with server("answer", "hold") as (url, b):
        transport = HTTPTransport(timeout=30)
        peer = _peer(url)
        await transport.post(peer, "messages", b"{}", {})
        client = transport._clients[url]
        assert isinstance(client, LeanClient)
        b.head.clear()
        started = transport.start(peer, "messages", b"{}", {})
        assert started is not None
        started.cancel()  # before its first step (a round cancelled as it starts)
        await asyncio.gather(started, return_exceptions=True)
        await b.head.wait()  # the request was written (inside start)
        # The request is not left to run on its own for up to the timeout,
        # holding its place (and its connection), its failure never retrieved.
        others = [
            t
            for t in asyncio.all_tasks()
            if t is not asyncio.current_task() and "_serve" not in repr(t.get_coro())
        ]
        if others:  # cancelled, they end in a step or two; held, never (bounded here)
            await asyncio.wait(others, timeout=1)
        assert all(task.done() for task in others)
        assert client.http._places.free == client.http.max_connections
        await transport.close()


async def test_a_transport_start_that_fails_raises_unreachable() -> None:
    async with server("answer", "reset", "reset") as (url, _):
        transport = HTTPTransport(timeout=30)
        peer = _peer(url)
        await transport.post(peer, "messages", b"{}", {})
        started = transport.start(peer, "messages", b"{}", {})
        assert started is not None
        try:
            await transport.finish(peer, started)
        except Unreachable:
            pass
        else:
            raise AssertionError("a reset twice is no answer")
        await transport.close()


# PeerExecutor: the eager send end to end ---------------------------------------------

ROLES = {"platform": ["Platform"], "business": ["Business"]}


async def test_what_was_held_behind_a_request_sent_alone_goes_when_that_request_fails() -> None:
    # The peer stops with the request sent alone under way and three held
    # behind it (MIN_SHARE): once it is back, every message is delivered.
    from peach import PeachAdapter
    from peach.peer import PeerExecutor
    from tests.conftest import SIMPLE_CREATE, load
    from tests.peach.test_peer import directory, settle

    simple = load("atomic-ucp.lsh")
    roles = directory([simple], ROLES, http=True)
    platform_ex = PeerExecutor("platform", roles, retry_initial=0.01, retry_max=0.05)
    platform = PeachAdapter("platform", simple, "Platform", platform_ex)
    business_ex = PeerExecutor("business", roles)
    business = PeachAdapter("business", simple, "Business", business_ex)
    async with platform:
        async with business:
            await platform.attempt([platform.build_action("Create", SIMPLE_CREATE)])
            await settle([platform_ex, business_ex])
            sent: list[str] = []
            transport = platform_ex.transport
            assert isinstance(transport, HTTPTransport)
            start = transport.start

            def noting(*args: Any) -> Any:
                result = start(*args)
                sent.append("now" if result is not None else "none")
                return result

            transport.start = noting  # type: ignore[method-assign,assignment]
            for _ in range(4):
                await platform.attempt([platform.build_action("Create", SIMPLE_CREATE)])
            assert sent == ["now"] and platform_ex.outstanding() == 4
        # Business stopped: what it did not answer is sent again once it is back.
        again_ex = PeerExecutor("business", roles)
        async with PeachAdapter("business", simple, "Business", again_ex):
            await settle([platform_ex, again_ex], 10)
        assert platform_ex.outstanding() == 0


async def answered(platform_ex: Any) -> None:
    """Until every message Platform sent is answered."""
    while platform_ex.outstanding():
        platform_ex.progress.clear()
        await asyncio.wait_for(platform_ex.progress.wait(), 5)


@contextlib.asynccontextmanager
async def platform_facing(url: str) -> AsyncIterator[tuple[Any, Any, LeanClient]]:
    """Platform, peer to peer with the fake peer at ``url`` as Business, once a
    first Create is answered (its connection kept): the adapter, its executor,
    and its client for that peer."""
    from peach import PeachAdapter
    from peach.peer import PeerExecutor
    from tests.conftest import SIMPLE_CREATE, load
    from tests.peach.test_peer import directory

    simple = load("atomic-ucp.lsh")
    roles = directory([simple], ROLES, http=True)
    real = roles.peers["business"]
    roles.peers["business"] = Peer(real.name, real.secret, real.roles, url, real.acts_for)
    platform_ex = PeerExecutor("platform", roles, retry_initial=0.01, retry_max=0.05)
    platform = PeachAdapter("platform", simple, "Platform", platform_ex)
    async with platform:
        await platform.attempt([platform.build_action("Create", SIMPLE_CREATE)])
        await answered(platform_ex)
        transport = platform_ex.transport
        assert isinstance(transport, HTTPTransport)
        client = transport._clients[url]
        assert isinstance(client, LeanClient) and client.ready()
        yield platform, platform_ex, client


def create(platform: Any) -> list[Any]:
    from tests.conftest import SIMPLE_CREATE

    return [platform.build_action("Create", SIMPLE_CREATE)]


async def test_stopping_with_a_request_sent_alone_under_way_gives_everything_back() -> None:
    # The peer holds the request sent alone (a fake peer that reads it and never
    # answers): stop() returns, the request is cancelled, its place is given
    # back, and nothing is left running or unretrieved.
    async with server() as (url, b):
        async with platform_facing(url) as (platform, _, client):
            b.plan += ["hold"] * 10  # from now on, held for good
            b.head.clear()
            await platform.attempt(create(platform))
            assert client.http._places.free == client.http.max_connections - 1
            await b.head.wait()  # written inside attempt(), and held
            assert b.connections == 1
        assert client.http._places.free == client.http.max_connections
        mine = [
            t
            for t in asyncio.all_tasks()
            if t is not asyncio.current_task() and "_serve" not in repr(t.get_coro())
        ]
        assert mine == []


async def test_a_request_sent_alone_on_a_connection_the_peer_just_closed_goes_again_once() -> None:
    # The peer closes its kept connection (a restart) in the very step the
    # attempt is made: the request is written on it, found stale (no answer),
    # and sent once more on a new connection.
    async with server() as (url, b), platform_facing(url) as (platform, platform_ex, client):
        b.writers[0].transport.abort()  # its socket closed in the next step
        await platform.attempt(create(platform))
        assert client.http._places.free == client.http.max_connections - 1  # sent now
        await answered(platform_ex)
        assert b.connections == 2 and b.messages == 2  # each message answered once
        assert client.http._places.free == client.http.max_connections
