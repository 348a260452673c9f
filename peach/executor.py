"""Executors connect adapters to a SyncServer.

An executor sends attempts and feeds every adapter of a protocol the finalized
batches, strictly in sequence order, each exactly once: a batch arriving with
an attempt's answer, from the live stream, or from the log after a reconnection
is applied only if it is the next one, and gaps are filled from the log. A
stream that fails is reconnected from the last applied batch, with back-off;
a log that itself skips a batch stops the feed for good (``LogGapError``). This
module holds that logic; subclasses only say how to send, read and stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from langshaw import ActionInstance, LangshawProtocol
from peach.errors import ExecutorError, LogGapError
from peach.view import View, signature
from syncserver.acts_for import ActsFor
from syncserver.batch import Batch
from syncserver.mandate import Mandate
from syncserver.retry import Backoff

log = logging.getLogger("strabo.peach")

_PAGE = 1000

# The waits (syncserver.retry): before resending an attempt (with its id), and
# before reconnecting a feed's stream.
RESEND = Backoff(0.1, 5.0)
#: How long an attempt whose batch holds others' entries waits for the stream to
#: bring them before it reads them from the log.
REACH_PATIENCE = 2.0
RECONNECT = Backoff(0.05, 5.0)


class Member(Protocol):
    """What an executor needs of the adapters it serves (``PeachAdapter`` is one):
    the seam between the two. An executor calls ``attach_view`` once when the
    adapter joins (the view of the protocol it shares with the other adapters),
    ``go_live`` when the history is applied, and ``batch_applied`` after each
    batch it applies to the view (``live`` False while catching up).

    Stated here, where it is used, so that executors do not depend on the
    adapter class: the adapter depends on the executor, not the other way."""

    name: str
    role: str
    protocol: LangshawProtocol

    def attach_view(self, view: View) -> None: ...

    def go_live(self) -> None: ...

    def batch_applied(
        self,
        batch: Batch,
        completed: list[tuple[Any, ...]],
        touched: list[tuple[Any, ...]],
        live: bool,
    ) -> None: ...


class _Feed:
    """The ordered stream of one protocol's batches, applied to one shared view."""

    def __init__(
        self,
        executor: Executor,
        protocol: LangshawProtocol,
        view: View | None = None,
        applied: int = 0,
    ) -> None:
        self.executor = executor
        self.protocol = protocol
        self.view = view if view is not None else View(protocol)
        self.adapters: list[Member] = []
        self.applied = applied
        self.lock = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.stopped: LogGapError | None = None  # the log has a gap: nothing more follows
        self.advanced = asyncio.Event()  # set (and replaced) when a batch is applied

    async def add(self, adapter: Member) -> None:
        """Attach ``adapter`` to the view (brought up to date without running any
        handler if the feed is new), then let it go live."""
        if signature(adapter.protocol) != signature(self.protocol):
            raise ExecutorError(
                f"{adapter!r} loads a {self.protocol.name} that differs from the one other "
                f"adapters of this executor use ({self.protocol.source})"
            )
        async with self.lock:
            if not self.adapters:
                # A new feed: everything already finalized is history, not news.
                while True:
                    batches = await self.executor._read(adapter, self.applied, _PAGE)
                    if not batches:
                        break
                    if batches[0].seq != self.applied + 1:
                        raise self._gap(batches[0].seq)
                    for batch in batches:
                        self._apply(batch, live=False)
            adapter.attach_view(self.view)
            self.adapters.append(adapter)
            adapter.go_live()
        if self.task is None and self.executor.streams:
            self.task = asyncio.create_task(self._run(), name=f"feed {self.protocol.name}")

    async def remove(self, adapter: Member) -> None:
        if adapter in self.adapters:
            self.adapters.remove(adapter)
        if not self.adapters and self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    async def deliver(self, batch: Batch) -> None:
        """Apply ``batch`` (and any batch missing before it) for every adapter."""
        if self.stopped is not None:
            raise self.stopped
        if batch.seq <= self.applied:
            return
        async with self.lock:
            if batch.seq <= self.applied:
                return
            while batch.seq > self.applied + 1 and self.adapters:
                missing = await self.executor._read(
                    self.adapters[0], self.applied, batch.seq - self.applied - 1
                )
                if not missing or missing[0].seq != self.applied + 1:
                    raise self._gap(batch.seq)
                for earlier in missing:
                    self._apply(earlier)
            self._apply(batch)

    async def reach(self, seq: int) -> None:
        """Wait until batch ``seq`` is applied. The stream brings it (it is
        committed); without a stream, or if the stream has not brought it within
        ``REACH_PATIENCE`` (it lags, or reconnects), the log is read."""
        if self.task is not None:
            deadline = asyncio.get_running_loop().time() + REACH_PATIENCE
            while self.applied < seq and self.stopped is None:
                advanced = self.advanced
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(advanced.wait(), left)
        while self.applied < seq:
            before = self.applied
            await self.refresh()
            if self.applied == before:  # not in the log (yet?): the server said it is
                raise ExecutorError(
                    f"batch {seq} of {self.protocol.name} was finalized but the log "
                    f"ends at batch {before}"
                )

    def _gap(self, seen: int) -> LogGapError:
        """The server's log skips a batch: applying what follows could apply an
        action before one it depends on, so the feed stops instead, for good."""
        self.stopped = LogGapError(
            f"the log of {self.protocol.name} has no batch {self.applied + 1} but has "
            f"batch {seen}: the server's log has a gap; this agent cannot follow it"
        )
        return self.stopped

    async def refresh(self) -> None:
        """Read the log up to its current end and deliver what is new."""
        if self.stopped is not None:
            raise self.stopped
        while self.adapters:
            batches = await self.executor._read(self.adapters[0], self.applied, _PAGE)
            if not batches:
                return
            if batches[0].seq > self.applied + 1:
                raise self._gap(batches[0].seq)
            for batch in batches:
                await self.deliver(batch)

    def _apply(self, batch: Batch, live: bool = True) -> None:
        if batch.seq != self.applied + 1:
            return
        completed, touched = self.view.apply(batch)
        self.applied = batch.seq
        self.advanced.set()  # wakes whoever waits to reach a batch
        self.advanced = asyncio.Event()
        for adapter in list(self.adapters):
            try:
                adapter.batch_applied(batch, completed, touched, live)
            except Exception:  # one adapter's fault must not keep the batch from the rest
                log.exception("%r failed on batch %d of %s; its caches may be stale",
                              adapter, batch.seq, self.protocol.name)

    async def _run(self) -> None:
        """Follow the live stream; on a failure reconnect from the last applied
        batch, but stop on a gap in the log (reconnecting would meet it again)."""
        failures = 0
        while self.adapters:
            try:
                async for batch in self.executor._stream(self.adapters[0], self.applied):
                    self.connected.set()
                    failures = 0
                    await self.deliver(batch)
                self.connected.clear()
            except asyncio.CancelledError:
                raise
            except LogGapError as exc:
                self.connected.clear()
                log.error("event stream of %s stopped: %s", self.protocol.name, exc)
                return
            except Exception as exc:  # any other failure: log it, back off, reconnect
                self.connected.clear()
                log.warning(
                    "event stream of %s interrupted (%s); reconnecting", self.protocol.name, exc
                )
            failures += 1
            # back-off between reconnections, not a race fix
            await asyncio.sleep(RECONNECT.delay(failures))


