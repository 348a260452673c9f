"""A batched window over the shared (PostgreSQL) log is cut into bounded batches
too, as on one server (tests/syncserver/test_window_split.py, whose helpers
this uses): the turn that finalizes it appends every part, and another server
follows each batch once, in order."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from syncserver import SyncServer, _window
from tests.hostile.test_review_window_split import seqs_until
from tests.syncserver.test_window_split import (
    AGENTS,
    COUNT,
    SIMPLE,
    Arrivals,
    attempt_of,
    bound_for,
    check_split,
    gate,
)


async def until_seq(server: SyncServer, last: int) -> list[int]:
    """The seqs a subscriber on ``server`` receives from the start, up to ``last``."""
    return await seqs_until(server.ledgers[("default", "SimpleUCP")].subscribe(0), last, 10)


@pytest.mark.parametrize(("per_batch", "expected"), [(2.5, None), (math.inf, 1)])
async def test_a_window_over_a_shared_log_is_split_too(
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
    per_batch: float,
    expected: int | None,
) -> None:
    bound = bound_for(per_batch)
    monkeypatch.setattr(_window, "WINDOW_BATCH_BYTES", bound)
    options: dict[str, Any] = {"store": pg_url, "policy": "batched", "batch_window_ms": 1}
    async with (
        SyncServer.embedded([SIMPLE], AGENTS, **options) as a,
        SyncServer.embedded([SIMPLE], AGENTS, **options) as b,
    ):
        finalizer = a.ledgers[("default", "SimpleUCP")]._shared
        assert finalizer is not None
        window = Arrivals(COUNT)
        monkeypatch.setattr(finalizer, "_queue", window)
        gate(monkeypatch, finalizer, "_turn", window)
        receipts = await asyncio.gather(
            *(
                a.attempt("default", "SimpleUCP", a.agent("default", p), attempt_of(p), f"id-{p}")
                for p in AGENTS
            )
        )
        arrived = window.order
        batches = await b.read("default", "SimpleUCP", b.agent("default", "p0"), 0, 99)
        parts = check_split(batches, arrived, bound)
        if expected is not None:
            assert len(parts) == expected
        else:
            assert 3 <= len(parts) < COUNT
        for agent, receipt in zip(AGENTS, receipts, strict=True):
            assert agent in [e.performer for e in receipt.batch.entries]
            assert [receipt.batch.entries[i].instance["cid"] for i in receipt.positions] == [
                f"{agent}-a",
                f"{agent}-b",
            ]
            assert [e.performer for e in batches[receipt.seq - 1].entries][::2] == parts[
                receipt.seq - 1
            ]
        # The other server streams every batch, once, in order.
        assert await until_seq(b, len(parts)) == list(range(1, len(parts) + 1))
