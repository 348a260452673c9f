"""Batched windows are committed and published in the order of their numbers.

Regression: a window that had to explain a rejection (a read from the store)
took its sequence number S, then awaited the read before committing; a later
window committed S+1 meanwhile. Subscribers skipped batches, and a kill -9 in
between left a log with a hole.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langshaw import ActionInstance
from syncserver import MemoryStore, Rejected, SyncServer
from tests.hostile._support import SIMPLE, create


class GatedStore(MemoryStore):
    """A memory store whose attempt lookups wait for a gate, and which records the
    order in which batches reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.appended: list[int] = []
        self.lookup_started = asyncio.Event()
        self.gate = asyncio.Event()

    def append_now(self, mas: str, protocol: Any, batches: Any) -> None:
        self.appended.extend(b.seq for b in batches)
        super().append_now(mas, protocol, batches)

    async def find_attempt(self, *args: Any) -> Any:
        self.lookup_started.set()
        await self.gate.wait()
        return await super().find_attempt(*args)


def instance(cid: str) -> ActionInstance:
    return ActionInstance(SIMPLE.action("Create"), create(cid)["bindings"])


async def test_a_slow_rejection_does_not_let_a_later_window_commit_first() -> None:
    store = GatedStore()
    agents = {"p1": ["Platform"], "p2": ["Platform"]}
    server = SyncServer.embedded(
        [SIMPLE], agents, store=store, policy="batched", batch_window_ms=2
    )
    async with server:
        p1, p2 = server.agent("default", "p1"), server.agent("default", "p2")
        ledger = server.ledgers[("default", "SimpleUCP")]
        seen: list[int] = []
        stream = ledger.subscribe(0)

        async def follow() -> None:
            async for batch in stream:
                seen.append(batch.seq)
                if batch.seq == 3:
                    return

        follower = asyncio.create_task(follow())
        await server.attempt("default", "SimpleUCP", p1, [instance("c0")], attempt_id="a0")
        # One window: a legal Create and a duplicate whose rejection is explained
        # from the store (held at the gate).
        legal = asyncio.create_task(
            server.attempt("default", "SimpleUCP", p1, [instance("c1")], attempt_id="a1")
        )
        duplicate = asyncio.create_task(
            server.attempt("default", "SimpleUCP", p2, [instance("c0")], attempt_id="a2")
        )
        await asyncio.wait_for(store.lookup_started.wait(), 5)
        # The next window, while the first one is still explaining its rejection.
        later = await asyncio.wait_for(
            server.attempt("default", "SimpleUCP", p2, [instance("c2")], attempt_id="a3"), 5
        )
        assert later.seq == 3
        assert (await asyncio.wait_for(legal, 5)).seq == 2
        store.gate.set()
        try:
            await asyncio.wait_for(duplicate, 5)
        except Rejected as exc:
            assert exc.code == "duplicate"
        else:
            raise AssertionError("the duplicate Create was accepted")
        await asyncio.wait_for(follower, 5)
        assert store.appended == [1, 2, 3]
        assert seen == [1, 2, 3]
        assert ledger.committed_seq == 3
