"""A commit's notification carries the batches it wrote, when they fit: the
other servers apply them as they come, without reading the log; those that
do not fit, or come while a turn holds the replica, are read as before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from syncserver import SyncServer
from syncserver._pgsql import NOTE_BYTES
from syncserver._pgstore import PostgresStore
from tests.syncserver.postgres.test_servers import (
    SIMPLE,
    Follower,
    attempt,
    create,
    created,
    servers,
)

KEY = ("default", "SimpleUCP")


class Reads:
    """Counts the log reads of one server's store (a follower's catch-up)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, server: SyncServer) -> None:
        self.count = 0
        store = server.store
        assert isinstance(store, PostgresStore)
        real = store.read

        async def read(*args: Any) -> Any:
            self.count += 1
            return await real(*args)

        monkeypatch.setattr(store, "read", read)


class Heard:
    """Wraps a server's watcher of KEY: an event per notification handled."""

    def __init__(self, server: SyncServer) -> None:
        store = server.store
        assert isinstance(store, PostgresStore)
        self.real = store._watchers[KEY]
        self.count = 0
        self.changed = asyncio.Event()
        self.carried: list[Any] = []
        store._watchers[KEY] = self

    def __call__(self, seq: int, carried: Any = None) -> None:
        self.real(seq, carried)
        self.count += 1
        self.carried.append(carried)
        self.changed.set()

    async def until(self, count: int) -> None:
        async with asyncio.timeout(10):
            while self.count < count:
                self.changed.clear()
                await self.changed.wait()


async def test_a_follower_applies_what_the_notification_carried(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with servers(pg_url, 2) as (a, b):
        reads = Reads(monkeypatch, b)
        follower = Follower(b)
        for seq, (agent, instance) in enumerate(
            [("platform", create("c1")), ("business", created("c1"))], start=1
        ):
            receipt = await attempt(a, agent, [instance], f"x{seq}")
            assert receipt.seq == seq
            await follower.until(seq)
        assert b.ledgers[KEY].committed_seq == 2
        assert reads.count == 0  # both came with their notifications
        # b's replica holds them: b checks the next step against them.
        again = await attempt(b, "business", [created("c1")], "x3")
        assert isinstance(again, Exception) and "Created" in str(again), again
        follower.stop()


async def test_a_commit_too_large_to_carry_is_read_from_the_log(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with servers(pg_url, 2) as (a, b):
        reads = Reads(monkeypatch, b)
        follower = Follower(b)
        large = create("big")
        items = [{"item": {"id": "roses", "title": "x" * NOTE_BYTES}, "quantity": 1}]
        large = type(large)(large.action, {**large.bindings, "line_items": items})
        assert (await attempt(a, "platform", [large], "big")).seq == 1
        await follower.until(1)
        assert reads.count >= 1
        [batch] = await b.store.read("default", SIMPLE, 0, 1)
        assert batch.entries[0].instance.bindings == large.bindings
        follower.stop()


async def test_a_commit_heard_while_a_turn_holds_the_replica_waits_for_it(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with servers(pg_url, 2) as (a, b):
        finalizer = b.ledgers[KEY]._shared
        assert finalizer is not None
        ledger = b.ledgers[KEY]
        heard = Heard(b)
        async with finalizer._lock:  # as a turn does, with checks not yet written
            assert (await attempt(a, "platform", [create("c1")], "x1")).seq == 1
            await heard.until(1)
            assert ledger.committed_seq == 0  # not applied under the turn's feet
        follower = Follower(b)
        await follower.until(1)  # read from the log once the replica is free
        assert ledger.committed_seq == 1
        follower.stop()
