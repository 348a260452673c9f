"""How a batched window's accepted attempts are cut into batches.

A batch is one event on every agent's stream, one unit of the log and of its
pages, and one answer an executor must read whole. A window holds whatever
arrived within it (up to ``max_body`` per request from every connection), so
finalized as one batch it could reach gigabytes: every stream would lag past
its backlog at once, and no agent could read it back. A window's attempts are
therefore finalized as consecutive batches, in their checked (priority) order,
each holding whole attempts and at most :data:`WINDOW_BATCH_BYTES` of event
frame, unless one attempt alone is larger (it is a batch of its own).

Used by both paths that finalize windows: the ledger's own
(``Ledger.number_window``) and the turns over a shared log
(``syncserver._shared``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from syncserver.attempt import Attempt, Receipt
from syncserver.batch import Batch, Entry
from syncserver.errors import ServiceError
from syncserver.limits import MiB

#: The bytes of event frame (:meth:`Entry.frame_size`: the bindings' JSON and
#: the names around it) a window's batch stays within, unless one attempt
#: alone is larger (then a batch of its own). Half of a
#: stream's default backlog (``Limits.stream_backlog_bytes``, 8 MiB), so that a
#: stream one batch behind can still take the next; a quarter of the log's
#: cache (``Limits.log_cache_bytes``, 16 MiB); and far below what an executor
#: reads in one answer (1 GiB). A constant rather than derived from the app's
#: limits: the ledger is made by the server, before (and without) an HTTP app.
WINDOW_BATCH_BYTES = 4 * MiB

#: A window's part: the entries of one batch, and each attempt's positions in it.
Part = tuple[list[Entry], list[tuple[int, ...]]]


def split_window(attempts: Sequence[Attempt], bound: float | None = None) -> list[Part]:
    """The entries of ``attempts``, in their order, as consecutive batches of
    whole attempts: an attempt that would take a batch past ``bound`` bytes
    (:data:`WINDOW_BATCH_BYTES` if None, read at each call) starts the next.

    Each entry is measured by its bindings' JSON, which the entry keeps for
    the log's row and the event frame: nothing is encoded twice."""
    limit = WINDOW_BATCH_BYTES if bound is None else bound
    parts: list[Part] = []
    entries: list[Entry] = []
    spans: list[tuple[int, ...]] = []
    size = 0
    for a in attempts:
        mine = [Entry(i, a.performer, a.attempt_id) for i in a.instances]
        more = sum(e.frame_size() for e in mine)
        if spans and size + more > limit:
            parts.append((entries, spans))
            entries, spans, size = [], [], 0
        spans.append(tuple(range(len(entries), len(entries) + len(mine))))
        entries.extend(mine)
        size += more
    if spans:
        parts.append((entries, spans))
    return parts


async def answer_parts(
    queued: Sequence[tuple[asyncio.Future[Batch] | None, list[Receipt]]],
    answers: Sequence[asyncio.Future[Receipt]],
    error: ServiceError | None,
) -> None:
    """Answer a window's attempts (``answers``, in order) part by part: each
    with its receipt once its part's commit (None: done) succeeded, or with
    the commit's error; those in parts never queued (after one whose write
    failed at once) with ``error``. Every commit is awaited, failed or not."""
    futures = iter(answers)
    for committing, receipts in queued:
        try:
            if committing is not None:
                await committing
            outcome: ServiceError | None = None
        except ServiceError as exc:
            outcome = exc
        for receipt, future in zip(receipts, futures, strict=False):
            if future.done():
                continue
            if outcome is None:
                future.set_result(receipt)
            else:
                future.set_exception(outcome)
    for future in futures:
        if not future.done() and error is not None:
            future.set_exception(error)
