"""The shared tail of the log and the bounded subscriber backlog."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from langshaw import ActionInstance
from syncserver import Batch, Entry, SyncServer
from syncserver.feed import Lagging, Subscriber, Tail
from tests.conftest import SIMPLE_CREATE, load

SIMPLE = load("atomic-ucp.lsh")


def batch(seq: int, size: int = 10) -> Batch:
    bindings = {**SIMPLE_CREATE, "cid": f"c{seq}", "currency": "x" * size}
    instance = ActionInstance(SIMPLE.action("Create"), bindings)
    return Batch("SimpleUCP", seq, (Entry(instance, "p"),))


def create_of(cid: str) -> dict[str, Any]:
    return {**SIMPLE_CREATE, "cid": cid}


def test_the_tail_serves_only_ranges_it_holds_whole() -> None:
    frame = batch(1).frame_size()  # what the tail measures a batch by
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

    from syncserver.feed import SharedReads

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
    from syncserver.feed import SharedReads

    async def load(after: int, until: int) -> list[Batch]:
        return [batch(seq) for seq in range(after + 1, until + 1)]

    pages = SharedReads(limit=10**9, count=10)
    for start in range(0, 40, 8):
        await pages.read(start, start + 8, load)
    assert len(pages._batches) == 10
    assert sorted(pages._batches) == list(range(31, 41))


async def test_a_sink_takes_batches_while_its_reader_waits_and_never_reorders() -> None:
    taken: list[int] = []
    accept = True

    def sink(batch: Batch) -> bool:
        if accept:
            taken.append(batch.seq)
        return accept

    subscriber = Subscriber(limit=100)
    subscriber.sink = sink
    subscriber.push(batch(1))  # the reader is not waiting: queued
    assert (await subscriber.get()).seq == 1
    reader = asyncio.ensure_future(subscriber.get())
    await asyncio.sleep(0)  # one loop step: the reader runs until it waits
    assert subscriber._waiter is not None
    subscriber.push(batch(2))
    subscriber.push(batch(3))
    assert taken == [2, 3] and subscriber.delivered == 3 and not reader.done()
    accept = False  # the client reads slowly: the stream queues
    subscriber.push(batch(4))
    accept = True  # a queued batch waits for the reader: what follows queues behind it
    subscriber.push(batch(5))
    assert taken == [2, 3]
    assert (await reader).seq == 4 and (await subscriber.get()).seq == 5


async def test_a_channel_subscription_never_gives_what_its_sink_took() -> None:
    server = SyncServer.embedded([SIMPLE], {"p": ["Platform"]})
    await server.start()
    try:
        ledger = server.ledgers[("default", "SimpleUCP")]
        taken: list[int] = []
        stream = ledger.subscribe(0, sink=lambda b: taken.append(b.seq) is None)
        agent = server.config.mas["default"].agents["p"]

        async def attempt(cid: str) -> None:
            await server.attempt(
                "default", "SimpleUCP", agent, [{"action": "Create", "bindings": create_of(cid)}]
            )

        await attempt("c1")
        first = await anext(stream)  # from the log: the stream was not live yet
        waiting = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0)  # one loop step: the stream runs until it waits, live
        assert next(iter(ledger.subscribers))._waiter is not None
        await attempt("c2")
        await attempt("c3")
        assert first.seq == 1 and taken == [2, 3] and not waiting.done()
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await stream.aclose()
    finally:
        await server.stop()


def test_a_frame_is_the_json_of_its_batch_with_each_bindings_text_shared() -> None:
    weird = {**SIMPLE_CREATE, "cid": 'c"1', "currency": "é\u2028\\", "n": [1, 2.5, {"k": "NaN"}]}
    entries = (
        Entry(ActionInstance(SIMPLE.action("Create"), weird), 'p"é'),
        Entry(ActionInstance(SIMPLE.action("Create"), {**SIMPLE_CREATE, "cid": 7}), "q"),
    )
    for chosen in (entries, entries[:1], ()):
        framed = Batch('Simple"UCP', 9, chosen)
        head, _, data = framed.sse_frame.partition(b"data: ")
        assert head == b"id: 9\nevent: batch\n" and data.endswith(b"\n\n")
        assert data[:-2] == json.dumps(framed.to_json(), separators=(",", ":")).encode()
        for entry in chosen:  # the log's row reuses the same text
            assert entry.bindings_json == json.dumps(entry.instance.bindings, separators=(",", ":"))
    nan = {**SIMPLE_CREATE, "cid": "c", "currency": float("nan")}
    entry = Entry(ActionInstance(SIMPLE.action("Create"), nan), "p")
    with pytest.raises(ValueError):
        Batch("SimpleUCP", 1, (entry,)).sse_frame  # noqa: B018 (never sent: not JSON)


def test_the_tail_measures_a_batch_without_making_its_frame_and_never_below_it() -> None:
    """A batch no reader asks for is never framed; the estimate the tail's
    bound counts is never below the frame's real size (so the bound holds)."""
    tail = Tail(limit=10**6)
    kept = [batch(seq, 200) for seq in range(1, 50)]
    for each in kept:
        tail.add(each)
    assert all(b._frame is None for b in kept)
    for each in kept:
        estimate = each.frame_size()
        assert 0 <= estimate - len(each.sse_frame) <= 16


def test_the_estimate_counts_names_as_json_writes_them() -> None:
    instance = ActionInstance(SIMPLE.action("Create"), {**SIMPLE_CREATE, "cid": "c1"})
    odd = Batch("SimpleUCP", 7, (Entry(instance, 'agent "é" \\ \\u0007' + "\u4e2d" * 20),))
    assert 0 <= odd.frame_size() - len(odd.sse_frame) <= 16


async def test_a_batch_given_already_is_not_given_again_when_it_is_followed() -> None:
    """A stream resumed after batch 3 on a server that has followed only up to
    2 (another server of a shared log committed 3): when this server follows 3,
    the stream must not get it again, through its sink or its queue."""
    import asyncio

    taken: list[int] = []
    subscriber = Subscriber(limit=100, limit_bytes=1 << 20)
    subscriber.delivered = 3
    subscriber.sink = lambda b: taken.append(b.seq) or True
    # The reader waits, caught up, as a stream does (what get() sets while it waits).
    subscriber._waiter = asyncio.get_running_loop().create_future()
    assert subscriber.push(batch(3)) is False
    assert taken == [] and not subscriber._queue
    subscriber.push(batch(4))
    assert taken == [4]
