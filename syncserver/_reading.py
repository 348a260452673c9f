"""Reading a ledger's log: pages of committed batches, and live subscriptions.

Split from :mod:`syncserver.ledger`, which checks, finalizes and commits: this
side only reads what was committed, from the newest batches kept in memory, the
pages streams share, or the store, and follows new commits as they come.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, overload

from langshaw import LangshawProtocol
from syncserver.batch import Batch
from syncserver.feed import Lagging, SharedReads, Subscriber, Tail

if TYPE_CHECKING:
    from syncserver._shared import SharedFinalizer
    from syncserver.store import Store


class LogReader:
    """The reading side of a :class:`~syncserver.ledger.Ledger` (its base)."""

    mas: str
    protocol: LangshawProtocol
    store: Store
    committed_seq: int
    subscriber_backlog: int
    subscribers: set[Subscriber]
    tail: Tail
    pages: SharedReads
    _shared: SharedFinalizer | None  # when several servers share the log

    async def read(self, after: int, limit: int) -> list[Batch]:
        """Committed batches after ``after``, at most ``limit`` of them."""
        if self._shared is not None and after + limit > self.committed_seq:
            # Other servers may have committed more than this one has followed
            # yet: a shared log holds only committed batches, so read it.
            return await self.store.read(self.mas, self.protocol, after, after + limit)
        until = min(self.committed_seq, after + limit)
        if until <= after:
            return []
        cached = self.tail.read(after, until)
        if cached is not None:
            return cached
        return await self.store.read(self.mas, self.protocol, after, until)

    async def _shared_read(self, after: int, limit: int) -> list[Batch]:
        """As :meth:`read`, with pages from the store shared by every stream reading
        them (the same pages: streams catching up from one place read the same)."""
        until = min(self.committed_seq, after + limit)
        if until <= after:
            return []
        cached = self.tail.read(after, until)
        if cached is not None:
            return cached
        return await self.pages.read(
            after, until, lambda a, u: self.store.read(self.mas, self.protocol, a, u)
        )

    @overload
    def subscribe(
        self,
        after: int,
        page: int = ...,
        max_bytes: int | None = ...,
        heartbeat: None = ...,
        sink: Callable[[Batch], bool] | None = ...,
    ) -> AsyncGenerator[Batch, None]: ...

    @overload
    def subscribe(
        self,
        after: int,
        page: int = ...,
        max_bytes: int | None = ...,
        *,
        heartbeat: float,
        sink: Callable[[Batch], bool] | None = ...,
    ) -> AsyncGenerator[Batch | None, None]: ...

    async def subscribe(
        self,
        after: int,
        page: int = 500,
        max_bytes: int | None = None,
        heartbeat: float | None = None,
        sink: Callable[[Batch], bool] | None = None,
    ) -> AsyncGenerator[Batch | None, None]:
        """Every committed batch after ``after``: first from the log, then live,
        in order, each once. Raises :class:`Lagging` (naming the last batch given)
        if the reader falls more than the backlog behind. With ``heartbeat``,
        ``None`` comes whenever that many seconds pass with no batch (an event
        stream sends a keep-alive then); without, only batches come.

        The live feed is registered before the log is read, so nothing committed
        in between is missed; duplicates are skipped by sequence number.

        Once caught up, batches committed while the reader waits go to ``sink``
        if it is given and takes them (see :class:`Subscriber`), and are not
        yielded.
        """
        subscriber = Subscriber(self.subscriber_backlog, max_bytes)
        self.subscribers.add(subscriber)
        last = after
        # Pages start small, so that a reader that stalls holds little, and grow
        # while the batches are small. Streams (``max_bytes``) share their pages.
        size = 8
        try:
            while last < self.committed_seq:
                batches = await (
                    self.read(last, size) if max_bytes is None else self._shared_read(last, size)
                )
                if not batches:
                    break
                if len(batches) == size and (
                    max_bytes is None or sum(len(b.sse_frame) for b in batches) < 65536
                ):
                    size = min(size * 2, page)
                for batch in batches:
                    yield batch
                    last = batch.seq
                del batches
            subscriber.delivered = last
            subscriber.sink = sink
            while True:
                try:
                    live = await subscriber.get(heartbeat)
                except Lagging:
                    raise Lagging(max(last, subscriber.delivered)) from None
                last = max(last, subscriber.delivered)
                if live is None:
                    yield None
                    continue
                batch = live
                if batch.seq <= last:
                    continue
                if batch.seq != last + 1:  # cannot happen, but never skip a batch
                    for missed in await self.read(last, batch.seq - last - 1):
                        yield missed
                        last = missed.seq
                yield batch
                last = batch.seq
        finally:
            self.subscribers.discard(subscriber)
            subscriber.close()
