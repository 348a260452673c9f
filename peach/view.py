"""What an agent knows of one protocol: the social state and each enactment's history.

One view per protocol per executor, shared by the adapters that play roles in
that protocol through that executor, so a finalized batch is applied once
however many roles the process plays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langshaw import ActionInstance, LangshawProtocol, SocialState

if TYPE_CHECKING:
    from syncserver.batch import Batch

Record = tuple[int, ActionInstance, str]  # (seq, instance, performer)


class View:
    def __init__(self, protocol: LangshawProtocol) -> None:
        self.protocol = protocol
        self.state = SocialState(protocol)
        self.history: dict[tuple[Any, ...], list[Record]] = {}

    def apply(self, batch: Batch) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """Record a finalized batch; returns (enactments now complete, enactments touched)."""
        entries = batch.entries
        completed = self.state.apply([e.instance for e in entries])
        roots = self.protocol.root_keys
        touched: list[tuple[Any, ...]] = []
        for entry in entries:
            root = tuple(entry.instance.bindings[k] for k in roots)
            if root not in touched:
                touched.append(root)
            self.history.setdefault(root, []).append((batch.seq, entry.instance, entry.performer))
        return completed, touched


def signature(protocol: LangshawProtocol) -> tuple[Any, ...]:
    """What two protocol objects must share to be enacted as one."""
    actions = tuple((a.name, a.actor, a.attributes) for a in protocol.actions.values())
    return actions + tuple(t.spelled for t in protocol.types.values())
