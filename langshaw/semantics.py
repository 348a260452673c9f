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
import json
import re
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


@dataclass(slots=True)
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


class _Scope:
    __slots__ = ("bindings", "key")

    def __init__(self, key: ScopeKey) -> None:
        self.key = key
        self.bindings: dict[str, JSON] = dict(key)


class Enactment:
    """One root enactment: its scopes, and where each action occurred."""

    __slots__ = ("complete", "key_values", "root", "scopes")

    def __init__(self, root: tuple[Any, ...]) -> None:
        self.root = root
        self.scopes: dict[ScopeKey, _Scope] = {}
        # key -> {value: number of scopes with it}, for the non-root keys
        # key -> {value: scopes using it}, for non-root keys (None until one is used)
        self.key_values: dict[str, dict[Any, int]] | None = None
        self.complete = False

    def bindings(self, scope: ScopeKey) -> dict[str, JSON]:
        """What is bound in ``scope`` (empty if nothing happened there)."""
        found = self.scopes.get(scope)
        return dict(found.bindings) if found else {}

    def values_of(self, key: str) -> Mapping[Any, int]:
        """The values a non-root key has in this enactment's scopes."""
        return self.key_values.get(key, {}) if self.key_values else {}


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
    # Names in completion clauses: only an action binding one can complete.
    completion_names: frozenset[str] = frozenset()
    may_complete: dict[str, bool] = field(default_factory=dict)
    # Attributes that more than one action carries (keys included): only their
    # values can ever be compared, so only they need keeping in fingerprint mode.
    shared: frozenset[str] = frozenset()
    # Per action: its data attributes (not keys, not dependencies) with whether
    # the performer may bind them; its dependencies with how their scope relates
    # to the action's ("same-or-up": a subset of the keys; "down": a superset;
    # "none": neither); its excluders with the same relation.
    data: dict[str, tuple[tuple[str, bool], ...]] = field(default_factory=dict)
    dependencies: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = field(
        default_factory=dict
    )
    exclusions: dict[str, tuple[tuple[str, str, str, tuple[str, ...]], ...]] = field(
        default_factory=dict
    )


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
    def relation(mine: str, theirs: str) -> str:
        if keysets[theirs] <= keysets[mine]:
            return "same-or-up"
        if keysets[mine] < keysets[theirs]:
            return "down"
        return "none"

    excluders = {k: list(dict.fromkeys(v)) for k, v in excluders.items()}
    return _Compiled(
        protocol=protocol,
        key_order=key_order,
        ordered_keys=ordered,
        keysets=keysets,
        ancestor_keysets=ancestors,
        excluders=excluders,
        attribute_sets={n: frozenset(a.attributes) for n, a in protocol.actions.items()},
        roles_actions={r: protocol.actions_of(r) for r in protocol.roles},
        completion_names=frozenset(n for clause in protocol.completion for n in clause),
        shared=frozenset(
            attr
            for attr in protocol.attributes
            if attr in key_order
            or sum(attr in a.attributes for a in protocol.actions.values()) > 1
        ),
        may_complete={
            name: any(n == name or n in a.attributes for cl in protocol.completion for n in cl)
            for name, a in protocol.actions.items()
        },
        data={
            name: tuple(
                (attr, a.actor in protocol.sayso.get(attr, ()))
                for attr in a.attributes
                if attr not in key_order and attr not in protocol.actions
            )
            for name, a in protocol.actions.items()
        },
        dependencies={
            name: tuple((d, relation(name, d), ordered[d]) for d in a.dependencies)
            for name, a in protocol.actions.items()
        },
        exclusions={
            name: tuple(
                (other, rule, "same-or-up" if keysets[other] <= keysets[name] else "other",
                 ordered[other])
                for other, rule in excluders[name]
            )
            for name in protocol.actions
        },
    )


_MISSING = object()


