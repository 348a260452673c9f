"""Finalization when several SyncServers share one log (a ``SharedStore``).

Each server keeps a replica of the social state, and another server's commit
makes it stale. The store serializes the appends of a ledger across servers
and hands each the batches its replica missed; the checks, the sayso priority
and the numbering are the ledger's own (``Ledger.check_window``,
``Ledger.number``): what changes here is only when they run, and how the
batches reach the log.

While one server holds the ledger every other waits, so a turn does as little
as it can there. The state is kept per root enactment and no rule relates two:
an attempt's check reads its own enactments and nothing else. Checking against
the replica without missed batches that touch none of the attempts'
enactments thus gives the answers checking after them would; they are applied
after the commit, before this server's own batches. So under the instant
policy a turn checks its attempts first, against the replica as it is, and
appends them in one statement that holds the ledger only while it runs
(:meth:`SharedFinalizer._append`): the store writes them unless a missed batch
touches one of their enactments (a clash); then the checks are undone, the
replica catches up, and the turn tries again, at the third try holding the
ledger while it checks (:meth:`SharedFinalizer._hold`, as every turn of the
batched policy does, applying first only the missed batches that bear on its
attempts). Each attempt is a batch of its own, in arrival order; those that
arrive while a turn runs share the next (group commit), which waits a little
(``CONTENDED``) when other servers append to the ledger too. Under the batched
policy a turn finalizes the window that collected at this server, as
consecutive batches of bounded size (``syncserver._window``).

Between turns, the server follows what the others commit (the store's
notifications and polls) and publishes it to its own subscribers, so that any
server streams every batch, in order. A notification carries the batches of
its commit when they fit: they are applied as they come, without reading the
log, unless a turn or a catch-up holds the replica (it may hold checks not
yet written). The log is read only for what was not applied so, and not while
a turn is coming: the turn's statement brings what the replica missed, and a
separate read would cost a query and hold the turn up.

A turn that fails after checking its attempts (the database went away) leaves
the replica holding attempts that were perhaps never recorded, so it is
rebuilt from the log. If that fails too (the database is still away), the
rebuild is tried again with back-off (``REBUILD``), and at once when the store
is heard from again, until it succeeds; meanwhile every attempt is answered
503 (retryable). Every attempt a turn takes is answered, whatever happens in
the turn: an attempt id is never left waiting for an answer that cannot come.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from langshaw import LangshawProtocol, SocialState, Violation
from syncserver._mandates import MandateBook
from syncserver._rebuilding import Rebuilding
from syncserver.attempt import Attempt, AttemptIds, Receipt, Rejection, same_instances
from syncserver.batch import Batch
from syncserver.errors import ServiceError
from syncserver.store import Carried, SharedStore, StoreError, Turn, root_text

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
    next_seq: int
    ids: AttemptIds
    stale: bool
    rebuilding: asyncio.Future[None] | None
    book: MandateBook

    def accept(self, attempt: Attempt) -> Violation | None: ...

    async def read(self, after: int, limit: int) -> list[Batch]: ...

    def check_window(self, attempts: Pending) -> tuple[Pending, list[Rejection]] | None: ...

    def number(self, attempts: Sequence[Attempt]) -> tuple[Batch, list[Receipt]]: ...

    def number_window(self, attempts: Sequence[Attempt]) -> list[tuple[Batch, list[Receipt]]]: ...

    def follow(self, batch: Batch) -> bool: ...

    def committed(self, batch: Batch) -> None: ...

    async def answer_rejected(self, rejected: list[Rejection]) -> None: ...

    def begin_rebuild(self) -> None: ...


#: Batches read at a time when following other servers' commits.
_PAGE = 500


def _not_recorded(exc: Exception) -> ServiceError:
    return ServiceError(503, "store-failed", f"the attempt was not recorded: {exc}")


def _internal(exc: Exception) -> ServiceError:
    return ServiceError(500, "internal", f"internal error: {type(exc).__name__}")


def _unreadable() -> ServiceError:
    """The answer while the state cannot be trusted: it must be rebuilt from the
    log, which cannot be read now (retryable: the executors resend)."""
    return ServiceError(503, "store-failed", "the state cannot be read from the log: try again")


class SharedFinalizer(Rebuilding):
    """The turns of one ledger at a shared log, and the following between them."""

    #: How long a turn waits before it takes its attempts when other servers
    #: append to the ledger too and attempts come here together (seconds): the
    #: ledger is then likely held by another server for about as long, and the
    #: attempts arriving meanwhile share one append. An append costs PostgreSQL
    #: a statement and a flush (about 0.4 ms of its CPU) and the server a round
    #: trip: with three servers on two CPUs (bench/syncserver.py --db), 0.5 ms
    #: against none: 18% less of the servers' CPU per action, 30% less of
    #: PostgreSQL's, 20% more throughput; 1 ms against 0.5: 3 servers gave
    #: 0.92x to 1.02x one server's throughput instead of 0.82x to 0.88x. As
    #: PostgreSQL's commit_delay with commit_siblings: alone on the ledger, or
    #: with one attempt at a time (a sequential agent), a turn starts at once.
    CONTENDED = 0.001

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
        self._due = 0  # turns waiting for the ledger or holding it (past their window)
        self._contended = False  # the last append met other servers' batches, in a group
        self._following: asyncio.Task[None] | None = None
        self._repairing: asyncio.Task[None] | None = None  # rebuilding until it succeeds
        self._heard = asyncio.Event()  # the store answered: a repair tries at once
        self._closed = False
        # Attempt ids found to be another id's hash (finalized after all, in a turn).
        self._unknown: set[tuple[str, str]] = set()

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

    def _take(self) -> Pending:
        """The attempts queued for the next turn, which this one becomes: an
        attempt arriving from now on starts another."""
        work, self._queue, self._next = self._queue, [], None
        return work

    def _take_own(self) -> Pending:
        """The attempts queued for the running task's turn, if it has not taken
        them (it failed before it held the ledger): to be answered."""
        return self._take() if self._next is asyncio.current_task() else []

    async def _turn(self) -> None:
        ledger = self.ledger
        work: Pending = []
        error = _unreadable()
        try:
            if ledger.policy == "batched":
                await asyncio.sleep(ledger.window)  # the window: attempts collect meanwhile
            self._due += 1
            try:
                async with self._lock:
                    if self._contended and self._appends():
                        await asyncio.sleep(self.CONTENDED)  # a group commit, not a race fix
                    if ledger.policy == "batched" or self._appends():
                        work = self._take()
                    if not await self._rebuilt():
                        return  # answered below
                    rejected = await self._finalize(work)
            finally:
                self._due -= 1
                self._catch_up()
            await ledger.answer_rejected(rejected)
        except Exception as exc:  # a bug: answer every attempt rather than none
            log.exception("%s/%s: a turn failed", ledger.mas, ledger.protocol.name)
            error = _internal(exc)
        finally:
            work += self._take_own()
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

    def _appends(self) -> bool:
        """Whether turns check before they take the ledger (:meth:`_append`):
        under the instant policy, with a store that can (PostgreSQL)."""
        return self.ledger.policy != "batched" and hasattr(self.store, "append_apart")

    async def _finalize(self, work: Pending) -> list[Rejection]:
        """One turn: settle the accepted attempts and return the rejected ones
        (answered outside the turn: explaining a rejection reads the log)."""
        if self._appends():
            if not work:
                return []
            for _ in range(2):  # a clash is rare: a third would be rarer still
                rejected = await self._append(work)
                if rejected is not None:
                    return rejected
        return await self._hold(work, collect=not work)

    async def _append(self, work: Pending) -> list[Rejection] | None:
        """Check the attempts against the replica as it is, then write them in
        one statement that takes the ledger only for itself (the store's
        ``append_apart``): nothing of the turn waits on this server while the
        ledger is held. The check stands if no batch the replica lacks touches
        one of the attempts' enactments; the store refuses the write otherwise
        (a clash): then the check is undone, the replica catches up, and None
        says to try again."""
        ledger = self.ledger
        self._divert_known(work)
        state, keys = ledger.state, ledger.protocol.root_keys
        journal: list[Any] = []  # what the accepted attempts changed, to undo it
        counted: list[Any] = []  # and what they added to the mandates' counts
        accepted: Pending = []
        rejected: list[Rejection] = []
        rows: list[tuple[int, int, str, str, str, str, str | None]] = []
        roots: set[str] = set()
        try:
            for attempt, future in work:
                located = []
                for instance in attempt.instances:
                    # A root key left unbound is refused whatever the state: [null].
                    root = root_text(tuple(instance.bindings.get(k) for k in keys))
                    roots.add(root)
                    located.append((instance, root))
                violation = state.check(attempt.instances, attempt.roles)
                if violation is None and attempt.mandate is not None:
                    violation = ledger.book.check(
                        attempt.mandate, attempt.performer, attempt.instances, state
                    )
                if violation is not None:
                    rejected.append((attempt, future, violation))
                    continue
                # Counted before the commit, and taken back with the state's
                # changes when the check is undone; a turn whose outcome is
                # unknown leaves the count high until the state is rebuilt
                # (refusing more, never less).
                ledger.book.add(
                    attempt.performer,
                    attempt.instances,
                    ledger.book.fresh(attempt.instances, state),
                    counted,
                )
                state.apply(attempt.instances, journal)
                accepted.append((attempt, future))
                rel, performer, key = len(accepted), attempt.performer, attempt.attempt_id
                for idx, (instance, root) in enumerate(located):
                    text = json.dumps(instance.bindings, separators=(",", ":"))
                    rows.append((rel, idx, root, instance.action.name, performer, text, key))
        except Exception as exc:  # a bug: answer every attempt rather than none
            state.undo(journal)
            ledger.book.undo(counted)
            log.exception("%s/%s: checking attempts failed", ledger.mas, ledger.protocol.name)
            self._answer(work, _internal(exc))
            return []
        try:
            done = await self.store.append_apart(  # type: ignore[attr-defined]
                ledger.mas, ledger.protocol, ledger.committed_seq, rows, roots
            )
        except Exception as exc:
            # Not written, or its outcome is unknown (the connection dropped): a
            # resend of the same attempt id finds out which.
            log.error("turn failed for %s/%s: %s", ledger.mas, ledger.protocol.name, exc)
            self._answer(work, _not_recorded(exc))
            if rows:
                ledger.begin_rebuild()  # the state holds attempts perhaps not recorded
            else:
                state.undo(journal)
                ledger.book.undo(counted)
            return []
        if done.clash:
            state.undo(journal)
            ledger.book.undo(counted)
            if not self._apply_missed(done):
                self._answer(work, _unreadable())
                return []
            return None
        self._contended = len(work) > 1 and bool(done.missed_roots)
        published = self._apply_missed(done)  # they come before this turn's batches
        ledger.next_seq = done.last_seq + 1
        texts = iter(row[5] for row in rows)
        for attempt, future in accepted:
            batch, [receipt] = ledger.number([attempt])
            for entry in batch.entries:
                entry._json = next(texts)  # encoded once, for the row and the event frame
            if published:
                ledger.committed(batch)
            if not future.done():
                future.set_result(receipt)
        return rejected

    @staticmethod
    def _answer(work: Pending, error: ServiceError) -> None:
        for _, future in work:
            if not future.done():
                future.set_exception(error)

    async def _hold(self, work: Pending, collect: bool) -> list[Rejection]:
        """A turn that holds the ledger while it checks: catch up, check, number,
        commit. Under the instant policy (``collect``) ``work`` is empty and
        filled with the queue once the ledger is held."""
        ledger = self.ledger
        batches: list[Batch] = []
        settled: list[tuple[asyncio.Future[Receipt], Receipt]] = []
        rejected: list[Rejection] = []
        later: Turn | None = None  # whose missed batches are applied after the commit
        try:
            async with self.store.turn(ledger.mas, ledger.protocol, ledger.committed_seq) as turn:
                if collect:
                    work += self._take()
                if self._apart(turn, work):
                    later = turn
                    ledger.next_seq = turn.last_seq + 1
                else:
                    for batch in turn.missed:
                        if not ledger.follow(batch):
                            raise StoreError(
                                f"batch {batch.seq} does not follow {ledger.committed_seq}"
                            )
                self._divert_known(work)
                if ledger.policy == "batched":
                    checked = ledger.check_window(work)
                    if checked is None:  # a bug; every attempt was answered with it
                        return []
                    accepted, rejected = checked
                    if accepted:  # consecutive batches of bounded size (syncserver._window)
                        parts = ledger.number_window([a for a, _ in accepted])
                        batches += [batch for batch, _ in parts]
                        receipts = [receipt for _, part in parts for receipt in part]
                        settled = [(f, r) for (_, f), r in zip(accepted, receipts, strict=True)]
                elif not self._check_each(work, batches, settled, rejected):
                    return []  # a bug; every attempt was answered with it
                turn.append(batches)
        except Exception as exc:
            # Rolled back, or its outcome is unknown (the connection dropped during
            # the commit): a resend of the same attempt id finds out which.
            log.error("turn failed for %s/%s: %s", ledger.mas, ledger.protocol.name, exc)
            error = _not_recorded(exc)
            work += self._take_own()
            for _, future in work:
                if not future.done():
                    future.set_exception(error)
            if batches:
                ledger.begin_rebuild()  # the state holds attempts that were not recorded
            elif later is not None:
                ledger.next_seq = ledger.committed_seq + 1  # its missed ones: read again
            return []
        if later is None or self._apply_missed(later):
            for batch in batches:
                ledger.committed(batch)
        for future, receipt in settled:  # committed: acknowledged, whatever followed
            if not future.done():
                future.set_result(receipt)
        return rejected

    def _apart(self, turn: Turn, work: Pending) -> bool:
        """Whether the batches the turn missed touch none of the enactments of
        its attempts (then checked without them). Only a store that says which
        enactments they touch (``missed_roots``) allows it."""
        roots = getattr(turn, "missed_roots", None)
        if roots is None:
            return False
        if not roots:
            return True
        ids: frozenset[tuple[str, str]] = getattr(turn, "missed_ids", frozenset())
        if any(attempt.key in ids for attempt, _ in work):
            return False  # followed first: the turn then finds the id taken
        keys = self.ledger.protocol.root_keys
        for attempt, _ in work:
            for instance in attempt.instances:
                # A root key left unbound is refused whatever the state: [null].
                if root_text(tuple(instance.bindings.get(k) for k in keys)) in roots:
                    return False
        return True

    def _apply_missed(self, turn: Turn) -> bool:
        """After the commit of a turn checked without its missed batches: apply
        them and publish them, before its own batches (which follow them in the
        log). False if they cannot be (the log is damaged): the state is then
        rebuilt from the log, which publishes what was not."""
        ledger = self.ledger
        try:
            for batch in turn.missed:
                if batch.seq != ledger.committed_seq + 1:
                    raise StoreError(f"batch {batch.seq} does not follow {ledger.committed_seq}")
                ledger.book.add_batch(batch.entries, ledger.state)
                ledger.state.apply([e.instance for e in batch.entries])
                ledger.ids.add(batch)
                ledger.committed(batch)
        except Exception as exc:
            log.error(
                "%s/%s: cannot apply other servers' batches: %s",
                ledger.mas,
                ledger.protocol.name,
                exc,
            )
            ledger.begin_rebuild()
            return False
        return True

    def _divert_known(self, work: Pending) -> None:
        """Take out of ``work`` the attempts under an id this server now knows
        another server finalized (it followed that batch since the attempt
        came): a resend or a reused id, answered from the log outside the turn,
        never finalized a second time."""
        ids = self.ledger.ids
        kept = []
        for attempt, future in work:
            key = attempt.key
            if key is None or key not in ids or key in self._unknown:
                kept.append((attempt, future))
            else:  # out of ``work`` for good: answered by the task alone
                task = asyncio.ensure_future(self._settle_known(attempt, future))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        work[:] = kept

    async def _settle_known(self, attempt: Attempt, future: asyncio.Future[Receipt]) -> None:
        ledger, key = self.ledger, attempt.key
        assert key is not None
        try:
            receipt = await ledger.ids.receipt(attempt, ledger.committed_seq, ledger.read)
        except ServiceError as exc:  # IdReused: the id names other instances
            receipt = None
            if not future.done():
                future.set_exception(exc)
        except Exception as exc:
            log.exception("%s/%s: reading an attempt id failed", ledger.mas, ledger.protocol.name)
            receipt = None
            if not future.done():
                future.set_exception(_internal(exc))
        if future.done():
            return
        if receipt is not None:
            future.set_result(receipt)
            return
        self._unknown.add(key)  # another id's hash: finalized after all, in a turn
        future.add_done_callback(lambda _: self._unknown.discard(key))
        self._queue.append((attempt, future))
        if self._next is None:
            self._next = asyncio.ensure_future(self._turn())
            self._tasks.add(self._next)
            self._next.add_done_callback(self._tasks.discard)

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
                violation = ledger.accept(attempt)
                if violation is not None:
                    rejected.append((attempt, future, violation))
                    continue
                batch, [receipt] = ledger.number([attempt])
                batches.append(batch)
                settled.append((future, receipt))
        except Exception as exc:
            log.exception("%s/%s: checking attempts failed", ledger.mas, ledger.protocol.name)
            error = _internal(exc)
            for _, future in work:
                if not future.done():
                    future.set_exception(error)
            batches.clear()
            ledger.begin_rebuild()  # the state may hold some of them
            return False
        return True

    # Following the others -----------------------------------------------------------

    def heard(self, seq: int, carried: Carried | None = None) -> None:
        """Some server committed up to ``seq``: apply the batches ``carried``
        (module docstring), or read them, unless already there or a turn is
        due. The store answered, so a rebuild waiting for its next try tries now."""
        self._heard.set()
        self._known = max(self._known, seq)
        ledger = self.ledger
        if (carried is not None and carried.first == ledger.committed_seq + 1
                and not (self._lock.locked() or self._closed or ledger.rebuilding or ledger.stale)):
            try:
                for batch in carried.batches(ledger.protocol):
                    if not ledger.follow(batch):
                        break
            except Exception:  # a bug: the log is read instead
                log.exception("%s: cannot apply a commit heard of", ledger.mas)
        self._catch_up()

    def _turn_coming(self) -> bool:
        """A turn will read what was missed: one is due, or (instant policy)
        attempts wait for one about to start (a batched window may be long)."""
        return bool(self._due) or (self._next is not None and self.ledger.policy != "batched")

    def _catch_up(self) -> None:
        behind = self._known > self.ledger.committed_seq
        if behind and not self._turn_coming() and self._following is None and not self._closed:
            self._following = asyncio.ensure_future(self.follow())

    async def follow(self) -> None:
        """Read and apply what other servers committed. The read is not under
        the lock, so that a turn starting meanwhile does not wait for it; what
        it read is applied only if no turn caught up in between."""
        ledger = self.ledger
        try:
            while self._known > ledger.committed_seq and not self._closed:
                async with self._lock:
                    if self._turn_coming():
                        break  # the turn reads it; then this follows what it did not
                    if not await self._rebuilt():
                        break  # the next poll tries again
                    start = ledger.committed_seq
                    if self._known <= start:
                        break
                until = min(self._known, start + _PAGE)
                batches = await self.store.read(ledger.mas, ledger.protocol, start, until)
                async with self._lock:
                    if ledger.committed_seq != start or ledger.rebuilding is not None:
                        continue  # a turn or a rebuild caught up meanwhile
                    if not any([ledger.follow(b) for b in batches]):
                        name, known = ledger.protocol.name, self._known
                        log.warning("%s/%s: told of batch %d, the log has nothing after %d",
                                    ledger.mas, name, known, start)
                        if not batches:  # told of a commit the log does not have: forget it
                            self._known = start
                        break
        except Exception as exc:  # the database is away: the next poll tries again
            log.warning(
                "%s/%s: cannot follow other servers: %s", ledger.mas, ledger.protocol.name, exc
            )
        finally:
            self._following = None
