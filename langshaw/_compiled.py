"""A protocol compiled into lookup tables, and the shape of one root enactment.

Built once per protocol (``_compile`` is cached) so that checking an attempt
never re-derives anything from the protocol text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from langshaw.instances import FRESH, Enablement, ScopeKey, Violation
from langshaw.model import Action, LangshawProtocol
from langshaw.types import AttributeType
from langshaw.values import JSON


class _Scope:
    __slots__ = ("bindings", "key")

    def __init__(self, key: ScopeKey) -> None:
        self.key = key
        self.bindings: dict[str, JSON] = dict(key)


class Enactment:
    """One root enactment: its scopes, and where each action occurred."""

    __slots__ = ("complete", "key_values", "root", "scopes", "watch")

    def __init__(self, root: tuple[Any, ...]) -> None:
        self.root = root
        self.scopes: dict[ScopeKey, _Scope] = {}
        # key -> {value: number of scopes with it}, for the non-root keys (None
        # until one is used); in the order the values came into use.
        self.key_values: dict[str, dict[Any, int]] | None = None
        self.complete = False
        # Told of every change once a role's enabled actions are kept up to
        # date here (langshaw._enabled_cache); None until then.
        self.watch: Any = None

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
    # ... and where each of their keys is in the action's own (ordered) scope,
    # so that an ancestor's scope key is taken from a candidate by position.
    ancestor_at: dict[str, list[tuple[int, ...]]]
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
    # "none": neither; for "same-or-up", where their keys are in the action's
    # scope, or None for the same keys); its excluders with the same relation.
    data: dict[str, tuple[tuple[str, bool], ...]] = field(default_factory=dict)
    dependencies: dict[
        str, tuple[tuple[str, str, tuple[str, ...], tuple[int, ...] | None], ...]
    ] = field(default_factory=dict)
    exclusions: dict[
        str, tuple[tuple[str, str, str, tuple[str, ...], tuple[int, ...] | None], ...]
    ] = field(default_factory=dict)
    # Attributes an instance may leave absent, and per action the typed attributes
    # (dependencies are never typed) with their types.
    optional: frozenset[str] = frozenset()
    typed: dict[str, tuple[tuple[str, AttributeType], ...]] = field(default_factory=dict)
    # The violations that refuse a candidate, made once each: their messages
    # depend on the rule, the action and the attribute, never on the scope, and
    # deciding the candidates of a long enactment refuses most of them.
    refusals: dict[tuple[str, str, str], Violation] = field(default_factory=dict)
    # Per role, how many of its actions have root keys only, and the non-root
    # keys of each other one: how many candidate scopes ``enabled`` has to
    # decide (langshaw._enabled_cache fills it in).
    free_keys: dict[str, tuple[int, list[tuple[str, ...]]]] = field(default_factory=dict)


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

    def at(name: str, keys: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(ordered[name].index(k) for k in keys)

    def up(name: str, theirs: str) -> tuple[int, ...] | None:
        return None if keysets[theirs] == keysets[name] else at(name, ordered[theirs])

    excluders = {k: list(dict.fromkeys(v)) for k, v in excluders.items()}
    return _Compiled(
        protocol=protocol,
        key_order=key_order,
        ordered_keys=ordered,
        keysets=keysets,
        ancestor_keysets=ancestors,
        ancestor_at={name: [at(name, ks) for ks in kss] for name, kss in ancestors.items()},
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
            name: tuple(
                (d, relation(name, d), ordered[d],
                 up(name, d) if relation(name, d) == "same-or-up" else ())
                for d in a.dependencies
            )
            for name, a in protocol.actions.items()
        },
        optional=protocol.optional,
        typed={
            name: tuple(
                (attr, protocol.types[attr])
                for attr in a.attributes
                if attr in protocol.types and protocol.types[attr].type is not None
            )
            for name, a in protocol.actions.items()
        },
        exclusions={
            name: tuple(
                (other, rule, "same-or-up", ordered[other], up(name, other))
                if keysets[other] <= keysets[name]
                else (other, rule, "other", ordered[other], ())
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
