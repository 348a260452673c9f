"""Enactment semantics: what a role may do now, and whether an attempt is legal.

This module is the only place the protocol rules live. Adapters compute their
enabled actions with it and the SyncServer checks attempts with it, so the two
can never disagree. It is pure: no I/O, no clock, no randomness; the state
changes only through :meth:`SocialState.apply` and :meth:`SocialState.attempt`.

The rules (``docs/semantics.md`` explains them with examples):

* An instance binds every attribute of its action; its *scope* is its key values.
  Two instances are *correlated* when they agree on every key they share and
  share at least one. A *root enactment* is one assignment of the root keys (the
  keys every action carries), so correlated instances always share a root.
* An action occurs at most once per scope. An attribute naming another action is
  a dependency on it, met by a correlated occurrence in the same scope, an
  ancestor scope (a subset of the keys) or a descendant one (a superset).
* For each other attribute ``p`` of ``A`` performed by ``R`` in scope ``S``: if ``p``
  is bound in ``S`` the instance must carry that value; otherwise, if ``R`` is in
  ``p``'s sayso chain, ``R`` binds it now; otherwise it is inherited from the
  nearest ancestor scope that binds it; otherwise ``A`` is not enabled.
* ``A`` is disabled in ``S`` when a nono partner, or an ``X`` with ``X -/> A``, has
  occurred in a correlated instance.
* A root enactment is complete when every completion clause names an action that
  occurred in it or an attribute bound in it.

Checking and enabling share one evaluation (``_evaluate``), so the enabled set is
exactly the set of attempts that would be accepted.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from langshaw.model import Action, LangshawProtocol
from langshaw.values import JSON, json_equal, valid_key_value

__all__ = [
    "FRESH",
    "RULES",
    "ActionInstance",
    "Enablement",
    "Enactment",
    "ScopeKey",
    "SocialState",
    "Violation",
]

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
)


class _Fresh:
    """The value of a key that a new scope will get: equal to no actual value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FRESH"

    def __reduce__(self) -> str:
        return "FRESH"


FRESH: Any = _Fresh()

ScopeKey = tuple[tuple[str, Any], ...]
"""A scope: ``((key, value), ...)`` in the protocol's key order."""


@dataclass(frozen=True, slots=True)
class ActionInstance:
    """An action with every attribute bound. Treat ``bindings`` as read-only."""

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

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


