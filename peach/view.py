"""What an agent knows of one protocol: the social state and each enactment's history.

One view per protocol per executor, shared by the adapters that play roles in
that protocol through that executor, so a finalized batch is applied once
however many roles the process plays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langshaw import ActionInstance, LangshawProtocol, SocialState
from langshaw.values import valid_key_value

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


def root_of(
    protocol: LangshawProtocol, enactment: Mapping[str, Any] | tuple[Any, ...]
) -> tuple[Any, ...]:
    """The root enactment that ``enactment`` names: its root keys as a mapping
    (other entries ignored) or their values as a tuple. Anything else is an
    error that says so, not an enactment that silently has nothing (a string
    read as a tuple of letters) or a KeyError from inside."""
    keys = protocol.root_keys
    if isinstance(enactment, Mapping):
        missing = [k for k in keys if k not in enactment]
        if missing:
            raise ValueError(
                f"{protocol.name}'s enactments are named by {', '.join(keys)}; "
                f"{', '.join(missing)} missing from {_short(dict(enactment))}"
            )
        root = tuple(enactment[k] for k in keys)
    elif isinstance(enactment, tuple | list):
        root = tuple(enactment)
        if len(root) != len(keys):
            raise ValueError(
                f"{protocol.name}'s enactments are named by {len(keys)} key value(s) "
                f"({', '.join(keys)}), not {len(root)}: {_short(root)}"
            )
    else:
        raise TypeError(
            f"an enactment is given by its root keys ({', '.join(keys)}) as a dict or a "
            f"tuple, not {type(enactment).__name__}"
        )
    for key, value in zip(keys, root, strict=True):
        if not valid_key_value(value):
            raise ValueError(f"{key} is a key: a string or an integer, not {_short(value)}")
    return root


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."
