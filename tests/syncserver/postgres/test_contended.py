"""When a turn waits for attempts to share its append (``SharedFinalizer.CONTENDED``):
only after an append of several attempts met other servers' batches; a
sequential agent, whichever server it sends to, never waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from syncserver._shared import SharedFinalizer
from tests.syncserver.postgres.test_servers import attempt, create, created, servers


def waits(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[float]:
    """Every turn's wait of ``seconds`` (CONTENDED), recorded and shortened to
    nothing; other sleeps go on as they are."""
    seen: list[float] = []
    sleep = asyncio.sleep

    async def recording(delay: float, *args: Any) -> Any:
        if delay == seconds:
            seen.append(delay)
            delay = 0
        return await sleep(delay, *args)

    monkeypatch.setattr(SharedFinalizer, "CONTENDED", seconds)
    monkeypatch.setattr(asyncio, "sleep", recording)
    return seen


async def test_a_sequential_agent_never_waits(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = waits(monkeypatch, 0.0123)
    async with servers(pg_url, 2) as (a, b):
        for i in range(6):  # each step to the other server, as a load balancer would
            first, second = (a, b) if i % 2 else (b, a)
            assert (await attempt(first, "platform", [create(f"c{i}")], f"p{i}")).seq
            assert (await attempt(second, "business", [created(f"c{i}")], f"b{i}")).seq
    assert seen == []


async def test_a_group_that_met_other_servers_batches_makes_the_next_turn_wait(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = waits(monkeypatch, 0.0123)
    async with servers(pg_url, 2) as (a, b):
        finalizer = a.ledgers[("default", "SimpleUCP")]._shared
        assert finalizer is not None
        queued = asyncio.Event()

        class Queue(list[Any]):
            def append(self, item: Any) -> None:
                super().append(item)
                if len(self) == 3:
                    queued.set()

        monkeypatch.setattr(finalizer, "_queue", Queue())
        # b commits while a does not follow it (a held back): a's next append
        # meets b's batch, with a group of attempts.
        async with finalizer._lock:
            assert (await attempt(b, "platform", [create("theirs")], "t")).seq == 1
            group = [
                asyncio.ensure_future(attempt(a, "platform", [create(f"g{i}")], f"g{i}"))
                for i in range(3)
            ]
            await queued.wait()  # all three wait for one turn, behind the lock
        answers = await asyncio.gather(*group)
        assert all(not isinstance(r, Exception) for r in answers), answers
        assert finalizer._contended
        assert seen == []  # the group itself did not wait: it was not known contended
        assert (await attempt(a, "platform", [create("next")], "n")).seq
        assert seen == [0.0123]
