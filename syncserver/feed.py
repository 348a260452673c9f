"""Feeding committed batches to readers: live subscribers and the log's tail.

A reader is either live (it receives each batch as it is committed, through a
:class:`Subscriber` with a bounded backlog) or catching up (it reads the log).
Catch-up reads of recent batches are served from the :class:`Tail`, one shared
copy for every reader, so a thousand agents reconnecting at once hold the
batches once, not a thousand times.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from typing import Any

from syncserver.batch import Batch


class Lagging(Exception):
    """A subscriber fell too far behind; it must reconnect and catch up from the log."""

    def __init__(self, last: int) -> None:
        super().__init__(f"fell behind after batch {last}")
        self.last = last


class Subscriber:
    """A live feed of batches with a backlog bounded in batches and, for streams
    that send them as server-sent events, in bytes.

    All subscribers queue suffixes of the same sequence of batch objects, so the
    memory they pin together is at most the largest backlog, however many there
    are. One that exceeds its bound is dropped: its queue is freed at once and its
    reader gets :class:`Lagging`, to resume from the log.

    A reader that can take a batch on the spot (a channel writing to its socket)
    sets ``sink``: while it waits with nothing queued, a batch goes straight to
    ``sink`` during the commit that publishes it, instead of waking the reader's
    task a loop step later. ``sink`` returns False to refuse (its client reads
    slowly), and the batch is queued as usual; ``delivered`` is the last batch it
    took, so that the reader never gives it again."""

    def __init__(self, limit: int, limit_bytes: int | None = None) -> None:
        self._queue: deque[Batch] = deque()
        self._waiter: asyncio.Future[Any] | None = None
        self._limit = limit
        self._limit_bytes = limit_bytes
        self._bytes = 0
        self.lagging = False
        self.sink: Callable[[Batch], bool] | None = None
        self.delivered = 0
        self._sunk = 0  # batches the sink took: the reader was not idle meanwhile

    def push(self, batch: Batch) -> bool:
        """Queue ``batch`` (or give it to the sink); whether a reader's task is
        to write it, in a later step of the loop."""
        if self.lagging:
            return False
        if batch.seq <= self.delivered:
            # Given already: a reader that resumed after a batch this server has
            # not followed yet (another server of a shared log committed it)
            # would otherwise get it twice when it is followed.
            return False
        if (
            self.sink is not None
            and self._waiter is not None
            and not self._queue
            and self.sink(batch)
        ):
            self.delivered = batch.seq
            self._sunk += 1
            return False
        size = len(batch.sse_frame) if self._limit_bytes is not None else 0
        if self._queue and (
            len(self._queue) >= self._limit
            or (self._limit_bytes is not None and self._bytes + size > self._limit_bytes)
        ):
            self.lagging = True
            self._queue.clear()
            self._bytes = 0
        else:
            self._queue.append(batch)
            self._bytes += size
        self._wake()
        return True

    def close(self) -> None:
        self.lagging = True
        self._queue.clear()
        self._bytes = 0
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self, idle: float | None = None) -> Batch | None:
        """The next batch; ``None`` if ``idle`` seconds pass without one.

        The reader waits on a bare future that :meth:`push` resolves, so the
        task reading resumes in the loop's next step: an event stream writes
        a batch to its client before the attempt's own answer goes out (the
        attempts endpoint yields once for that). An ``asyncio.Event`` waited
        through ``asyncio.wait`` took three steps."""
        loop = asyncio.get_running_loop()
        sunk = self._sunk
        while not self._queue:
            if self.lagging:
                raise Lagging(-1)
            waiter = self._waiter = loop.create_future()
            timer = None if idle is None else loop.call_later(idle, _expire, waiter)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
                if self._waiter is waiter:
                    self._waiter = None
            if not self._queue and not self.lagging and waiter.result() is _TIMED_OUT:
                if self._sunk != sunk:  # not idle: the sink took batches meanwhile
                    sunk = self._sunk
                    continue
                return None
        batch = self._queue.popleft()
        if self._limit_bytes is not None:
            self._bytes -= len(batch.sse_frame)
        return batch



_TIMED_OUT = object()


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(_TIMED_OUT)


class Tail:
    """The newest committed batches, up to ``limit`` bytes of their event frames
    and at most ``count`` batches (a batch in memory costs several times its
    frame, so both bounds matter: few large batches, or many small ones)."""

    def __init__(self, limit: int, count: int = 256) -> None:
        self.limit = limit
        self.count = count
        self._batches: deque[Batch] = deque()
        self._sizes: deque[int] = deque()
        self._bytes = 0

    def add(self, batch: Batch) -> None:
        """Keep ``batch``, measured by :meth:`Batch.frame_size`: its frame is
        made only when a reader asks for it (most batches no reader does)."""
        if self.limit <= 0:
            return
        if self._batches and self._batches[-1].seq != batch.seq - 1:
            self.clear()  # never: batches come in order; a cache must not have holes
        size = batch.frame_size()
        self._batches.append(batch)
        self._sizes.append(size)
        self._bytes += size
        while len(self._batches) > 1 and (
            self._bytes > self.limit or len(self._batches) > self.count
        ):
            self._batches.popleft()
            self._bytes -= self._sizes.popleft()

    def clear(self) -> None:
        self._batches.clear()
        self._sizes.clear()
        self._bytes = 0

    def read(self, after: int, until: int) -> list[Batch] | None:
        """The batches ``after < seq <= until`` if the tail holds them all."""
        if not self._batches or self._batches[0].seq > after + 1:
            return None
        first = self._batches[0].seq
        if self._batches[-1].seq < until:
            return None
        start = after + 1 - first
        return [self._batches[i] for i in range(start, until - first + 1)]


class SharedReads:
    """Older pages of the log, read from the store once for every stream that
    catches up through them at the same time.

    A thousand agents reconnecting from the start would otherwise each hold a
    copy of each page they read, and a reader that stalls keeps its copy: memory
    would grow with the number of readers. Reads of the same page in flight are
    shared (one store read), and pages read recently are kept, up to ``limit``
    bytes of event frames and ``count`` batches, least recently used out first.
    """

    def __init__(self, limit: int, count: int = 256) -> None:
        self.limit = limit
        self.count = count
        self._batches: OrderedDict[int, Batch] = OrderedDict()
        self._bytes = 0
        self._reading: dict[tuple[int, int], asyncio.Future[list[Batch]]] = {}

    async def read(
        self, after: int, until: int, load: Callable[[int, int], Awaitable[list[Batch]]]
    ) -> list[Batch]:
        """The batches ``after < seq <= until``, from memory or through ``load``."""
        found = [self._batches.get(seq) for seq in range(after + 1, until + 1)]
        if found and all(b is not None for b in found):
            for seq in range(after + 1, until + 1):
                self._batches.move_to_end(seq)
            return found  # type: ignore[return-value]
        key = (after, until)
        reading = self._reading.get(key)
        if reading is None:
            reading = asyncio.ensure_future(load(after, until))
            self._reading[key] = reading
            reading.add_done_callback(lambda _: self._reading.pop(key, None))
            batches = await asyncio.shield(reading)
            self._keep(batches)
            return batches
        return await asyncio.shield(reading)

    def _keep(self, batches: list[Batch]) -> None:
        if self.limit <= 0:
            return
        for batch in batches:
            if batch.seq in self._batches:
                continue
            self._batches[batch.seq] = batch
            self._bytes += len(batch.sse_frame)
        while self._batches and (
            self._bytes > self.limit or len(self._batches) > self.count
        ):
            _, oldest = self._batches.popitem(last=False)
            self._bytes -= len(oldest.sse_frame)

    def clear(self) -> None:
        self._batches.clear()
        self._bytes = 0
