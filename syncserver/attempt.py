"""An attempt on its way through finalization, the receipt it gets, and the
attempt ids a ledger has finalized.

Shared by the ledger and the finalization over a shared log
(``syncserver._shared``), which both check that a resent attempt id carries
the same instances as the first attempt under that id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from langshaw import ActionInstance, Violation, json_equal
from syncserver.batch import Batch
from syncserver.errors import IdReused

if TYPE_CHECKING:
    from syncserver.mandate import Mandate


@dataclass(slots=True)
class Attempt:
    """An authorized attempt waiting to be finalized."""

    instances: Sequence[ActionInstance]
    performer: str
    roles: frozenset[str]
    attempt_id: str | None = None
    #: The performer's mandate (syncserver.mandate), whose counts the ledger checks.
    mandate: Mandate | None = None

    @property
    def key(self) -> tuple[str, str] | None:
        """Attempt ids are each agent's own: two agents may send the same one."""
        return None if self.attempt_id is None else (self.performer, self.attempt_id)


class Receipt(NamedTuple):
    """A finalized attempt: the batch holding it and where its instances are in it.

    A batched window holds the attempts of several agents, and of one agent
    several; the positions say which entries are this attempt's."""

    batch: Batch
    positions: tuple[int, ...]

    @property
    def seq(self) -> int:
        return self.batch.seq


#: An attempt the checks refused, with its answer and the rule it breaks.
Rejection = tuple[Attempt, "asyncio.Future[Receipt]", Violation]


def same_instances(attempt: Attempt, instances: Sequence[ActionInstance]) -> None:
    """A resent attempt id must carry the same instances: an agent that reuses an
    id for another attempt would otherwise be told the first one's outcome."""
    if len(instances) != len(attempt.instances) or any(
        a.action.name != b.action.name or not _same_bindings(a.bindings, b.bindings)
        for a, b in zip(attempt.instances, instances, strict=False)
    ):
        raise IdReused(attempt.attempt_id or "", attempt.performer)


def same_attempt(attempt: Attempt, receipt: Receipt) -> None:
    entries = receipt.batch.entries
    same_instances(attempt, [entries[i].instance for i in receipt.positions])


def _same_bindings(a: Any, b: Any) -> bool:
    return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)


class AttemptIds:
    """Which batch holds each attempt id finalized in a ledger (ids are each
    agent's own): what binds an id to the instances it was first finalized
    with, whatever they are (legal again or not).

    Kept for the whole log (rebuilt from it at load), as small as it can be: a
    Python hash of the (agent, id) pair and a sequence number, not the id. Two
    pairs that share a hash keep both numbers, and the batch read then says
    which entries are whose, so a shared hash costs a read, never a wrong
    answer."""

    __slots__ = ("_seqs",)

    def __init__(self) -> None:
        self._seqs: dict[int, int | tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self._seqs)

    def add(self, batch: Batch) -> None:
        """Record the attempt ids of a batch just numbered or read from the log."""
        last: tuple[str, str] | None = None
        for entry in batch.entries:
            if entry.attempt_id is None:
                continue
            key = (entry.performer, entry.attempt_id)
            if key == last:  # an attempt's instances are adjacent in its batch
                continue
            last = key
            digest = hash(key)
            known = self._seqs.get(digest)
            if known is None:
                self._seqs[digest] = batch.seq
            elif isinstance(known, int):
                if known != batch.seq:
                    self._seqs[digest] = (known, batch.seq)
            elif batch.seq not in known:
                self._seqs[digest] = (*known, batch.seq)

    def __contains__(self, key: tuple[str, str]) -> bool:
        """Whether attempt ``key`` (agent, id) may have been finalized."""
        return hash(key) in self._seqs

    async def receipt(
        self,
        attempt: Attempt,
        committed: int,
        read: Callable[[int, int], Awaitable[list[Batch]]],
    ) -> Receipt | None:
        """The receipt of the attempt finalized under ``attempt``'s id, read
        with ``read(after, limit)`` from the batches committed (up to
        ``committed``): the original answer if ``attempt`` carries the same
        instances, :class:`~syncserver.errors.IdReused` if not. None if no
        committed batch holds it: its batch is not committed yet (an attempt
        in flight, which the ledger's own paths share with its resend), or
        another id has the same hash."""
        key = attempt.key
        known = None if key is None else self._seqs.get(hash(key))
        if key is None or known is None:
            return None
        for seq in (known,) if isinstance(known, int) else known:
            if seq > committed:
                continue
            for batch in await read(seq - 1, 1):
                positions = tuple(
                    i
                    for i, e in enumerate(batch.entries)
                    if e.attempt_id == key[1] and e.performer == key[0]
                )
                if positions:
                    receipt = Receipt(batch, positions)
                    same_attempt(attempt, receipt)
                    return receipt
        return None

    def clear(self) -> None:
        self._seqs.clear()
