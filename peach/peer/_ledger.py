"""One protocol as one agent knows it, peer to peer: its local log and state.

The ledger numbers what the agent accepts (its own attempts and its peers'
messages) in one local sequence, the order its adapters see, and indexes each
instance by identity, so that duplicates are recognized and a context can be
resolved. It also keeps the messages that wait for part of their context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langshaw import ActionInstance, LangshawProtocol
from langshaw.decentralized import Identity, encode_identity, identity, root
from peach.peer._store import Record
from peach.view import View
from syncserver.batch import Batch, Entry


@dataclass
class Waiting:
    """A received message whose context is not all here yet."""

    sender: str
    seq: int
    instances: list[ActionInstance]
    context: list[Identity]
    record: Record


@dataclass
class Ledger:
    protocol: LangshawProtocol
    view: View = field(init=False)
    seq: int = 0
    known: dict[Identity, ActionInstance] = field(default_factory=dict)
    by_root: dict[tuple[Any, ...], list[Identity]] = field(default_factory=dict)
    # Own messages some peer has not acknowledged, by seq (sent again until it has).
    unsent: dict[int, Record] = field(default_factory=dict)
    waiting: dict[tuple[str, int], Waiting] = field(default_factory=dict)
    # Verdicts given on peers' messages that were refused, for when they come again.
    verdicts: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    refused: set[Identity] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.view = View(self.protocol)

    def instances(self, record: Record) -> list[ActionInstance]:
        actions = self.protocol.actions
        return [ActionInstance(actions[i["action"]], i["bindings"]) for i in record.instances]

    def context(self, instances: list[ActionInstance]) -> list[Identity]:
        """What this agent knows of the enactments ``instances`` belong to."""
        roots = {root(self.protocol, i) for i in instances}
        return [ident for r in roots for ident in self.by_root.get(r, ())]

    def is_whole(self, instances: list[ActionInstance], context: list[Identity]) -> bool:
        """Is ``context`` all this agent knows of those enactments (so that its
        state and the sender's agree there)?"""
        mine = self.context(instances)
        return len(mine) == len(context) and set(mine) == set(context)

    def record(
        self, performer: str, instances: list[ActionInstance], context: list[Identity]
    ) -> Record:
        """The next record of the local log (not yet applied)."""
        return Record(
            self.protocol.name,
            self.seq + 1,
            performer,
            [{"action": i.action.name, "bindings": dict(i.bindings)} for i in instances],
            [encode_identity(c) for c in context],
        )

    def apply(self, record: Record, instances: list[ActionInstance]) -> Batch:
        """Add a record (already written to the store) to the state."""
        assert record.seq == self.seq + 1, (record.seq, self.seq)
        self.seq = record.seq
        for instance in instances:
            ident = identity(instance)
            self.known[ident] = instance
            self.by_root.setdefault(root(self.protocol, instance), []).append(ident)
        return Batch(
            self.protocol.name,
            record.seq,
            tuple(Entry(i, record.performer) for i in instances),
        )
