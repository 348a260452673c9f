"""A batched window's POST answers carry each attempter's positions and the
batch's size, never the other attempters' entries (a burst of N would cost N²):
the executor takes those from its stream, or, without one, from the log."""

from __future__ import annotations

import asyncio

import pytest

from langshaw import ActionInstance
from tests.conftest import load
from tests.harness import Harness

SIMPLE = load("atomic-ucp.lsh")
AGENTS = {"p1": ["SimpleUCP:Platform"], "p2": ["SimpleUCP:Platform"]}
CREATE = {"line_items": [], "currency": "USD", "payment_pref": {}}


@pytest.mark.parametrize("streams", [True, False], ids=["stream", "no-stream"])
async def test_a_shared_batch_reaches_every_attempter_whole(streams: bool) -> None:
    async with Harness("http", [SIMPLE], AGENTS, policy="batched", batch_window_ms=500) as h:
        adapters = [h.adapter(a, "Platform") for a in AGENTS]
        for adapter in adapters:
            adapter.executor.streams = streams
            await adapter.start()
        create = SIMPLE.actions["Create"]
        done = await asyncio.gather(
            *(
                adapter.attempt([ActionInstance(create, {"cid": f"c-{adapter.name}", **CREATE})])
                for adapter in adapters
            )
        )
        # One window, one batch of two entries: each was told only its own.
        assert [[i.bindings["cid"] for i in d] for d in done] == [["c-p1"], ["c-p2"]]
        async with h.client("p1") as client:
            log = (await client.get("/mas/default/protocols/SimpleUCP/log")).json()["events"]
        assert [len(e["instances"]) for e in log] == [2]
        # ...and both adapters hold the whole batch, the other's entry included,
        # when the attempt returns.
        for adapter in adapters:
            assert set(adapter.state.roots()) == {("c-p1",), ("c-p2",)}
