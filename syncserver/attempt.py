"""An attempt on its way through finalization, and the receipt it gets.

Shared by the ledger and the finalization over a shared log
(``syncserver._shared``), which both check that a resent attempt id carries
the same instances as the first attempt under that id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from langshaw import ActionInstance, Violation, json_equal
from syncserver.batch import Batch
from syncserver.errors import ServiceError


@dataclass(slots=True)
class Attempt:
    """An authorized attempt waiting to be finalized."""

    instances: Sequence[ActionInstance]
    performer: str
    roles: frozenset[str]
    attempt_id: str | None = None

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
        raise ServiceError(
            422,
            "attempt-id-reused",
            f"attempt id {attempt.attempt_id!r} was already used by {attempt.performer!r} "
            "for other instances: use a new id for a new attempt",
        )


def same_attempt(attempt: Attempt, receipt: Receipt) -> None:
    entries = receipt.batch.entries
    same_instances(attempt, [entries[i].instance for i in receipt.positions])


def _same_bindings(a: Any, b: Any) -> bool:
    return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
