"""Replicas of the enactments read lately, kept up to date as batches commit.

The ledger's state keeps digests of values, so ``GET .../enactment`` (which
shows what each role may do, with the values fixed) needs a replica of the
enactment with its values, rebuilt from the log. Rebuilt for every request,
an IncrementalUCP checkout updated a thousand times cost a hundred
milliseconds a request (2,000 rows read and applied, and every candidate scope
of every role decided afresh). So the replicas of the last enactments asked
about are kept, and each committed batch is applied to the replicas it
touches: a request then costs what changed since the last one (the replica's
``enabled`` is itself incremental: ``langshaw._enabled_cache``).

A replica holds what is committed: batches accepted but not committed yet are
not shown (they may still fail). One being built from the log while batches
commit gets those the log read missed, by sequence number: commits come in
order, so a read of the log holds a prefix of them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langshaw import LangshawProtocol, SocialState
from syncserver.batch import Batch

#: Replicas kept per ledger (the least recently read is dropped first).
KEPT = 32

Root = tuple[Any, ...]


class Views:
    """The replicas of one ledger's enactments, least recently read first."""

    def __init__(self, protocol: LangshawProtocol, kept: int = KEPT) -> None:
        self.protocol = protocol
        self.kept = kept
        self._replicas: OrderedDict[Root, SocialState] = OrderedDict()
        self._building: dict[Root, list[Batch]] = {}  # batches committed meanwhile
        self._generation = 0  # counts reloads: a replica read before one is not kept

    def __len__(self) -> int:
        return len(self._replicas)

    async def replica(
        self, root: Root, read: Callable[[], Awaitable[Sequence[Batch]]]
    ) -> SocialState:
        """The committed state of one enactment with its values; ``read`` gives
        its batches from the log when no replica is kept."""
        state = self._replicas.get(root)
        if state is not None:
            self._replicas.move_to_end(root)
            return state
        missed = self._building.setdefault(root, [])
        generation = self._generation
        try:
            logged = await read()
        finally:
            self._building.pop(root, None)
        state = SocialState(self.protocol)
        last = 0
        for batch in logged:
            state.apply([e.instance for e in batch.entries])
            last = batch.seq
        for batch in missed:
            if batch.seq > last:
                self._apply(state, root, batch)
        if generation != self._generation:
            return state
        self._replicas[root] = state
        while len(self._replicas) > self.kept:
            self._replicas.popitem(last=False)
        return state

    def committed(self, batch: Batch) -> None:
        """Bring the replicas ``batch`` touches up to date (every committed
        batch comes here, in order: this server's and those it follows)."""
        if not self._replicas and not self._building:
            return
        keys = self.protocol.root_keys
        roots = {tuple(e.instance.bindings[k] for k in keys) for e in batch.entries}
        for root in roots:
            state = self._replicas.get(root)
            if state is not None:
                self._apply(state, root, batch)
            building = self._building.get(root)
            if building is not None:
                building.append(batch)

    def clear(self) -> None:
        """The ledger reloaded its state from the log: so will the replicas."""
        self._replicas.clear()
        self._generation += 1

    def _apply(self, state: SocialState, root: Root, batch: Batch) -> None:
        keys = self.protocol.root_keys
        state.apply(
            e.instance
            for e in batch.entries
            if tuple(e.instance.bindings[k] for k in keys) == root
        )
