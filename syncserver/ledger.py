"""The social state of one protocol in one MAS: check, finalize, store, publish.

Attempts are checked with ``langshaw.semantics`` (the only place protocol rules
live) against the in-memory state, which already includes every accepted but not
yet committed attempt, so the order of acceptance is the order of arrival (or of
priority, in a batch). Accepted batches go to the store in group commits; an
attempt is acknowledged, and its batch published to subscribers, only once the
transaction holding it has committed.

When several servers share the log (a ``SharedStore``: PostgreSQL), the same
checks and numbering run inside the store's turn, which serializes them across
the servers (``syncserver._shared``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from langshaw import LangshawProtocol, SocialState, Violation
from syncserver._mandates import MandateBook
from syncserver._reading import LogReader
from syncserver._shared import Pending, SharedFinalizer
from syncserver._views import Views
from syncserver._window import answer_parts, split_window
from syncserver.attempt import Attempt, AttemptIds, Receipt, Rejection, same_attempt, same_instances
from syncserver.batch import Batch, Entry
from syncserver.errors import Rejected, ServiceError
from syncserver.feed import SharedReads, Subscriber, Tail
from syncserver.store import SharedStore, Store, StoreError

__all__ = ["Attempt", "Ledger", "Receipt", "Rejection"]

log = logging.getLogger("strabo.syncserver")


class Ledger(LogReader):
    #: After this long without a commit, an attempt is committed at once instead of
    #: waiting for the loop's next turn to be grouped with others (seconds).
    QUIET = 0.0005

    def __init__(
        self,
        mas: str,
        protocol: LangshawProtocol,
        store: Store,
        policy: str = "instant",
        batch_window_ms: float = 20.0,
        subscriber_backlog: int = 10_000,
        fingerprints: bool = True,
    ) -> None:
        self.mas = mas
        self.protocol = protocol
        self.store = store
        self.fingerprints = fingerprints
        self.state = SocialState(protocol, fingerprints=fingerprints)
        self.policy = policy
        self.window = batch_window_ms / 1000.0
        self.subscriber_backlog = subscriber_backlog
        self.next_seq = 1
        self.committed_seq = 0
        self.subscribers: set[Subscriber] = set()
        #: The last batch that a reader's task is to write (queued, not written
        #: during its commit): its attempter's answer waits a loop step for it.
        self.woken = 0
        #: The newest committed batches, shared by every reader catching up; off
        #: (0 bytes) until an HTTP app turns it on, as in-process readers need none.
        self.tail = Tail(0)
        #: Older pages read from the store for streams catching up, shared by them.
        self.pages = SharedReads(0)
        #: Replicas of the enactments read lately, with their values (GET .../enactment).
        self.views = Views(protocol)
        #: The counts of the agents with a mandate (the server names them).
        self.book = MandateBook(protocol)
        # Batches accepted and numbered, waiting for their transaction, in seq order.
        self._pending: list[tuple[Batch, asyncio.Future[Batch]]] = []
        self._flush_scheduled = False
        self._writing: asyncio.Future[None] | None = None
        self.rebuilding: asyncio.Future[None] | None = None
        self._last_flush = 0.0
        self._window: list[tuple[Attempt, asyncio.Future[Receipt]]] = []
        self._window_task: asyncio.Task[None] | None = None
        # (agent, attempt id) -> the receipt and the commit of a batch not yet committed
        self._in_flight: dict[tuple[str, str], tuple[Receipt, asyncio.Future[Batch]]] = {}
        self._uncommitted: dict[int, Batch] = {}  # seq -> batch accepted, not yet committed
        # (agent, attempt id) -> the answer of an attempt in the open window
        self._waiting: dict[tuple[str, str], tuple[Attempt, asyncio.Future[Receipt]]] = {}
        #: The batch of every attempt id finalized (numbered) here: an id is bound
        #: to the instances it was first finalized with.
        self.ids = AttemptIds()
        self._closed = False
        #: The state may hold attempts that were never recorded (its rebuild
        #: failed): attempts get 503 while it is rebuilt again (over a shared log,
        #: with back-off until the log can be read: syncserver._shared).
        self.stale = False
        #: Finalization through the store's turns, when other servers share the log.
        self._shared: SharedFinalizer | None = None
        if isinstance(store, SharedStore):
            self._shared = SharedFinalizer(self, store)

    # Life cycle -------------------------------------------------------------------

    async def load(self) -> None:
        """Rebuild the state from the store and start writing (at start-up)."""
        await self._load_state()
        if self._shared is not None:
            await self._shared.start()

    async def close(self) -> None:
        self._closed = True
        if self._shared is not None:
            await self._shared.close()
        if self._window_task is not None:
            await self._window_task
        while self._writing is not None or self._pending or self.rebuilding is not None:
            if self.rebuilding is not None:
                await asyncio.gather(self.rebuilding, return_exceptions=True)
            elif self._writing is None:
                self._writing = asyncio.ensure_future(self._flush())
            else:
                await self._writing
        self.end_subscriptions()

    def end_subscriptions(self) -> None:
        for subscriber in self.subscribers:
            subscriber.close()

    # Attempts -----------------------------------------------------------------------

    async def attempt(self, attempt: Attempt) -> Receipt:
        if self._closed:
            raise ServiceError(503, "shutting-down", "the server is shutting down")
        while self.rebuilding is not None:
            # A failed rebuild leaves the state stale: a 503, never its error as is (a 500).
            await asyncio.wait([self.rebuilding])
        if self.stale and self._shared is None:  # over a shared log, retried with back-off
            self.begin_rebuild()
            raise ServiceError(503, "store-failed", "the state cannot be read from the log")
        key = attempt.key
        if key is not None and key in self.ids:  # a resend, or the id reused
            resent = await self.ids.receipt(attempt, self.committed_seq, self.read)
            if resent is not None:
                return resent
        if self._shared is not None:
            return await self._shared.attempt(attempt)
        if key is not None and key in self._in_flight:  # a retry, not yet committed
            receipt, committing = self._in_flight[key]
            same_attempt(attempt, receipt)
            await asyncio.shield(committing)  # acknowledged only once committed
            return receipt
        if self.policy == "batched":
            if key is not None and key in self._waiting:  # a retry within the window
                original, answer = self._waiting[key]
                same_instances(attempt, original.instances)
                return await asyncio.shield(answer)
            future: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
            if key is not None:
                self._waiting[key] = (attempt, future)
            self._window.append((attempt, future))
            if self._window_task is None:
                self._window_task = asyncio.create_task(self._close_window())
            # A caller that stops waiting (cancelled) does not withdraw the attempt,
            # as under the instant policy: it is finalized with its window, and a
            # resend of its id gets its answer.
            return await asyncio.shield(future)
        violation = self.accept(attempt)
        if violation is not None:
            replay = await self._replay(attempt)
            if replay is not None:
                return replay
            raise Rejected(await self._explain(violation, attempt))
        finalizing, [receipt] = self._finalize([attempt])
        if finalizing is not None:
            await finalizing
        return receipt

    def accept(self, attempt: Attempt) -> Violation | None:
        """Check ``attempt`` against the state, and its performer's mandate
        against the book, and apply it to both if neither refuses it."""
        book = self.book
        if attempt.performer not in book.watched:
            return self.state.attempt(attempt.instances, attempt.roles)
        if attempt.mandate is not None:
            refused = book.check(attempt.mandate, attempt.performer, attempt.instances, self.state)
            if refused is not None:
                return refused
        fresh = book.fresh(attempt.instances, self.state)
        violation = self.state.attempt(attempt.instances, attempt.roles)
        if violation is None:
            book.add(attempt.performer, attempt.instances, fresh)
        return violation

    async def _replay(self, attempt: Attempt) -> Receipt | None:
        """The receipt of an attempt already finalized under the same attempt id.

        Looked up only when an attempt is rejected: a finalized attempt resent is
        always rejected (its actions already occurred in their scopes), so the
        happy path never pays for the lookup."""
        key = attempt.key
        if key is None:
            return None
        if key in self._in_flight:
            receipt, committing = self._in_flight[key]
            same_attempt(attempt, receipt)
            await asyncio.shield(committing)
            return receipt
        first = attempt.instances[0]
        root = tuple(first.bindings.get(k) for k in self.protocol.root_keys)
        found = await self.store.find_attempt(
            self.mas, self.protocol, key[1], attempt.performer, root
        )
        if found is None:
            return None
        # The whole batch, so that the answer can name the other attempts in it.
        [batch] = await self.store.read(self.mas, self.protocol, found.seq - 1, found.seq)
        positions = tuple(
            i
            for i, e in enumerate(batch.entries)
            if e.attempt_id == key[1] and e.performer == attempt.performer
        )
        receipt = Receipt(batch, positions)
        same_attempt(attempt, receipt)
        return receipt

    def _finalize(
        self,
        attempts: Sequence[Attempt],
        numbered: tuple[Batch, list[Receipt]] | None = None,
    ) -> tuple[asyncio.Future[Batch] | None, list[Receipt]]:
        """Number the accepted attempts as one batch (unless ``numbered``
        already) and hand it to the writer; the future is None if the batch is
        already committed.

        Nothing here awaits: the batch numbered S is queued for its transaction
        before any later batch can be numbered, so batches are committed and
        published in the order of their numbers, whatever the caller awaits next."""
        batch, receipts = self.number(attempts) if numbered is None else numbered
        committing = self._enqueue(batch)
        if committing is not None:
            for a, receipt in zip(attempts, receipts, strict=True):
                if a.key is not None:
                    self._in_flight[a.key] = (receipt, committing)
        return committing, receipts

    def number(self, attempts: Sequence[Attempt]) -> tuple[Batch, list[Receipt]]:
        """One accepted attempt as the next batch, and its receipt (a window's
        attempts: :meth:`number_window`)."""
        [a] = attempts
        entries = [Entry(instance, a.performer, a.attempt_id) for instance in a.instances]
        return self._numbered(entries, [tuple(range(len(entries)))])

    def number_window(self, attempts: Sequence[Attempt]) -> list[tuple[Batch, list[Receipt]]]:
        """A window's accepted attempts as the next batches, in their order, each
        of bounded size (``syncserver._window``), and each attempt's receipt."""
        return [self._numbered(entries, spans) for entries, spans in split_window(attempts)]

    def _numbered(
        self, entries: list[Entry], spans: list[tuple[int, ...]]
    ) -> tuple[Batch, list[Receipt]]:
        batch = Batch(self.protocol.name, self.next_seq, tuple(entries))
        self.next_seq += 1
        self.ids.add(batch)
        self._uncommitted[batch.seq] = batch
        return batch, [Receipt(batch, span) for span in spans]

    async def _close_window(self) -> None:
        """Batched finalization: wait for the window, then finalize what arrived."""
        await asyncio.sleep(self.window)
        while self.rebuilding is not None:
            await asyncio.wait([self.rebuilding])  # its failure is not this task's
        attempts, self._window, self._window_task = self._window, [], None
        self._waiting = {}
        if self.stale:  # a failed rebuild: the window is answered, never left waiting
            self.begin_rebuild()
            error = ServiceError(503, "store-failed", "the state cannot be read from the log")
            for _, future in attempts:
                if not future.done():
                    future.set_exception(error)
            return
        checked = self.check_window(attempts)
        if checked is None:
            return
        accepted, rejected = checked
        if accepted:
            await self._finalize_window(accepted)
        await self.answer_rejected(rejected)

    async def _finalize_window(self, accepted: Pending) -> None:
        """Finalize a window's accepted attempts as consecutive batches, each
        answered once its batch committed. All are numbered and queued before
        any is awaited: a later window is checked, so numbered, after them."""
        attempts = [a for a, _ in accepted]
        queued: list[tuple[asyncio.Future[Batch] | None, list[Receipt]]] = []
        error: ServiceError | None = None
        start = 0
        try:
            for batch, receipts in self.number_window(attempts):
                part, start = attempts[start : start + len(receipts)], start + len(receipts)
                queued.append((self._finalize(part, (batch, receipts))[0], receipts))
        except ServiceError as exc:  # a write failed: the parts after it are not queued
            error = exc
        await answer_parts(queued, [f for _, f in accepted], error)

    def check_window(
        self, attempts: list[tuple[Attempt, asyncio.Future[Receipt]]]
    ) -> tuple[list[tuple[Attempt, asyncio.Future[Receipt]]], list[Rejection]] | None:
        """Check a window's attempts one after the other, in priority order, each
        against the state plus the window's earlier accepted ones (applied to the
        state as they are accepted). None if checking failed (a bug): every
        attempt is then answered with the error and the state rebuilt."""
        accepted: list[tuple[Attempt, asyncio.Future[Receipt]]] = []
        rejected: list[Rejection] = []
        try:
            for attempt, future in self._by_priority(attempts):
                violation = self.accept(attempt)
                if violation is not None:
                    rejected.append((attempt, future, violation))
                else:
                    accepted.append((attempt, future))
        except Exception as exc:  # a bug: answer every attempt rather than none
            log.exception("%s/%s: checking a batched window failed", self.mas, self.protocol.name)
            error = ServiceError(500, "internal", f"internal error: {type(exc).__name__}")
            for _, future in attempts:
                if not future.done():
                    future.set_exception(error)
            self.begin_rebuild()  # the state may hold part of the window
            return None
        return accepted, rejected

    async def answer_rejected(self, rejected: list[Rejection]) -> None:
        """Answer rejected attempts: a resent finalized attempt gets its original
        receipt, any other its violation (explained with the values)."""
        for attempt, future, violation in rejected:
            if future.done():
                continue
            try:
                replay = await self._replay(attempt)
                if replay is not None:
                    future.set_result(replay)
                else:
                    future.set_exception(Rejected(await self._explain(violation, attempt)))
            except ServiceError as exc:
                future.set_exception(exc)
            except Exception as exc:  # the store failed while explaining: say so
                future.set_exception(ServiceError(503, "store-failed", str(exc)))

    def _by_priority(
        self, attempts: list[tuple[Attempt, asyncio.Future[Receipt]]]
    ) -> list[tuple[Attempt, asyncio.Future[Receipt]]]:
        """Arrival order, except that where two attempts bind one attribute in one
        scope, the role earlier in the attribute's sayso chain goes first."""
        claims = [
            {(scope, attr): rank for i in a.instances for scope, attr, rank in self.state.claims(i)}
            for a, _ in attempts
        ]
        order: list[int] = []
        for i in range(len(attempts)):
            position = len(order)
            for j, placed in enumerate(order):
                conflict = claims[i].keys() & claims[placed].keys()
                if any(claims[i][c] < claims[placed][c] for c in conflict):
                    position = j
                    break
            order.insert(position, i)
        return [attempts[i] for i in order]

    # Committing ---------------------------------------------------------------------

    def _enqueue(self, batch: Batch) -> asyncio.Future[Batch] | None:
        """Queue ``batch`` for its transaction; the future is done once it
        committed, and None means it is committed already (raises ServiceError
        if that commit failed).

        A store that writes without waiting (memory; SQLite without fsync) writes
        at once when nothing else is in flight; otherwise the batch waits for the
        loop's next turn, and every batch accepted by then shares its transaction
        (group commit). A store that must wait (fsync) writes on a worker thread,
        in the same groups. Either way batches are written in the order queued.
        """
        loop = asyncio.get_running_loop()
        if self.store.inline or (
            self.store.synchronous_append
            and not self._pending
            and self._writing is None
            and self.rebuilding is None
            and loop.time() - self._last_flush > self.QUIET
        ):
            error = self._write_now([(batch, None)])
            if error is not None:
                raise error
            return None
        future: asyncio.Future[Batch] = loop.create_future()
        self._pending.append((batch, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._start_flush)
        return future

    def _start_flush(self) -> None:
        self._flush_scheduled = False
        if self._writing is not None or self.rebuilding is not None or not self._pending:
            return  # whoever is running takes what is pending when done
        if self.store.synchronous_append:
            pending, self._pending = self._pending, []
            self._write_now(pending)
        else:
            self._writing = asyncio.ensure_future(self._flush())

    def _write_now(
        self, pending: Sequence[tuple[Batch, asyncio.Future[Batch] | None]]
    ) -> ServiceError | None:
        """Write ``pending`` in one transaction, without waiting, and settle it;
        returns the error its attempts get if the write failed."""
        self._last_flush = asyncio.get_running_loop().time()
        try:
            self.store.append_now(self.mas, self.protocol, [b for b, _ in pending])  # type: ignore[attr-defined]
        except Exception as exc:
            error = self._failed(pending, exc)
            self.begin_rebuild()
            return error
        self._settle(pending)
        return None

    def _settle(self, pending: Sequence[tuple[Batch, asyncio.Future[Batch] | None]]) -> None:
        """The batches are committed: publish them and acknowledge their attempts."""
        for batch, future in pending:
            self.committed(batch)
            if future is not None and not future.done():
                future.set_result(batch)

    def begin_rebuild(self) -> None:
        """A commit failed: the state holds attempts that were never recorded.
        Until it is rebuilt from the store, no attempt is checked or written."""
        if self.rebuilding is None:
            self.rebuilding = asyncio.ensure_future(self._rebuild())
            self.rebuilding.add_done_callback(self._rebuilt)

    def _rebuilt(self, future: asyncio.Future[None]) -> None:
        self.rebuilding = None
        self.stale = future.cancelled() or future.exception() is not None
        if self.stale and self._shared is not None:
            self._shared.rebuild_failed(None if future.cancelled() else future.exception())
        elif self.stale and not future.cancelled():
            log.critical(
                "cannot rebuild %s/%s from the store: %s",
                self.mas,
                self.protocol.name,
                future.exception(),
            )
        if self._pending:
            self._start_flush()

    def _failed(
        self, pending: Sequence[tuple[Batch, asyncio.Future[Batch] | None]], exc: Exception
    ) -> ServiceError:
        log.error("commit failed for %s/%s: %s", self.mas, self.protocol.name, exc)
        error = ServiceError(503, "store-failed", f"the attempt was not recorded: {exc}")
        for _, future in pending:
            if future is not None and not future.done():
                future.set_exception(error)
        return error

    async def _flush(self) -> None:
        """Write every pending batch in one transaction, then acknowledge them."""
        try:
            while self._pending:
                pending, self._pending = self._pending, []
                try:
                    await self.store.append(
                        self.mas, self.protocol, [batch for batch, _ in pending]
                    )
                except Exception as exc:
                    self._failed(pending, exc)
                    self.begin_rebuild()
                    return
                self._settle(pending)
        finally:
            self._writing = None

    def follow(self, batch: Batch) -> bool:
        """Apply and publish a batch another server committed (shared log); False
        if it is not the next one (an older one is skipped)."""
        if batch.seq != self.committed_seq + 1 or self._uncommitted:
            return False
        self.book.add_batch(batch.entries, self.state)
        self.state.apply([e.instance for e in batch.entries])
        self.next_seq = batch.seq + 1
        self.ids.add(batch)
        self.committed(batch)
        return True

    def committed(self, batch: Batch) -> None:
        if batch.seq != self.committed_seq + 1:  # never: batches are queued in order
            log.critical(
                "%s/%s: batch %d committed after %d",
                self.mas,
                self.protocol.name,
                batch.seq,
                self.committed_seq,
            )
        self.committed_seq = max(self.committed_seq, batch.seq)
        self._uncommitted.pop(batch.seq, None)
        if self._in_flight:
            for entry in batch.entries:
                if entry.attempt_id is not None:
                    self._in_flight.pop((entry.performer, entry.attempt_id), None)
        if self.tail.limit:
            self.tail.add(batch)
        self.views.committed(batch)
        for subscriber in self.subscribers:
            if subscriber.push(batch):
                self.woken = batch.seq

    async def _rebuild(self) -> None:
        """Fail everything not yet written, and reload the state from the store."""
        pending, self._pending = self._pending, []
        error = ServiceError(503, "store-failed", "an earlier attempt could not be recorded")
        for _, future in pending:
            if not future.done():
                future.set_exception(error)
        self._in_flight.clear()
        self._uncommitted.clear()
        await self._load_state()

    async def _load_state(self) -> None:
        published = self.committed_seq
        state = SocialState(self.protocol, fingerprints=self.fingerprints)
        ids = AttemptIds()
        self.tail.clear()
        self.pages.clear()
        self.views.clear()
        batches = await self.store.load(self.mas, self.protocol)
        self.book.clear()
        for expected, batch in enumerate(batches, 1):
            if batch.seq != expected:
                raise StoreError(
                    f"the log of {self.mas}/{self.protocol.name} has no batch {expected} "
                    f"but has batch {batch.seq}: it is damaged (a strabo before 0.2 could "
                    "write batched windows out of order); serve it from a new --db"
                )
            self.book.add_batch(batch.entries, state)
            state.apply([e.instance for e in batch.entries])
            ids.add(batch)
        self.state = state
        self.ids = ids
        self.committed_seq = len(batches)
        self.next_seq = self.committed_seq + 1
        # A rebuild of a shared log may load batches that other servers committed
        # and this one has not published yet: publish them now.
        for batch in batches[published:] if self.subscribers else ():
            for subscriber in self.subscribers:
                subscriber.push(batch)

    # Reading ------------------------------------------------------------------------

    async def view(self, root: tuple[Any, ...]) -> SocialState:
        """The committed state of one enactment with its values, kept up to
        date between reads (``syncserver._views``)."""
        return await self.views.replica(
            root, lambda: self.store.by_root(self.mas, self.protocol, root)
        )

    async def replica(self, root: tuple[Any, ...]) -> SocialState:
        """One enactment with its values (the ledger keeps digests), from the log
        and the batches accepted but not yet committed."""
        state = SocialState(self.protocol)
        for batch in await self.store.by_root(self.mas, self.protocol, root):
            if batch.seq not in self._uncommitted:
                state.apply([e.instance for e in batch.entries])
        roots = self.protocol.root_keys
        for seq in sorted(self._uncommitted):
            state.apply(
                e.instance
                for e in self._uncommitted[seq].entries
                if tuple(e.instance.bindings[k] for k in roots) == root
            )
        return state

    async def _explain(self, violation: Violation, attempt: Attempt) -> Violation:
        """A digest cannot say what a value was: redo a 'bound' check on the values."""
        if not self.fingerprints or violation.rule != "bound":
            return violation
        instance = attempt.instances[violation.index]
        root = tuple(instance.bindings[k] for k in self.protocol.root_keys)
        try:
            replica = await self.replica(root)
        except Exception:  # the plain message is still right
            return violation
        better = replica.check(attempt.instances, attempt.roles)
        return better if better is not None and better.rule == violation.rule else violation