@dataclass(frozen=True, slots=True)
class Enablement:
    """An action a role may perform now in one scope.

    ``fixed`` holds the bindings the instance must carry (known keys, bindings of
    the scope or its ancestors, and ``True`` for each dependency); ``to_bind`` the
    attributes the role binds now; ``new_keys`` the keys of a new scope, for which
    the performer picks fresh values.
    """

    action: Action
    keys: dict[str, JSON]
    new_keys: tuple[str, ...]
    fixed: dict[str, JSON]
    to_bind: tuple[str, ...]

    @property
    def ident(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        """Identifies this enablement across recomputations (fresh keys as ``None``)."""
        scope = tuple((k, self.keys.get(k)) for k in self.action.keys)
        return (self.action.name, scope)

    @property
    def initiating(self) -> bool:
        """True when the action would open a new root enactment."""
        return len(self.new_keys) > 0 and not self.keys


class _Scope:
    __slots__ = ("bindings", "key", "values")

    def __init__(self, key: ScopeKey) -> None:
        self.key = key
        self.values: dict[str, Any] = dict(key)
        self.bindings: dict[str, JSON] = dict(self.values)


class Enactment:
    """One root enactment: its scopes, and where each action occurred."""

    __slots__ = ("bound", "complete", "key_values", "occurrences", "root", "scopes")

    def __init__(self, root: tuple[Any, ...]) -> None:
        self.root = root
        self.scopes: dict[ScopeKey, _Scope] = {}
        # key -> {value: number of scopes with it}, for the non-root keys
        self.key_values: dict[str, dict[Any, int]] = {}
        self.occurrences: dict[str, list[ScopeKey]] = {}
        self.bound: dict[str, int] = {}  # name -> number of scopes binding it
        self.complete = False

    def bindings(self, scope: ScopeKey) -> dict[str, JSON]:
        """What is bound in ``scope`` (empty if nothing happened there)."""
        found = self.scopes.get(scope)
        return dict(found.bindings) if found else {}

    def occurred(self, action: str) -> list[ScopeKey]:
        """The scopes in which ``action`` occurred."""
        return list(self.occurrences.get(action, ()))


@dataclass
class _Compiled:
    """Per-protocol lookup tables, built once."""

    protocol: LangshawProtocol
    key_order: dict[str, int]
    ordered_keys: dict[str, tuple[str, ...]]
    keysets: dict[str, frozenset[str]]
    # For an action: its proper sub-keysets that are some action's keyset, largest first.
    ancestor_keysets: dict[str, list[tuple[str, ...]]]
    excluders: dict[str, list[tuple[str, str]]]
    attribute_sets: dict[str, frozenset[str]]
    roles_actions: dict[str, tuple[Action, ...]] = field(default_factory=dict)
    initiating: dict[str, tuple[Enablement, ...]] = field(default_factory=dict)


@cache
def _compile(protocol: LangshawProtocol) -> _Compiled:
    key_order = {k: i for i, k in enumerate(protocol.keys)}
    ordered = {
        name: tuple(sorted(a.keys, key=key_order.__getitem__))
        for name, a in protocol.actions.items()
    }
    keysets = {name: frozenset(ks) for name, ks in ordered.items()}
    distinct = {ks: ordered[name] for name, ks in keysets.items()}
    ancestors = {
        name: sorted(
            (tuple_ks for ks, tuple_ks in distinct.items() if ks < keysets[name]),
            key=len,
            reverse=True,
        )
        for name in protocol.actions
    }
    excluders: dict[str, list[tuple[str, str]]] = {name: [] for name in protocol.actions}
    for group in protocol.nono:
        for name in group:
            excluders[name].extend((other, "nono") for other in group if other != name)
    for before, after in protocol.nogo:
        excluders[after].append((before, "nogo"))
    return _Compiled(
        protocol=protocol,
        key_order=key_order,
        ordered_keys=ordered,
        keysets=keysets,
        ancestor_keysets=ancestors,
        excluders={k: list(dict.fromkeys(v)) for k, v in excluders.items()},
        attribute_sets={n: frozenset(a.attributes) for n, a in protocol.actions.items()},
        roles_actions={r: protocol.actions_of(r) for r in protocol.roles},
    )


_MISSING = object()
_AMBIGUOUS = object()


def _agrees(scope: ScopeKey, values: Mapping[str, Any]) -> bool:
    """True when ``scope`` agrees with ``values`` on every key they share."""
    for key, value in scope:
        other = values.get(key, value)
        if other is FRESH or other != value:
            return False
    return True


class SocialState:
    """The social state of one protocol: every root enactment, indexed by scope.

    Lookups go through the enactment's root keys, so the cost of deciding about
    one enactment does not grow with the number of other enactments.
    """

    def __init__(self, protocol: LangshawProtocol) -> None:
        self.protocol = protocol
        self._c = _compile(protocol)
        self._root_keys = frozenset(protocol.root_keys)
        self._enactments: dict[tuple[Any, ...], Enactment] = {}

    # Reading ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._enactments)

    def roots(self) -> Iterator[tuple[Any, ...]]:
        """Every root enactment's root-key values, in order of creation."""
        return iter(self._enactments)

    def root_of(self, bindings: Mapping[str, Any]) -> tuple[Any, ...]:
        """The root enactment an instance (or a dict of key values) belongs to."""
        return tuple(bindings[k] for k in self.protocol.root_keys)

    def enactment(self, root: tuple[Any, ...] | Mapping[str, Any]) -> Enactment | None:
        return self._enactments.get(self._root(root))

    def is_complete(self, root: tuple[Any, ...] | Mapping[str, Any]) -> bool:
        enactment = self._enactments.get(self._root(root))
        return bool(enactment and enactment.complete)

    def _root(self, root: tuple[Any, ...] | Mapping[str, Any]) -> tuple[Any, ...]:
        if isinstance(root, Mapping):
            return self.root_of(root)
        return tuple(root)

    def scope_of(self, action: Action, bindings: Mapping[str, Any]) -> ScopeKey:
        return tuple((k, bindings[k]) for k in self._c.ordered_keys[action.name])

    # Enabled actions ----------------------------------------------------------------

    def enabled(
        self, role: str, root: tuple[Any, ...] | Mapping[str, Any] | None = None
    ) -> list[Enablement]:
        """What ``role`` may do now.

        With ``root``: in that root enactment only (its existing scopes and the new
        sub-scopes it may open). Without: in every enactment, plus the initiating
        actions that open a new one.
        """
        if root is not None:
            enactment = self._enactments.get(self._root(root))
            return self._enabled_in(role, enactment) if enactment else []
        result: list[Enablement] = []
        for enactment in self._enactments.values():
            result.extend(self._enabled_in(role, enactment))
        result.extend(self.initiating(role))
        return result

    def initiating(self, role: str) -> list[Enablement]:
        """The actions ``role`` may perform to open a new root enactment."""
        return list(_initiating(self._c, role))

    def _enabled_in(self, role: str, enactment: Enactment) -> list[Enablement]:
        # A candidate scope takes, for each non-root key, a value that key already
        # has somewhere in the enactment, or a fresh one: any other value behaves
        # exactly like a fresh one, so this covers every scope an attempt can name.
        result = []
        root = dict(zip(self.protocol.root_keys, enactment.root, strict=True))
        for action in self._c.roles_actions.get(role, ()):
            choices = [
                [root[k]] if k in root else [*enactment.key_values.get(k, ()), FRESH]
                for k in self._c.ordered_keys[action.name]
            ]
            keys = self._c.ordered_keys[action.name]
            for values in itertools.product(*choices):
                candidate = tuple(zip(keys, values, strict=True))
                outcome = _evaluate(self._c, enactment, action, candidate)
                if isinstance(outcome, Enablement):
                    result.append(outcome)
        return result

    # Checking and applying ----------------------------------------------------------

    def check(
        self, instances: Sequence[ActionInstance], roles: Collection[str] | None = None
    ) -> Violation | None:
        """Would this atomic list be accepted? Each instance is checked against the
        state plus the earlier instances of the list; the state is left unchanged."""
        undo: list[tuple] = []
        try:
            return self._attempt(instances, roles, undo)
        finally:
            self._rollback(undo)

    def attempt(
        self, instances: Sequence[ActionInstance], roles: Collection[str] | None = None
    ) -> Violation | None:
        """Check the atomic list and, if every instance is legal, apply all of it.

        Returns the first violation (and applies nothing) or None (all applied).
        ``roles``, when given, are the roles the performer plays; performing an
        action of another role is a ``role`` violation.
        """
        undo: list[tuple] = []
        violation = self._attempt(instances, roles, undo)
        if violation is not None:
            self._rollback(undo)
        return violation

    def apply(self, instances: Iterable[ActionInstance]) -> list[tuple[Any, ...]]:
        """Record finalized instances without checking them (they were checked when
        finalized). Returns the roots of enactments that became complete."""
        completed = []
        for instance in instances:
            root = self._apply_one(instance, None)
            if root is not None:
                completed.append(root)
        return completed

    def violation(
        self, instance: ActionInstance, roles: Collection[str] | None = None
    ) -> Violation | None:
        """The violation one instance would commit in the current state, if any."""
        return self.check([instance], roles)

    def claims(self, instance: ActionInstance) -> list[tuple[ScopeKey, str, int]]:
        """The attributes this instance binds fresh where a sayso chain sets priorities.

        Each claim is ``(scope, attribute, rank)`` with rank 0 for the chain's first
        role. Batched finalization orders conflicting claims by rank.
        """
        action = self.protocol.actions.get(instance.name)
        if action is None:
            return []
        try:
            scope = self.scope_of(action, instance.bindings)
            root = tuple(instance.bindings[k] for k in self.protocol.root_keys)
        except KeyError:
            return []
        outcome = _evaluate(self._c, self._enactments.get(root), action, scope)
        if not isinstance(outcome, Enablement):
            return []
        result = []
        for attribute in outcome.to_bind:
            chain = self.protocol.sayso.get(attribute, ())
            if len(chain) > 1:
                result.append((scope, attribute, chain.index(action.actor)))
        return result

    def _attempt(
        self,
        instances: Sequence[ActionInstance],
        roles: Collection[str] | None,
        undo: list[tuple],
    ) -> Violation | None:
        for index, instance in enumerate(instances):
            violation = self._check_one(instance, roles)
            if violation is not None:
                return replace(violation, index=index) if index else violation
            self._apply_one(instance, undo)
        return None

    def _check_one(
        self, instance: ActionInstance, roles: Collection[str] | None
    ) -> Violation | None:
        protocol = self.protocol
        name = instance.action.name
        action = protocol.actions.get(name)
        if action is None:
            return Violation(
                "unknown-action",
                f"{protocol.name} has no action '{name}' (actions: {', '.join(protocol.actions)})",
                action=name,
            )
        if roles is not None and action.actor not in roles:
            return Violation(
                "role",
                f"'{name}' is performed by {action.actor}, a role this agent does not play"
                f" (it plays {', '.join(sorted(roles)) or 'none'})",
                action=name,
            )
        bindings = instance.bindings
        attributes = self._c.attribute_sets[name]
        if len(bindings) != len(attributes) or bindings.keys() != attributes:
            for attribute in bindings:
                if attribute not in attributes:
                    return Violation(
                        "unknown-attribute",
                        f"'{name}' has no attribute '{attribute}' "
                        f"(it has {', '.join(action.attributes)})",
                        action=name,
                        attribute=attribute,
                    )
            for attribute in action.attributes:
                if attribute not in bindings:
                    return Violation(
                        "missing-attribute",
                        f"'{name}' must bind '{attribute}' (an instance binds every attribute)",
                        action=name,
                        attribute=attribute,
                    )
        for key in action.keys:
            if not valid_key_value(bindings[key]):
                return Violation(
                    "key",
                    f"key '{key}' of '{name}' must be a string or an integer, "
                    f"not {bindings[key]!r}",
                    action=name,
                    attribute=key,
                )
        scope = self.scope_of(action, bindings)
        enactment = self._enactments.get(tuple(bindings[k] for k in protocol.root_keys))
        outcome = _evaluate(self._c, enactment, action, scope)
        if isinstance(outcome, Violation):
            return outcome
        for attribute, expected in outcome.fixed.items():
            given = bindings[attribute]
            if not json_equal(given, expected):
                if attribute in protocol.actions:
                    return Violation(
                        "dependency",
                        f"'{attribute}' records that the action occurred: bind it to true, "
                        f"not {given!r}",
                        action=name,
                        attribute=attribute,
                    )
                return Violation(
                    "bound",
                    f"'{attribute}' is already bound to {_show(expected)} here, so '{name}' "
                    f"must carry that value, not {_show(given)}",
                    action=name,
                    attribute=attribute,
                )
        return None

    def _apply_one(self, instance: ActionInstance, undo: list[tuple] | None) -> tuple | None:
        action = self.protocol.actions[instance.action.name]
        bindings = instance.bindings
        root = tuple(bindings[k] for k in self.protocol.root_keys)
        enactment = self._enactments.get(root)
        if enactment is None:
            enactment = self._enactments[root] = Enactment(root)
            if undo is not None:
                undo.append(("enactment", root))
        key = self.scope_of(action, bindings)
        scope = enactment.scopes.get(key)
        if scope is None:
            scope = enactment.scopes[key] = _Scope(key)
            if undo is not None:
                undo.append(("scope", enactment, key))
            for name, value in key:
                self._count(enactment, name, 1)
                if name not in self._root_keys:
                    seen = enactment.key_values.setdefault(name, {})
                    seen[value] = seen.get(value, 0) + 1
        scope_bindings = scope.bindings
        for attribute in action.attributes:
            if attribute not in scope_bindings:
                scope_bindings[attribute] = bindings[attribute]
                self._count(enactment, attribute, 1)
                if undo is not None:
                    undo.append(("bind", enactment, scope, attribute))
        scope_bindings[action.name] = True
        self._count(enactment, action.name, 1)
        if undo is not None:
            undo.append(("bind", enactment, scope, action.name))
        enactment.occurrences.setdefault(action.name, []).append(key)
        if undo is not None:
            undo.append(("occurred", enactment, action.name, enactment.complete))
        if not enactment.complete and self._holds(enactment):
            enactment.complete = True
            return root
        return None

    def _count(self, enactment: Enactment, name: str, delta: int) -> None:
        count = enactment.bound.get(name, 0) + delta
        if count:
            enactment.bound[name] = count
        else:
            enactment.bound.pop(name, None)

    def _holds(self, enactment: Enactment) -> bool:
        bound = enactment.bound
        return all(any(name in bound for name in clause) for clause in self.protocol.completion)

    def _rollback(self, undo: list[tuple]) -> None:
        for entry in reversed(undo):
            kind = entry[0]
            if kind == "bind":
                _, enactment, scope, attribute = entry
                del scope.bindings[attribute]
                self._count(enactment, attribute, -1)
            elif kind == "occurred":
                _, enactment, name, was_complete = entry
                enactment.occurrences[name].pop()
                if not enactment.occurrences[name]:
                    del enactment.occurrences[name]
                enactment.complete = was_complete
            elif kind == "scope":
                _, enactment, key = entry
                enactment.scopes.pop(key)
                for name, value in key:
                    self._count(enactment, name, -1)
                    if name not in self._root_keys:
                        seen = enactment.key_values[name]
                        seen[value] -= 1
                        if not seen[value]:
                            del seen[value]
            elif kind == "enactment":
                del self._enactments[entry[1]]
        undo.clear()


def _show(value: JSON) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _initiating(compiled: _Compiled, role: str) -> tuple[Enablement, ...]:
    """Initiating actions depend only on the protocol, so they are computed once."""
    cache_ = compiled.initiating
    if role not in cache_:
        found = []
        for action in compiled.roles_actions.get(role, ()):
            candidate = tuple((k, FRESH) for k in compiled.ordered_keys[action.name])
            outcome = _evaluate(compiled, None, action, candidate)
            if isinstance(outcome, Enablement):
                found.append(outcome)
        cache_[role] = tuple(found)
    return cache_[role]


def _evaluate(
    c: _Compiled, enactment: Enactment | None, action: Action, candidate: ScopeKey
) -> Enablement | Violation:
    """Decide whether ``action`` is enabled in the ``candidate`` scope, and how.

    The single decision behind both ``enabled`` and ``check``.
    """
    protocol = c.protocol
    name = action.name
    values = dict(candidate)
    scope = enactment.scopes.get(candidate) if enactment is not None else None
    if scope is not None and name in scope.bindings:
        return Violation("duplicate", f"'{name}' has already occurred in this scope", action=name)

    for dependency in action.dependencies:
        if not _occurred_related(c, enactment, dependency, action, values):
            return Violation(
                "dependency",
                f"'{name}' needs '{dependency}' to have occurred first in this enactment",
                action=name,
                attribute=dependency,
            )
    for other, rule in c.excluders[name]:
        if _occurred_correlated(c, enactment, other, values):
            if rule == "nono":
                message = (
                    f"'{name}' and '{other}' exclude each other (nono), and '{other}' occurred"
                )
            else:
                message = f"'{other}' occurred, and '{other} -/> {name}' (nogo)"
            return Violation(rule, message, action=name, attribute=other)

    fixed = {k: v for k, v in candidate if v is not FRESH}
    new_keys = tuple(k for k, v in candidate if v is FRESH)
    to_bind: list[str] = []
    key_order = c.key_order
    actions = protocol.actions
    sayso = protocol.sayso
    bound = scope.bindings if scope is not None else None
    for attribute in action.attributes:
        if attribute in key_order:
            continue
        if attribute in actions:
            fixed[attribute] = True
            continue
        if bound is not None and attribute in bound:
            fixed[attribute] = bound[attribute]
            continue
        if action.actor in sayso.get(attribute, ()):
            to_bind.append(attribute)
            continue
        inherited = _inherited(c, enactment, action, values, attribute)
        if inherited is _MISSING:
            owners = " > ".join(sayso.get(attribute, ())) or "nobody"
            return Violation(
                "sayso",
                f"{action.actor} may not bind '{attribute}' (sayso gives it to {owners}) "
                f"and it is not bound yet, so '{name}' is not enabled",
                action=name,
                attribute=attribute,
            )
        if inherited is _AMBIGUOUS:
            return Violation(
                "bound",
                f"'{attribute}' is bound to different values in enclosing scopes",
                action=name,
                attribute=attribute,
            )
        fixed[attribute] = inherited
    return Enablement(
        action=action,
        keys={k: v for k, v in candidate if v is not FRESH},
        new_keys=new_keys,
        fixed=fixed,
        to_bind=tuple(to_bind),
    )


def _occurred_related(
    c: _Compiled,
    enactment: Enactment | None,
    dependency: str,
    action: Action,
    values: dict[str, Any],
) -> bool:
    """Has ``dependency`` occurred in this scope, an ancestor or a descendant?"""
    if enactment is None:
        return False
    theirs = c.keysets[dependency]
    mine = c.keysets[action.name]
    if theirs <= mine:
        # Same scope or an ancestor: exactly one scope can hold it.
        key = tuple((k, values[k]) for k in c.ordered_keys[dependency])
        scope = enactment.scopes.get(key)
        return scope is not None and dependency in scope.bindings
    if mine < theirs:
        return any(_agrees(s, values) for s in enactment.occurrences.get(dependency, ()))
    return False


def _occurred_correlated(
    c: _Compiled, enactment: Enactment | None, other: str, values: dict[str, Any]
) -> bool:
    """Has ``other`` occurred in an instance correlated with this scope?"""
    if enactment is None:
        return False
    occurred = enactment.occurrences.get(other)
    if not occurred:
        return False
    return any(_agrees(scope, values) for scope in occurred)


def _inherited(
    c: _Compiled,
    enactment: Enactment | None,
    action: Action,
    values: dict[str, Any],
    attribute: str,
) -> Any:
    """The value of ``attribute`` in the nearest ancestor scope that binds it."""
    if enactment is None:
        return _MISSING
    found: list[Any] = []
    size = -1
    for keys in c.ancestor_keysets[action.name]:
        if found and len(keys) < size:
            break
        key = tuple((k, values[k]) for k in keys)
        scope = enactment.scopes.get(key)
        if scope is not None and attribute in scope.bindings:
            found.append(scope.bindings[attribute])
            size = len(keys)
    if not found:
        return _MISSING
    first = found[0]
    if all(json_equal(first, other) for other in found[1:]):
        return first
    return _AMBIGUOUS
