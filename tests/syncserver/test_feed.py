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
