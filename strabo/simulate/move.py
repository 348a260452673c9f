"""What a coded policy sees and returns: one enabled action, in context.

A coded agent of a scenario is a *policy*: a plain function ``policy(move)``
called for each action its role may perform now. It returns the bindings to
attempt it with (``{}`` when there is nothing to bind), or ``None`` to leave it
for now. The runner calls it again whenever something new is finalized, so a
policy may wait for a condition simply by returning ``None`` until it holds.

Policies decide from what the protocol has recorded (``history``), never from
a speaker pointer of their own: the protocol is the shared record of whose turn
it is. ``memory`` is there for what the record cannot tell, such as a random
generator's state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from peach import FeasibleAction

__all__ = ["Move", "Occurrence", "Policy"]


@dataclass(frozen=True)
class Occurrence:
    """One finalized action of the enactment: its position in the SyncServer's
    log (``seq``), name, performer (agent name) and bindings."""

    seq: int
    action: str
    performer: str
    bindings: Mapping[str, Any]

    def __getitem__(self, attribute: str) -> Any:
        return self.bindings[attribute]

    def get(self, attribute: str, default: Any = None) -> Any:
        return self.bindings.get(attribute, default)


@dataclass
class Move:
    """One action ``agent`` may perform now, and what it needs to decide.

    ``index`` and ``count`` place the agent in its population (``count = 12``
    buyers are indices 0 to 11, named ``buyer-1`` ... ``buyer-12``); ``params``
    are its ``params`` from the scenario; ``rounds`` is the scenario's round
    limit (None when it has none); ``population`` maps each role to the names of
    the agents that play it.
    """

    agent: str
    role: str
    action: FeasibleAction
    history: Sequence[Occurrence]
    params: Mapping[str, Any] = field(default_factory=dict)
    rounds: int | None = None
    index: int = 0
    count: int = 1
    population: Mapping[str, Sequence[str]] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The action's name."""
        return self.action.name

    @property
    def keys(self) -> dict[str, Any]:
        """The key values already fixed for this action (the rest are new keys)."""
        return self.action.keys

    @property
    def fixed(self) -> dict[str, Any]:
        """Every binding the instance will carry whatever the policy returns."""
        return self.action.fixed

    @property
    def initiating(self) -> bool:
        """True when the action would open a new enactment (fresh root keys)."""
        return bool(self.action.new_keys) and not self.history

    def at(self, **keys: Any) -> dict[str, Any] | None:
        """The key bindings that place this action in the scope ``keys`` names:
        a new key is bound to the value given, a fixed one must already have it.
        None when the action is offered in another scope (``Call`` offered for
        a seller that is not the one to call, say)."""
        bindings: dict[str, Any] = {}
        for key, value in keys.items():
            if key in self.action.new_keys:
                # A value the key already has in the enactment is offered as an
                # action of its own, with the key fixed (docs/semantics.md,
                # "Which scopes are offered"): this offer is for new values.
                if any(o.bindings.get(key) == value for o in self.history):
                    return None
                bindings[key] = value
            elif self.action.keys.get(key) != value:
                return None
        return bindings

    def occurred(self, action: str, **where: Any) -> list[Occurrence]:
        """The occurrences of ``action`` whose bindings include ``where``."""
        return [
            o for o in self.history
            if o.action == action and all(o.bindings.get(k) == v for k, v in where.items())
        ]

    def last(self, action: str, **where: Any) -> Occurrence | None:
        """The latest occurrence of ``action`` matching ``where``, if any."""
        found = self.occurred(action, **where)
        return found[-1] if found else None


Policy = Callable[[Move], Mapping[str, Any] | None]