class _Bound:
    """Kept for a bound value that no rule will ever compare (fingerprint mode)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<bound>"


_BOUND: Any = _Bound()
_AMBIGUOUS = object()


def _occurred_in(scope: _Scope, action: str, keys: tuple[str, ...]) -> bool:
    """Did ``action`` occur in ``scope``? Its name is bound there, and the scope has
    the action's keys (an action's name is also bound, as a dependency, in the
    scopes of the actions that depend on it)."""
    if action not in scope.bindings:
        return False
    return len(scope.key) == len(keys) and all(
        k == n for (k, _), n in zip(scope.key, keys, strict=True)
    )


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

    With ``fingerprints=True`` bound values (other than keys, null and booleans)
    are kept as 64-bit digests of their canonical JSON: enough to decide every
    rule, in constant memory per binding whatever the size of the value. The
    SyncServer uses this; the fixed values its ``enabled`` reports are then
    digests, not values.
    """

    def __init__(self, protocol: LangshawProtocol, *, fingerprints: bool = False) -> None:
        self.protocol = protocol
        self.fingerprints = fingerprints
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
                [root[k]] if k in root else [*enactment.values_of(k), FRESH]
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
            checked = self._check_one(instance, roles)
            if type(checked) is Violation:
                return replace(checked, index=index) if index else checked
            self._apply_one(instance, undo, checked)  # type: ignore[arg-type]
        return None

    def _check_one(
        self, instance: ActionInstance, roles: Collection[str] | None
    ) -> Violation | tuple[tuple[Any, ...], ScopeKey]:
        """The violation, or where the instance goes: (root, scope)."""
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
        scope = tuple([(k, bindings[k]) for k in self._c.ordered_keys[name]])
        root = tuple([bindings[k] for k in protocol.root_keys])
        enactment = self._enactments.get(root)
        outcome = _evaluate(self._c, enactment, action, scope, check=True)
        if type(outcome) is Violation:
            return outcome
        for attribute, expected in outcome.items():  # type: ignore[union-attr]
            given = bindings[attribute]
            if not json_equal(self._store(given, attribute), expected):
                if attribute in protocol.actions:
                    return Violation(
                        "dependency",
                        f"'{attribute}' records that the action occurred: bind it to true, "
                        f"not {given!r}",
                        action=name,
                        attribute=attribute,
                    )
                shown = "another value" if self.fingerprints else _show(expected)
                return Violation(
                    "bound",
                    f"'{attribute}' is already bound to {shown} here, so '{name}' "
                    f"must carry that value, not {_show(given)}",
                    action=name,
                    attribute=attribute,
                )
        return root, scope

    def _apply_one(
        self,
        instance: ActionInstance,
        undo: list[tuple] | None,
        located: tuple[tuple[Any, ...], ScopeKey] | None = None,
    ) -> tuple | None:
        """Record one instance (already checked, or finalized elsewhere); returns its
        root if this made the enactment complete. Hot: kept free of helper calls."""
        c = self._c
        action = self.protocol.actions[instance.action.name]
        bindings = instance.bindings
        if located is None:
            root = tuple([bindings[k] for k in self.protocol.root_keys])
            key = tuple([(k, bindings[k]) for k in c.ordered_keys[action.name]])
        else:
            root, key = located
        enactment = self._enactments.get(root)
        if enactment is None:
            enactment = self._enactments[root] = Enactment(root)
            if undo is not None:
                undo.append(("enactment", root))
        scope = enactment.scopes.get(key)
        if scope is None:
            scope = enactment.scopes[key] = _Scope(key)
            if undo is not None:
                undo.append(("scope", enactment, key))
            if len(key) > len(root):
                self._count_keys(enactment, key, 1)
        scope_bindings = scope.bindings
        fingerprints = self.fingerprints
        for attribute in action.attributes:
            if attribute not in scope_bindings:
                value = bindings[attribute]
                if fingerprints:
                    value = self._store(value, attribute)
                scope_bindings[attribute] = value
                if undo is not None:
                    undo.append(("bind", scope, attribute))
        scope_bindings[action.name] = True
        if undo is not None:
            undo.append(("bind", scope, action.name))
            undo.append(("occurred", enactment, enactment.complete))
        if not enactment.complete and c.may_complete[action.name] and self._holds(enactment):
            enactment.complete = True
            return root
        return None

    def _count_keys(self, enactment: Enactment, key: ScopeKey, delta: int) -> None:
        """Track which values the non-root keys take in this enactment."""
        if enactment.key_values is None:
            enactment.key_values = {}
        for name, value in key:
            if name in self._root_keys:
                continue
            seen = enactment.key_values.setdefault(name, {})
            count = seen.get(value, 0) + delta
            if count:
                seen[value] = count
            else:
                del seen[value]

    def _store(self, value: JSON, attribute: str) -> JSON:
        """How a bound value is kept: itself, or (fingerprint mode) a digest of it,
        or nothing but the fact that it is bound when no rule can ever compare it
        (an attribute that a single action carries)."""
        if not self.fingerprints or value is None or value is True or value is False:
            return value
        if attribute not in self._c.shared:
            return _BOUND
        if attribute in self._c.key_order:
            return value
        return fingerprint(value)

    def _holds(self, enactment: Enactment) -> bool:
        scopes = enactment.scopes.values()
        return all(
            any(name in scope.bindings for scope in scopes for name in clause)
            for clause in self.protocol.completion
        )

    def _rollback(self, undo: list[tuple]) -> None:
        for entry in reversed(undo):
            kind = entry[0]
            if kind == "bind":
                _, scope, attribute = entry
                del scope.bindings[attribute]
            elif kind == "occurred":
                _, enactment, was_complete = entry
                enactment.complete = was_complete
            elif kind == "scope":
                _, enactment, key = entry
                enactment.scopes.pop(key)
                if len(key) > len(enactment.root):
                    self._count_keys(enactment, key, -1)
            elif kind == "enactment":
                del self._enactments[entry[1]]
        undo.clear()


