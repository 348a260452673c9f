"""The shared tail of the log and the bounded subscriber backlog."""

from __future__ import annotations

import pytest

from langshaw import ActionInstance
from strabo.core.feed import Lagging, Subscriber, Tail
from syncserver import Batch, Entry
from tests.conftest import SIMPLE_CREATE, load

SIMPLE = load("atomic-ucp.lsh")


def batch(seq: int, size: int = 10) -> Batch:
    bindings = {**SIMPLE_CREATE, "cid": f"c{seq}", "currency": "x" * size}
    instance = ActionInstance(SIMPLE.action("Create"), bindings)
    return Batch("SimpleUCP", seq, (Entry(instance, "p"),))


def test_the_tail_serves_only_ranges_it_holds_whole() -> None:
    frame = len(batch(1).sse_frame)
    tail = Tail(limit=frame * 3)
    for seq in range(1, 6):
        tail.add(batch(seq))
    # It kept the newest three (3, 4, 5).
    assert [b.seq for b in tail.read(2, 5)] == [3, 4, 5]
    assert [b.seq for b in tail.read(3, 4)] == [4]
    assert tail.read(1, 5) is None  # batch 2 is gone: the store must answer
    assert tail.read(4, 6) is None  # batch 6 is not there yet


def test_a_disabled_tail_holds_nothing() -> None:
    tail = Tail(limit=0)
    tail.add(batch(1))
    assert tail.read(0, 1) is None


def test_a_subscriber_over_its_byte_bound_is_dropped_and_freed() -> None:
    subscriber = Subscriber(limit=1000, limit_bytes=3 * len(batch(1, 1000).sse_frame))
    for seq in range(1, 4):
        subscriber.push(batch(seq, 1000))
    assert not subscriber.lagging
    subscriber.push(batch(4, 1000))
    assert subscriber.lagging
    assert len(subscriber._queue) == 0 and subscriber._bytes == 0


async def test_a_dropped_subscriber_raises_lagging_once_drained() -> None:
    subscriber = Subscriber(limit=2)
    subscriber.push(batch(1))
    subscriber.push(batch(2))
    subscriber.push(batch(3))
    with pytest.raises(Lagging):
        await subscriber.get()


def test_one_batch_larger_than_the_bound_is_still_delivered() -> None:
    subscriber = Subscriber(limit=10, limit_bytes=100)
    subscriber.push(batch(1, 5000))
    assert not subscriber.lagging and len(subscriber._queue) == 1


async def test_streams_catching_up_share_one_read_of_each_page() -> None:
    import asyncio

    from strabo.core.feed import SharedReads

    loads: list[tuple[int, int]] = []
    gate = asyncio.Event()

    async def load(after: int, until: int) -> list[Batch]:
        loads.append((after, until))
        await gate.wait()
        return [batch(seq) for seq in range(after + 1, until + 1)]

    pages = SharedReads(limit=10**6)
    readers = [asyncio.create_task(pages.read(0, 8, load)) for _ in range(50)]
    await asyncio.sleep(0)  # let every reader ask (ordering, not a race: one loop turn)
    gate.set()
    results = await asyncio.gather(*readers)
    assert loads == [(0, 8)]
    assert all(r is results[0] or r == results[0] for r in results)
    assert all(a is b for r in results for a, b in zip(r, results[0], strict=True))
    # Read again later: from memory, the same objects.
    again = await pages.read(0, 8, load)
    assert loads == [(0, 8)] and again[0] is results[0][0]


async def test_shared_pages_are_bounded() -> None:
    from strabo.core.feed import SharedReads

    async def load(after: int, until: int) -> list[Batch]:
        return [batch(seq) for seq in range(after + 1, until + 1)]

    pages = SharedReads(limit=10**9, count=10)
    for start in range(0, 40, 8):
        await pages.read(start, start + 8, load)
    assert len(pages._batches) == 10
    assert sorted(pages._batches) == list(range(31, 41))
