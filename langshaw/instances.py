"""What the semantics speaks of: action instances, violations and enablements.

Agents build :class:`ActionInstance` values, the semantics answers with a
:class:`Violation` or an :class:`Enablement`; these carry no rules themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langshaw.model import Action
from langshaw.values import JSON

RULES = (
    "unknown-action",
    "role",
    "unknown-attribute",
    "missing-attribute",
    "key",
    "duplicate",
    "dependency",
    "nono",
    "nogo",
    "sayso",
    "bound",
    "type",
)


class _Fresh:
    """The value of a key that a new scope will get: equal to no actual value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FRESH"

    def __reduce__(self) -> str:
        return "FRESH"


FRESH: Any = _Fresh()


class _Absent:
    """What an optional attribute left out of an instance is, in a scope: decided,
    and not a value (``null`` is a value). Equal only to itself."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()

ScopeKey = tuple[tuple[str, Any], ...]
"""A scope: ``((key, value), ...)`` in the protocol's key order."""


@dataclass(frozen=True, slots=True)
class ActionInstance:
    """An action with its attributes bound: every one, except the optional ones it
    leaves absent (they are missing from ``bindings``; ``null`` is a value).
    Treat ``bindings`` as read-only."""

    action: Action
    bindings: Mapping[str, JSON]

    @property
    def name(self) -> str:
        return self.action.name

    @property
    def keys(self) -> dict[str, JSON]:
        """The key bindings (the instance's scope) as a dict."""
        return {k: self.bindings[k] for k in self.action.keys}

    def __getitem__(self, attribute: str) -> JSON:
        return self.bindings[attribute]

    def __contains__(self, attribute: object) -> bool:
        """False for an optional attribute this instance leaves absent."""
        return attribute in self.bindings

    def get(self, attribute: str, default: JSON = None) -> JSON:
        """The attribute's value, or ``default`` when it is absent."""
        return self.bindings.get(attribute, default)

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action.name, "bindings": dict(self.bindings)}

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.bindings.items())
        return f"{self.action.name}({shown})"


@dataclass(frozen=True, slots=True)
class Violation:
    """Why an attempt is rejected: the rule it breaks and a message for people."""

    rule: str
    message: str
    action: str | None = None
    attribute: str | None = None
    index: int = 0  # position of the offending instance in an atomic list
    path: str | None = None  # rule "type": where in the value, e.g. "items[0].qty"

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


@dataclass(slots=True)
class Enablement:
    """An action a role may perform now in one scope.

    ``fixed`` holds the bindings the instance must carry (known keys, bindings of
    the scope or its ancestors, and ``True`` for each dependency; ``ABSENT`` for
    an optional attribute left absent there, which the instance must leave
    absent too); ``to_bind`` the
    attributes the role binds now; ``new_keys`` the keys of a new scope, for which
    the performer picks fresh values.
    """

    action: Action
    keys: dict[str, JSON]
    new_keys: tuple[str, ...]
    fixed: dict[str, JSON]
    to_bind: tuple[str, ...]

    # (Not frozen: one is built per enabled action and per check. Treat as read-only.)

    @property
    def ident(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        """Identifies this enablement across recomputations (fresh keys as ``None``)."""
        scope = tuple((k, self.keys.get(k)) for k in self.action.keys)
        return (self.action.name, scope)

    @property
    def initiating(self) -> bool:
        """True when the action would open a new root enactment."""
        return len(self.new_keys) > 0 and not self.keys
