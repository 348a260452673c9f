"""Finalization when several SyncServers share one log (a ``SharedStore``).

Each server keeps a replica of the social state, and another server's commit
makes it stale. So a ledger checks and numbers attempts only inside the store's
turn (``SharedStore.turn``): the turn locks the ledger for every server, hands
over the batches this replica missed, which are applied first, and commits the
accepted batches with the next numbers. The checks, the sayso priority and the
numbering are the ledger's own (``Ledger.check_window``, ``Ledger.number``):
what changes here is only when they run, and how the batches reach the log.

Attempts arriving while a turn runs wait for the next one and share it (group
commit). Under the instant policy each attempt is still a batch of its own, in
arrival order; under the batched policy a turn finalizes the window that
collected at this server, as one batch, after the window's time has passed.

Between turns, the server follows what the others commit (the store's
notifications and polls) and publishes it to its own subscribers, so that any
server streams every batch, in order.

A turn that fails after checking its attempts (the database went away) leaves
the replica holding attempts that were never recorded, so it is rebuilt from
the log. If that fails too (the database is still away), the rebuild is tried
again with back-off (``REBUILD``), and at once when the store is heard from
again, until it succeeds; meanwhile every attempt is answered 503 (retryable).
Every attempt a turn takes is answered, whatever happens in the turn: an
attempt id is never left waiting for an answer that cannot come.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol

from langshaw import LangshawProtocol, SocialState
from syncserver.attempt import Attempt, Receipt, Rejection, same_instances
from syncserver.batch import Batch
from syncserver.errors import ServiceError
from syncserver.retry import Backoff
from syncserver.store import SharedStore, StoreError

log = logging.getLogger("strabo.syncserver")

Pending = list[tuple[Attempt, "asyncio.Future[Receipt]"]]


class Ledger(Protocol):
    """What of the ledger (``syncserver.ledger``) finalization over a shared log
    uses: its checks and numbering, and how it applies and publishes batches."""

    mas: str
    protocol: LangshawProtocol
    policy: str
    window: float
    state: SocialState
    committed_seq: int
    stale: bool
    rebuilding: asyncio.Future[None] | None

    def check_window(self, attempts: Pending) -> tuple[Pending, list[Rejection]] | None: ...

    def number(self, attempts: Sequence[Attempt]) -> tuple[Batch, list[Receipt]]: ...

    def follow(self, batch: Batch) -> bool: ...

    def committed(self, batch: Batch) -> None: ...

    async def answer_rejected(self, rejected: list[Rejection]) -> None: ...

    def begin_rebuild(self) -> None: ...


#: Batches read at a time when following other servers' commits.
_PAGE = 500


def _unreadable() -> ServiceError:
    """The answer while the state cannot be trusted: it must be rebuilt from the
    log, which cannot be read now (retryable: the executors resend)."""
    return ServiceError(503, "store-failed", "the state cannot be read from the log: try again")


class SharedFinalizer:
    """The turns of one ledger at a shared log, and the following between them."""

    #: Waits between tries to rebuild the state while the log cannot be read.
    REBUILD = Backoff(0.05, 2.0)

    def __init__(self, ledger: Ledger, store: SharedStore) -> None:
        self.ledger = ledger
        self.store = store
        self._queue: list[tuple[Attempt, asyncio.Future[Receipt]]] = []
        # (agent, attempt id) -> an attempt not answered yet, for resends to share
        self._unanswered: dict[tuple[str, str], tuple[Attempt, asyncio.Future[Receipt]]] = {}
        self._next: asyncio.Task[None] | None = None  # the turn collecting attempts
        self._tasks: set[asyncio.Task[None]] = set()
        # One turn, or one catch-up with other servers' commits, at a time here.
        self._lock = asyncio.Lock()
        self._known = 0  # the newest batch some server is known to have committed
        self._following: asyncio.Task[None] | None = None
        self._repairing: asyncio.Task[None] | None = None  # rebuilding until it succeeds
        self._heard = asyncio.Event()  # the store answered: a repair tries at once
        self._closed = False

    async def start(self) -> None:
        ledger = self.ledger
        await self.store.watch(ledger.mas, ledger.protocol.name, self.heard)
        # What other servers committed between the load and the watch.
        self.heard(await self.store.last_seq(ledger.mas, ledger.protocol.name))

    async def close(self) -> None:
        self._closed = True
        self.store.unwatch(self.ledger.mas, self.ledger.protocol.name)
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for task in (self._following, self._repairing):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    # Attempts -----------------------------------------------------------------------

    async def attempt(self, attempt: Attempt) -> Receipt:
        key = attempt.key
        if key is not None and key in self._unanswered:  # a resend: share the answer
            original, answer = self._unanswered[key]
            same_instances(attempt, original.instances)
            return await asyncio.shield(answer)
        if self.ledger.stale:  # its rebuild failed, and is being tried again
            raise _unreadable()
        future: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        if key is not None:
            self._unanswered[key] = (attempt, future)
            future.add_done_callback(lambda _: self._unanswered.pop(key, None))
        self._queue.append((attempt, future))
        if self._next is None:
            self._next = asyncio.ensure_future(self._turn())
            self._tasks.add(self._next)
            self._next.add_done_callback(self._tasks.discard)
        return await asyncio.shield(future)

    async def _turn(self) -> None:
        ledger = self.ledger
        work: Pending = []
        error = _unreadable()
        try:
            if ledger.policy == "batched":
                await asyncio.sleep(ledger.window)  # the window: attempts collect meanwhile
            async with self._lock:
                work, self._queue, self._next = self._queue, [], None
                if not await self._rebuilt():
                    return  # answered below
                rejected = await self._finalize(work)
            await ledger.answer_rejected(rejected)
        except Exception as exc:  # a bug: answer every attempt rather than none
            log.exception("%s/%s: a turn failed", ledger.mas, ledger.protocol.name)
            error = ServiceError(500, "internal", f"internal error: {type(exc).__name__}")
        finally:
            for _, future in work:  # whatever happened, no attempt is left unanswered
                if not future.done():
                    future.set_exception(error)

    async def _rebuilt(self) -> bool:
        """Wait for a rebuild of the state under way; False if the state still
        cannot be trusted (the rebuild failed: it is tried again, with back-off)."""
        ledger = self.ledger
        while ledger.rebuilding is not None:
            await asyncio.wait([ledger.rebuilding])  # how it ended is told by ledger.stale
        if ledger.stale:
            self.rebuild_failed(None)
            return False
        return True

    # Rebuilding until the log can be read ----------------------------------------

    def rebuild_failed(self, error: BaseException | None) -> None:
        """The state's rebuild failed (the log cannot be read): try again until
        it succeeds (attempts are answered 503 meanwhile)."""
        if self._repairing is None and not self._closed:
            self._repairing = asyncio.ensure_future(self._repair(error))

    async def _repair(self, error: BaseException | None) -> None:
        """Rebuild the state with back-off, and at once when the store is heard
        from again, until it succeeds or the server closes. Logged when it
        starts and when it ends, not at every try."""
        ledger = self.ledger
        name = f"{ledger.mas}/{ledger.protocol.name}"
        log.error(
            "cannot rebuild %s from the log: %s; its attempts get 503 while it is tried again",
            name,
            error or "the last rebuild failed",
        )
        tries = 0
        try:
            while ledger.stale and not self._closed:
                if ledger.rebuilding is None:
                    tries += 1
                    self._heard.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._heard.wait(), self.REBUILD.delay(tries))
                    if self._closed or not ledger.stale:
                        break
                    if ledger.rebuilding is None:
                        ledger.begin_rebuild()
                rebuilding = ledger.rebuilding
                if rebuilding is not None:
                    await asyncio.wait([rebuilding])
                    if not rebuilding.cancelled() and rebuilding.exception() is not None:
                        log.debug("cannot rebuild %s yet: %s", name, rebuilding.exception())
            if not ledger.stale:
                log.warning("%s: the state is rebuilt from the log (%d more tries)", name, tries)
        finally:
            self._repairing = None

    async def _finalize(
        self, work: list[tuple[Attempt, asyncio.Future[Receipt]]]
    ) -> list[Rejection]:
        """One turn: catch up, check, number, commit; settle the accepted attempts
        and return the rejected ones (answered outside the turn: explaining a
        rejection reads the log)."""
        ledger = self.ledger
        batches: list[Batch] = []
        settled: list[tuple[asyncio.Future[Receipt], Receipt]] = []
        rejected: list[Rejection] = []
        try:
            async with self.store.turn(ledger.mas, ledger.protocol, ledger.committed_seq) as turn:
                for batch in turn.missed:
                    if not ledger.follow(batch):
                        raise StoreError(
                            f"batch {batch.seq} does not follow {ledger.committed_seq}"
                        )
                if ledger.policy == "batched":
                    checked = ledger.check_window(work)
                    if checked is None:  # a bug; every attempt was answered with it
                        return []
                    accepted, rejected = checked
                    if accepted:
                        batch, receipts = ledger.number([a for a, _ in accepted])
                        batches.append(batch)
                        settled = [(f, r) for (_, f), r in zip(accepted, receipts, strict=True)]
                elif not self._check_each(work, batches, settled, rejected):
                    return []  # a bug; every attempt was answered with it
                turn.append(batches)
        except Exception as exc:
            # Rolled back, or its outcome is unknown (the connection dropped during
            # the commit): a resend of the same attempt id finds out which.
            log.error("turn failed for %s/%s: %s", ledger.mas, ledger.protocol.name, exc)
            error = ServiceError(503, "store-failed", f"the attempt was not recorded: {exc}")
            for _, future in work:
                if not future.done():
                    future.set_exception(error)
            if batches:
                ledger.begin_rebuild()  # the state holds attempts that were not recorded
            return []
        for batch in batches:
            ledger.committed(batch)
        for future, receipt in settled:
            if not future.done():
                future.set_result(receipt)
        return rejected

    def _check_each(
        self,
        work: list[tuple[Attempt, asyncio.Future[Receipt]]],
        batches: list[Batch],
        settled: list[tuple[asyncio.Future[Receipt], Receipt]],
        rejected: list[Rejection],
    ) -> bool:
        """Instant policy: each attempt in arrival order, a batch of its own.
        False if checking failed (a bug): every attempt is answered with it."""
        ledger = self.ledger
        try:
            for attempt, future in work:
                violation = ledger.state.attempt(attempt.instances, attempt.roles)
                if violation is not None:
                    rejected.append((attempt, future, violation))
                    continue
                batch, [receipt] = ledger.number([attempt])
                batches.append(batch)
                settled.append((future, receipt))
        except Exception as exc:
            log.exception("%s/%s: checking attempts failed", ledger.mas, ledger.protocol.name)
            error = ServiceError(500, "internal", f"internal error: {type(exc).__name__}")
            for _, future in work:
                if not future.done():
                    future.set_exception(error)
            batches.clear()
            ledger.begin_rebuild()  # the state may hold some of them
            return False
        return True

    # Following the others -----------------------------------------------------------

    def heard(self, seq: int) -> None:
        """Some server committed up to ``seq``: follow it, unless already there.
        The store answered, so a rebuild waiting for its next try tries now."""
        self._heard.set()
        self._known = max(self._known, seq)
        behind = self._known > self.ledger.committed_seq
        if behind and self._following is None and not self._closed:
            self._following = asyncio.ensure_future(self.follow())

    async def follow(self) -> None:
        ledger = self.ledger
        try:
            while self._known > ledger.committed_seq and not self._closed:
                async with self._lock:
                    if not await self._rebuilt():
                        break  # the next poll tries again
                    start = ledger.committed_seq
                    if self._known <= start:
                        break
                    until = min(self._known, start + _PAGE)
                    batches = await self.store.read(ledger.mas, ledger.protocol, start, until)
                    if not any([ledger.follow(b) for b in batches]):
                        log.warning(
                            "%s/%s: told of batch %d, the log has nothing after %d",
                            ledger.mas,
                            ledger.protocol.name,
                            self._known,
                            start,
                        )
                        break
        except Exception as exc:  # the database is away: the next poll tries again
            log.warning(
                "%s/%s: cannot follow other servers: %s", ledger.mas, ledger.protocol.name, exc
            )
        finally:
            self._following = None
