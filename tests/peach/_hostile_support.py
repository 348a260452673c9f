"""What tests/peach/test_adapter_hostile.py shares: instances, an independent
replay of the server's log to hold the agents' views against, and executors
and adapters that misbehave (or wait) on cue."""

from __future__ import annotations

import asyncio
from typing import Any

from langshaw import ActionInstance, SocialState
from peach import LocalExecutor, PeachAdapter
from peach.executor import Member
from tests.conftest import SIMPLE_CREATE, load
from tests.harness import Harness

SIMPLE = load("atomic-ucp.lsh")


def create(adapter: PeachAdapter, **values: Any) -> ActionInstance:
    return adapter.initiating()[0].bind(**{**SIMPLE_CREATE, **values})


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


async def log_agrees(h: Harness, *adapters: PeachAdapter) -> int:
    """Replay the server's log into a fresh state (every batch must be legal in
    order) and check that each adapter's view holds exactly the same thing."""
    agent = h.server.agent("default", "platform")
    batches = await h.server.read("default", SIMPLE.name, agent, 0, 1_000_000)
    state = SocialState(SIMPLE)
    logged: dict[tuple[Any, ...], list[Any]] = {}
    for batch in batches:
        assert state.attempt([e.instance for e in batch.entries]) is None, batch
        for e in batch.entries:
            record = (batch.seq, e.instance.name, dict(e.instance.bindings), e.performer)
            logged.setdefault((e.instance.bindings["cid"],), []).append(record)
    for adapter in adapters:
        if adapter.running:
            await adapter.sync()
        assert sorted(map(repr, adapter.enactments())) == sorted(map(repr, state.roots()))
        for root, records in logged.items():
            mine = [(s, i.name, dict(i.bindings), p) for s, i, p in adapter.history(root)]
            assert mine == records
    return len(batches)


def no_tasks_left() -> None:
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert others == [], [t.get_name() for t in others]


class Leaving(LocalExecutor):
    """A LocalExecutor that says when an adapter has left it (its stop then drains)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.left = asyncio.Event()

    async def leave(self, adapter: Member) -> None:
        await super().leave(adapter)
        self.left.set()


class SlowJoin(LocalExecutor):
    """A LocalExecutor whose admission waits for a go (to hold a start open)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admitting, self.go = asyncio.Event(), asyncio.Event()

    async def _admit(self, adapter: Member) -> None:
        self.admitting.set()
        await self.go.wait()
        await super()._admit(adapter)


class Faulty(PeachAdapter):
    def batch_applied(self, *args: Any) -> None:
        super().batch_applied(*args)
        raise RuntimeError("a broken adapter")