def canonical(value: JSON) -> JSON:
    """The value with every integral float made an int, so ``1.0`` and ``1`` agree."""
    if type(value) is float:
        return int(value) if value.is_integer() else value
    if type(value) is dict:
        return {k: canonical(v) for k, v in value.items()}
    if type(value) is list or type(value) is tuple:
        return [canonical(v) for v in value]
    return value


# A JSON number follows ':', ',' or '['; it is a float if a '.' or an exponent
# follows its digits. Text inside strings may match too: that only costs a
# second encoding.
_MAYBE_FLOAT = re.compile(r"[:,\[]-?\d+[.eE]")


def fingerprint(value: JSON) -> int:
    """A 64-bit digest of a JSON value, equal for equal values (``json_equal``).

    Python's own hash: SipHash, keyed per process, so values cannot be crafted to
    collide; digests are recomputed from the log at each start, so they need not
    agree across processes. Strings and numbers are hashed as they are (``1`` and
    ``1.0`` hash alike), containers through their canonical JSON; a tag keeps the
    kinds apart.
    """
    kind = type(value)
    if kind is str:
        return hash(("s", value))
    if kind is int or kind is float:
        return hash(("n", value))
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if _MAYBE_FLOAT.search(text):  # make integral floats ints, and encode again
        text = json.dumps(
            canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    return hash(("j", text))


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
    c: _Compiled,
    enactment: Enactment | None,
    action: Action,
    candidate: ScopeKey,
    check: bool = False,
) -> Any:
    """Decide whether ``action`` is enabled in the ``candidate`` scope, and how.

    The single decision behind both ``enabled`` and ``check``: a Violation, or
    else an Enablement (with ``check``, just its fixed bindings, which is all a
    check compares).
    """
    name = action.name
    scopes: dict[ScopeKey, _Scope] = enactment.scopes if enactment is not None else {}
    scope = scopes.get(candidate)
    if scope is not None and name in scope.bindings:
        return Violation("duplicate", f"'{name}' has already occurred in this scope", action=name)
    values: dict[str, Any] | None = None

    for dependency, relation, their_keys in c.dependencies[name]:
        if relation == "same-or-up":
            # The same scope or an ancestor: exactly one scope can hold it.
            if values is None:
                values = dict(candidate)
            there = scopes.get(tuple((k, values[k]) for k in their_keys))
            met = there is not None and dependency in there.bindings
        elif relation == "down":
            if values is None:
                values = dict(candidate)
            met = any(
                _occurred_in(s, dependency, their_keys) and _agrees(s.key, values)
                for s in scopes.values()
            )
        else:
            met = False
        if not met:
            return Violation(
                "dependency",
                f"'{name}' needs '{dependency}' to have occurred first in this enactment",
                action=name,
                attribute=dependency,
            )
    for other, rule, relation, their_keys in c.exclusions[name]:
        if not scopes:
            break
        if values is None:
            values = dict(candidate)
        if relation == "same-or-up":
            there = scopes.get(tuple((k, values[k]) for k in their_keys))
            hit = there is not None and other in there.bindings
        else:
            hit = any(
                _occurred_in(s, other, their_keys) and _agrees(s.key, values)
                for s in scopes.values()
            )
        if hit:
            if rule == "nono":
                message = (
                    f"'{name}' and '{other}' exclude each other (nono), and '{other}' occurred"
                )
            else:
                message = f"'{other}' occurred, and '{other} -/> {name}' (nogo)"
            return Violation(rule, message, action=name, attribute=other)

    if check:
        keys: dict[str, Any] = {}
        new_keys: list[str] = []
        fixed: dict[str, Any] = {}  # keys need no comparing: they made the scope
    else:
        keys = {}
        new_keys = []
        for k, v in candidate:
            if v is FRESH:
                new_keys.append(k)
            else:
                keys[k] = v
        fixed = dict(keys)
    for dependency in action.dependencies:
        fixed[dependency] = True
    to_bind: list[str] = []
    bound = scope.bindings if scope is not None else None
    for attribute, may_bind in c.data[name]:
        if bound is not None and attribute in bound:
            fixed[attribute] = bound[attribute]
        elif may_bind:
            to_bind.append(attribute)
        else:
            if values is None:
                values = dict(candidate)
            inherited = _inherited(c, enactment, action, values, attribute)
            if inherited is _MISSING:
                owners = " > ".join(c.protocol.sayso.get(attribute, ())) or "nobody"
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
    if check:
        return fixed
    return Enablement(action, keys, tuple(new_keys), fixed, tuple(to_bind))


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
