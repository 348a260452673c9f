"""kill -9 under concurrent load: dense log, no acknowledged attempt lost.

Regression: under the batched policy a window could commit after a later one,
so a kill between the two left a hole in the log (146, 148, ...) and an adapter
started on it never finished catching up. bench/soak.py runs the same check
for 20 cycles and prints the figures.
"""

from __future__ import annotations

import asyncio

import pytest

from bench._hostile import config_file, kill_cycles, server_process
from peach import PeachAdapter, SyncExecutor
from tests.hostile._support import SIMPLE


@pytest.mark.parametrize(
    "options",
    [
        ("--policy", "batched", "--batch-window-ms", "2"),
        ("--policy", "batched", "--batch-window-ms", "2", "--sync", "full"),
        ("--policy", "instant"),
    ],
    ids=["batched", "batched-full", "instant"],
)
async def test_kill_9_under_load_loses_no_acknowledged_attempt(tmp_path, options) -> None:
    report = await kill_cycles(tmp_path, 3, agents=6, readers=1, seed=7, options=options)
    assert "failed_at" not in report, report
    assert report["holes"] == 0, report
    assert report["lost"] == 0, report
    assert report["stream_gaps"] == 0 and report["stream_duplicates"] == 0, report
    assert report["acknowledged"] > 0
    assert report["instances"] >= report["acknowledged"]
    # An agent starting on the recovered log catches up and goes live.
    config = config_file(tmp_path, 6)
    async with server_process(config, tmp_path / "soak.db", *options) as (_, url):
        executor = SyncExecutor(url, token="p0-token", mas="soak")
        adapter = PeachAdapter("p0", SIMPLE, "Platform", executor)
        await asyncio.wait_for(adapter.start(), 30)
        try:
            assert len(adapter.enactments()) >= report["acknowledged"]
        finally:
            await adapter.stop()
