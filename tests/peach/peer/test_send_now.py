"""Over HTTP, a peer's attempt is on the wire before ``attempt()`` returns.

The first message to a peer in a turn of the event loop goes in a request
written on a kept connection right after the log's commit, before the agent's
adapters hear of it (``PeerExecutor._post``, ``HTTPTransport.start``): the peer
works on it while this agent updates its own view. The rest of a wave is shared
out by the sender's loop among the requests that may start, as before.

To see that the request left inside ``attempt()``, the receiving agent runs on
an event loop of its own thread, and the sender's loop is held (a blocking wait)
right after ``attempt()`` returns: only bytes written before then can arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from peach import PeachAdapter
from peach.peer import Directory, HTTPTransport, PeerExecutor
from strabo.serving import free_port
from tests.conftest import SIMPLE_CREATE, load
from tests.peach.test_peer import directory, settle

SIMPLE = load("atomic-ucp.lsh")
ROLES = {"platform": ["Platform"], "business": ["Business"]}


def create(platform: PeachAdapter) -> Any:
    return platform.build_action("Create", SIMPLE_CREATE)  # a checkout of its own


@contextmanager
def business_in_a_thread(roles: Directory) -> Iterator[threading.Event]:
    """Business, on an event loop of its own; yields an event set whenever its
    state takes a message."""
    received, ready, stop = threading.Event(), threading.Event(), threading.Event()
    failed: list[BaseException] = []

    async def run() -> None:
        business = PeachAdapter("business", SIMPLE, "Business", PeerExecutor("business", roles))
        business.listeners.append(lambda batch, newly: received.set())
        async with business:
            ready.set()
            await asyncio.get_running_loop().run_in_executor(None, stop.wait)

    def main() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:  # said by the test, not lost in the thread
            failed.append(exc)
            ready.set()

    thread = threading.Thread(target=main, name="business", daemon=True)
    thread.start()
    try:
        assert ready.wait(30) and not failed, failed
        yield received
    finally:
        stop.set()
        thread.join(30)
    assert not failed, failed


async def test_the_request_is_written_before_attempt_returns() -> None:
    roles = directory([SIMPLE], ROLES, http=True)
    platform_ex = PeerExecutor("platform", roles)
    platform = PeachAdapter("platform", SIMPLE, "Platform", platform_ex)
    with business_in_a_thread(roles) as received:
        async with platform:
            # The first request opens the connection the next ones reuse.
            await platform.attempt([create(platform)])
            await settle([platform_ex])
            received.clear()
            await platform.attempt([create(platform)])
            # This loop does not turn until Business has it (or 10 s pass):
            # only a request written inside attempt() can reach it meanwhile.
            assert received.wait(10), "the request left only after attempt() returned"
            await settle([platform_ex])


async def wave(count: int) -> tuple[list[tuple[str, int]], list[int], int]:
    """``count`` attempts of Platform in one step of a task, over HTTP, after one
    that opened the connection: how many messages each request carried, and
    whether it went at once ("now") or from the sender's loop ("loop"); how many
    messages Business had when each of the loop's requests was posted; and the
    seq of the last message Business has once all are acknowledged."""
    roles = directory([SIMPLE], ROLES, http=True)
    platform_ex, business_ex = (PeerExecutor(name, roles) for name in ROLES)
    platform = PeachAdapter("platform", SIMPLE, "Platform", platform_ex)
    business = PeachAdapter("business", SIMPLE, "Business", business_ex)
    carried: list[tuple[str, int]] = []
    had: list[int] = []
    async with platform, business:
        await platform.attempt([create(platform)])
        await settle([platform_ex, business_ex])
        transport = platform_ex.transport
        assert isinstance(transport, HTTPTransport)
        start, post = transport.start, transport.post

        def started(peer: Any, path: str, body: bytes, headers: Any) -> Any:
            result = start(peer, path, body, headers)
            if result is not None:  # (None: it did not send)
                carried.append(("now", len(json.loads(body)["messages"])))
            return result

        def posted(peer: Any, path: str, body: bytes, headers: Any) -> Any:
            carried.append(("loop", len(json.loads(body)["messages"])))
            had.append(len(business_ex.store.load()))
            return post(peer, path, body, headers)

        transport.start = started  # type: ignore[method-assign]
        transport.post = posted  # type: ignore[method-assign]
        for _ in range(count):
            await platform.attempt([create(platform)])
        await settle([platform_ex, business_ex])
        return carried, had, business_ex.store.load()[-1].seq


async def test_the_first_of_a_wave_goes_at_once_the_loop_shares_out_the_rest() -> None:
    carried, _, last = await wave(32)
    # One request went at once; the loop shared the other 31 among the three
    # requests that could still start (IN_FLIGHT is 4).
    assert carried[0] == ("now", 1)
    assert sorted(carried[1:]) == [("loop", 10), ("loop", 10), ("loop", 11)]
    assert last == 33  # all arrived, once each


async def test_what_follows_a_message_sent_alone_waits_for_it_unless_a_request_fills() -> None:
    """A few messages after the one sent at once go together once it is answered,
    not as a second small request beside it (a request costs more than a
    message: small waves under load would otherwise double the requests)."""
    carried, had, last = await wave(4)
    assert carried == [("now", 1), ("loop", 3)]
    assert had == [2]  # the one sent alone had arrived: it was answered
    assert last == 5


async def test_a_peer_whose_last_request_failed_gets_nothing_at_once() -> None:
    """After a failed request the loop's back-off decides when to send again:
    the next attempt is not written at once beside it."""
    answered = asyncio.Event()

    async def busy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = b'{"error":{"code":"busy","message":"busy"}}'
        with contextlib.suppress(Exception):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 503 Busy\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
                answered.set()
        writer.close()

    server = await asyncio.start_server(busy, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    roles = Directory.of(
        [SIMPLE],
        {
            "platform": {"roles": ["Platform"], "token": "p", "url": f"http://127.0.0.1:{free_port()}"},
            "business": {"roles": ["Business"], "token": "b", "url": f"http://127.0.0.1:{port}"},
        },
    )
    platform_ex = PeerExecutor("platform", roles, retry_initial=30, retry_max=30)
    platform = PeachAdapter("platform", SIMPLE, "Platform", platform_ex)
    async with server, platform:
        transport = platform_ex.transport
        assert isinstance(transport, HTTPTransport)
        answered.clear()
        await platform.attempt([create(platform)])
        rounds = platform_ex._in_flight["business"]
        await asyncio.wait_for(answered.wait(), 10)
        if rounds:
            await asyncio.wait(set(rounds), timeout=10)  # the failed request ended
        assert transport.ready(roles.peers["business"])  # a kept connection is idle
        started: list[object] = []
        start = transport.start

        def starting(*args: Any) -> Any:
            started.append(args)
            return start(*args)

        transport.start = starting  # type: ignore[method-assign]
        await platform.attempt([create(platform)])
        assert started == []
