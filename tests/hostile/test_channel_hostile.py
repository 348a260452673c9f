"""Channels under hostile clients: slow readers, floods of attempts, abandoned
connections. Each costs bounded time and memory and leaves the server serving."""

from __future__ import annotations

import asyncio
import json

from syncserver import Limits
from tests.hostile._support import SIMPLE, closed_by_server, create, guarded, raw
from tests.hostile.test_slow_clients import Watched, big_create
from tests.syncserver.test_channel import (
    PATH,
    line,
    next_event,
    open_channel,
    seqs_until_answered,
)

AGENTS = {"p1": ["Platform"], "b1": ["Business"]}


#: Batches of 40 kB committed at most while waiting for a channel that reads
#: nothing to stall: 40 MB, ten times what Linux lets the kernel buffer for one
#: loopback connection by default (the sender's tcp_wmem maximum, 4 MiB).
MOST_BATCHES = 1000


async def test_a_channel_that_does_not_read_is_dropped() -> None:
    limits = Limits(write_timeout=0.5, stream_backlog_bytes=200_000)
    async with guarded([SIMPLE], AGENTS, limits) as (server, url):
        ledger = server.ledgers[("default", "SimpleUCP")]
        ledger.subscribers = watched = Watched()
        reader, writer = await open_channel(url)
        writer.transport.pause_reading()  # from now on the client reads nothing
        (subscriber,) = watched
        agent = server.agent("default", "p1")
        # Commit 40 kB batches until the server stops writing them to the channel
        # and queues them instead, past its backlog (or has dropped it already).
        # How many that takes is up to the kernel: on loopback it may buffer up to
        # 4 MiB, grown while the connection opens, so a fixed count (100 batches
        # were) may all fit, and the channel never stall.
        for i in range(MOST_BATCHES):
            if subscriber.lagging or subscriber not in watched:
                break
            await server.attempt("default", "SimpleUCP", agent, [big_create(f"c{i}")])
        else:
            raise AssertionError(f"the channel took {MOST_BATCHES} batches of 40 kB unread")
        await watched.empty(10)  # dropped: the backlog freed, and the socket after write_timeout
        writer.transport.resume_reading()
        received = (await closed_by_server(reader, 10)).decode()
        writer.close()
        ids = [int(line[4:]) for line in received.splitlines() if line.startswith("id: ")]
        assert ids == list(range(1, len(ids) + 1))
        assert len(ids) < ledger.committed_seq  # what was not written was never sent
        # The agent's stream count is back to zero: it may open its streams again.
        again = [await open_channel(url) for _ in range(limits.max_streams_per_agent)]
        for _, w in again:
            w.close()


async def test_attempts_past_the_in_flight_bound_are_answered_429() -> None:
    from syncserver._channel import MAX_IN_FLIGHT

    options = {"policy": "batched", "batch_window_ms": 1000}
    async with guarded([SIMPLE], AGENTS, **options) as (server, url):
        reader, writer = await open_channel(url)
        count = MAX_IN_FLIGHT + 5
        writer.write(
            b"".join(
                line({"instances": [create(f"c{i}")], "attempt_id": f"a{i}"})
                for i in range(count)
            )
        )
        answers: dict[str, int] = {}
        while len(answers) < count:
            kind, data = await next_event(reader)
            if kind == "answer":
                answers[data["id"]] = data["status"]
        refused = [i for i, status in answers.items() if status == 429]
        assert len(refused) == 5
        assert sum(status == 200 for status in answers.values()) == MAX_IN_FLIGHT
        ledger = server.ledgers[("default", "SimpleUCP")]
        assert len(ledger.state) == MAX_IN_FLIGHT
        writer.close()


async def test_channels_count_as_streams_and_abandoned_ones_are_released() -> None:
    limits = Limits(max_streams_per_agent=3)
    async with guarded([SIMPLE], AGENTS, limits) as (server, url):
        server.ledgers[("default", "SimpleUCP")].subscribers = watched = Watched()
        for _ in range(5):  # open the most, drop them abruptly, again
            held = [await open_channel(url) for _ in range(3)]
            reader, writer = await raw(url)
            writer.write(
                f"GET {PATH}/channel HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer p1-token\r\n"
                "Connection: Upgrade\r\nUpgrade: strabo-channel\r\n\r\n".encode()
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 429 ")
            writer.close()
            for _, w in held:
                w.transport.abort()
            await watched.empty(5)  # the server saw them go
            reader, writer = await raw(url)
            writer.write(
                b"GET /mas/default/agents HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Bearer p1-token\r\nConnection: close\r\n\r\n"
            )
            body = (await closed_by_server(reader, 5)).partition(b"\r\n\r\n")[2]
            writer.close()
            agents = {a["name"]: a for a in json.loads(body)["agents"]}
            assert not agents["p1"]["connected"] and agents["p1"]["streams"] == {}


async def test_a_client_that_leaves_mid_attempt_leaves_the_server_consistent() -> None:
    async with guarded([SIMPLE], AGENTS, policy="batched", batch_window_ms=200) as (server, url):
        for i in range(20):
            _, writer = await open_channel(url)
            writer.write(line({"instances": [create(f"c{i}")], "attempt_id": f"a{i}"}))
            await writer.drain()
            writer.transport.abort()
        reader, writer = await open_channel(url, after=0)
        seqs = await seqs_until_answered(reader, writer, "last")
        assert seqs == list(range(1, len(seqs) + 1))  # dense, each once
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == seqs[-1]
        writer.close()
