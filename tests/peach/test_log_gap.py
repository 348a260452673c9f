"""A server log that skips a batch stops the feed for good: reconnecting would
meet the same gap, and applying what follows could apply an action before one
it depends on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

import pytest

from langshaw import ActionInstance
from peach import LogGapError, PeachAdapter
from peach.executor import Executor, Member
from syncserver.batch import Batch, Entry
from tests.conftest import load

SIMPLE = load("atomic-ucp.lsh")


class Gappy(Executor):
    """A log of one batch, then a stream that offers batch 3: batch 2 is gone."""

    def __init__(self) -> None:
        super().__init__("gap")
        self.streams_opened = 0
        self.first = Batch(
            SIMPLE.name,
            1,
            (Entry(ActionInstance(SIMPLE.actions["Create"], {"cid": "c1"}), "platform"),),
        )

    async def _read(self, adapter: Member, after: int, limit: int) -> list[Batch]:
        return [self.first] if after == 0 else []

    async def _stream(self, adapter: Member, after: int) -> AsyncIterator[Batch]:
        self.streams_opened += 1
        yield Batch(SIMPLE.name, 3, ())

    async def _send(
        self, adapter: Member, instances: Sequence[ActionInstance], attempt_id: str
    ) -> tuple[Batch, list[int]]:
        raise AssertionError("no attempt is sent")


async def test_a_gap_in_the_log_stops_the_feed_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    executor = Gappy()
    adapter = PeachAdapter("platform", SIMPLE, "Platform", executor)
    with caplog.at_level(logging.ERROR, logger="strabo.peach"):
        async with adapter:
            feed = executor._feeds[SIMPLE.name]
            assert feed.task is not None
            await asyncio.wait_for(feed.task, 10)  # ends: it does not reconnect
            assert executor.streams_opened == 1
            assert isinstance(feed.stopped, LogGapError)
            with pytest.raises(LogGapError, match="has no batch 2 but has batch 3"):
                await adapter.sync()
    assert any("stopped" in r.getMessage() for r in caplog.records)