class Executor:
    """Base class: one MAS on one SyncServer, for any number of adapters."""

    #: Whether batches arrive on a stream the feed must follow (a SyncServer's);
    #: a peer-to-peer executor applies what it accepts itself.
    streams = True

    def __init__(self, mas: str, *, retries: int = 3) -> None:
        self.mas = mas
        self.retries = retries
        self._feeds: dict[str, _Feed] = {}
        self._adapters: list[Member] = []
        self._open = False
        self._join_lock: asyncio.Lock | None = None
        # Attempt ids: unique across clients (random prefix), cheap per attempt.
        self._attempt_prefix = uuid.uuid4().hex[:16] + "-"
        self._attempt_count = itertools.count(1)

    # What subclasses provide --------------------------------------------------------

    async def _connect(self) -> None:
        """Open connections (called before the first adapter joins)."""

    async def _disconnect(self) -> None:
        """Close connections (called after the last adapter leaves)."""

    async def _admit(self, adapter: Member) -> None:
        """Check that ``adapter`` may join (its name and role)."""

    def acts_for(self, adapter: Member) -> ActsFor:
        """The bindings the MAS holds ``adapter``'s agent to (``acts_for`` in its
        configuration); the adapter offers only what they allow."""
        return ActsFor()

    def mandate(self, adapter: Member) -> Mandate | None:
        """The mandate the MAS states for ``adapter``'s agent (``mandate`` in its
        configuration), which the adapter then enforces too; None for none."""
        return None

    def _new_feed(self, protocol: LangshawProtocol) -> _Feed:
        return _Feed(self, protocol)

    async def _send(
        self, adapter: Member, instances: Sequence[ActionInstance], attempt_id: str
    ) -> tuple[Batch | int, list[int]]:
        """Finalize an attempt: the batch holding it (or only its number, when
        the stream brings the other entries), and its instances' positions."""
        raise NotImplementedError

    async def _read(self, adapter: Member, after: int, limit: int) -> list[Batch]:
        raise NotImplementedError

    def _stream(self, adapter: Member, after: int) -> AsyncIterator[Batch]:
        raise NotImplementedError

    # Used by adapters ---------------------------------------------------------------

    async def join(self, adapter: Member) -> None:
        if self._join_lock is None:
            self._join_lock = asyncio.Lock()
        async with self._join_lock:
            if not self._open:
                await self._connect()
                self._open = True
            try:
                await self._admit(adapter)
                feed = self._feeds.get(adapter.protocol.name)
                if feed is None:
                    feed = self._feeds[adapter.protocol.name] = self._new_feed(adapter.protocol)
                await feed.add(adapter)
            except BaseException:
                if not self._adapters:
                    await self._close()
                raise
            self._adapters.append(adapter)

    async def leave(self, adapter: Member) -> None:
        if self._join_lock is None:
            self._join_lock = asyncio.Lock()
        async with self._join_lock:
            if adapter in self._adapters:
                self._adapters.remove(adapter)
            feed = self._feeds.get(adapter.protocol.name)
            if feed is not None:
                await feed.remove(adapter)
                if not feed.adapters:
                    del self._feeds[adapter.protocol.name]
            if not self._adapters:
                await self._close()

    async def _close(self) -> None:
        if self._open:
            self._open = False
            await self._disconnect()

    def _started(self, adapter: Member) -> None:
        if adapter not in self._adapters:
            raise ExecutorError(
                f"{adapter!r} is not started: use 'async with adapter:' or 'await adapter.start()'"
            )

    async def attempt(
        self, adapter: Member, instances: Sequence[ActionInstance]
    ) -> list[ActionInstance]:
        self._started(adapter)
        attempt_id = f"{self._attempt_prefix}{next(self._attempt_count)}"
        for tries in range(self.retries + 1):
            try:
                batch, mine = await self._send(adapter, instances, attempt_id)
                break
            except RecursionError:  # too deep for json to write: nothing was sent
                raise ExecutorError(
                    "the attempt is not valid JSON: a value is nested too deeply",
                    status=400,
                    code="bad-json",
                ) from None
            except ExecutorError as exc:
                if not exc.retryable or tries == self.retries:
                    raise
                log.warning("attempt %s failed (%s); retrying with the same id", attempt_id, exc)
            await asyncio.sleep(RESEND.delay(tries + 1))  # back-off, not a race fix
        feed = self._feeds.get(adapter.protocol.name)
        if isinstance(batch, int):  # finalized with others': the stream brings them
            if feed is not None:
                await feed.reach(batch)
            return list(instances)  # in the batch at the positions ``mine``
        if feed is not None:
            await feed.deliver(batch)
        return [batch.entries[i].instance for i in mine]

    async def sync(self, adapter: Member) -> None:
        feed = self._feeds.get(adapter.protocol.name)
        if feed is None or adapter not in feed.adapters:
            raise ExecutorError(f"{adapter!r} is not started")
        await feed.refresh()

    async def connected(self, protocol: str) -> None:
        """Wait until the live stream of ``protocol`` is connected (for tests)."""
        await self._feeds[protocol].connected.wait()
