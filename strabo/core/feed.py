"""Feeding committed batches to readers: live subscribers and the log's tail.

A reader is either live (it receives each batch as it is committed, through a
:class:`Subscriber` with a bounded backlog) or catching up (it reads the log).
Catch-up reads of recent batches are served from the :class:`Tail`, one shared
copy for every reader, so a thousand agents reconnecting at once hold the
batches once, not a thousand times.
"""

from __future__ import annotations

import asyncio
from collections import deque

from strabo.core.batch import Batch


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
    reader gets :class:`Lagging`, to resume from the log."""

    def __init__(self, limit: int, limit_bytes: int | None = None) -> None:
        self._queue: deque[Batch] = deque()
        self._ready = asyncio.Event()
        self._limit = limit
        self._limit_bytes = limit_bytes
        self._bytes = 0
        self.lagging = False

    def push(self, batch: Batch) -> None:
        if self.lagging:
            return
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
        self._ready.set()

    def close(self) -> None:
        self.lagging = True
        self._queue.clear()
        self._bytes = 0
        self._ready.set()

    async def get(self) -> Batch:
        while not self._queue:
            if self.lagging:
                raise Lagging(-1)
            self._ready.clear()
            await self._ready.wait()
        batch = self._queue.popleft()
        if self._limit_bytes is not None:
            self._bytes -= len(batch.sse_frame)
        return batch



class Tail:
    """The newest committed batches, up to ``limit`` bytes of their event frames
    and at most ``count`` batches (a batch in memory costs several times its
    frame, so both bounds matter: few large batches, or many small ones)."""

    def __init__(self, limit: int, count: int = 256) -> None:
        self.limit = limit
        self.count = count
        self._batches: deque[Batch] = deque()
        self._bytes = 0

    def add(self, batch: Batch) -> None:
        if self.limit <= 0:
            return
        if self._batches and self._batches[-1].seq != batch.seq - 1:
            self.clear()  # never: batches come in order; a cache must not have holes
        size = len(batch.sse_frame)
        self._batches.append(batch)
        self._bytes += size
        while len(self._batches) > 1 and (
            self._bytes > self.limit or len(self._batches) > self.count
        ):
            self._bytes -= len(self._batches.popleft().sse_frame)

    def clear(self) -> None:
        self._batches.clear()
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
