"""The move classes of a protocol and their static relations, for the verifier's
stubborn-set reduction (:mod:`langshaw._vmodel` explores with them).

Moves fall into classes: perform action A in scope S; deliver A's instance in S
to role R. Scopes take key values from a fixed pool: ``r`` for the root keys,
``k1 .. kN`` for each other key. A class knows statically which classes it may
interfere with (``dependents``), and, through the enablers here, what could
enable it. Why these relations are sound is argued in docs/semantics.md ("How
the verifier explores").
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from langshaw.model import LangshawProtocol

ROOT = "r"

Scope = tuple[tuple[str, str], ...]


class Classes:
    """The move classes of a protocol and their static relations."""

    def __init__(self, protocol: LangshawProtocol, sub_keys: int, peers: bool) -> None:
        self.protocol = protocol
        root = set(protocol.root_keys)
        pool = {
            k: [ROOT] if k in root else [f"{k}{i}" for i in range(1, sub_keys + 1)]
            for k in protocol.keys
        }
        order = {k: i for i, k in enumerate(protocol.keys)}
        self.kinds: list[str] = []
        self.actions: list[str] = []
        self.scopes: list[Scope] = []
        self.roles: list[str] = []  # the performer, or the receiver
        self.do: dict[tuple[str, Scope], int] = {}
        self.get: dict[tuple[str, Scope, str], int] = {}
        for name, action in protocol.actions.items():
            keys = sorted(action.keys, key=order.__getitem__)
            for values in itertools.product(*(pool[k] for k in keys)):
                scope = tuple(zip(keys, values, strict=True))
                self.do[(name, scope)] = self._add("do", name, scope, action.actor)
                if peers:
                    for role in protocol.roles:
                        if role != action.actor:
                            self.get[(name, scope, role)] = self._add("get", name, scope, role)
        self.data = {
            name: frozenset(
                a for a in action.attributes if a not in order and a not in protocol.actions
            )
            for name, action in protocol.actions.items()
        }
        completion = {n for clause in protocol.completion for n in clause}
        self.choices = frozenset(a for a in protocol.optional if a in completion)
        self.excluded: set[frozenset[str]] = set()
        for group in protocol.nono:
            for a, b in itertools.combinations(group, 2):
                self.excluded.add(frozenset((a, b)))
        self.nogo = {frozenset(pair) for pair in protocol.nogo}
        self.excluded |= self.nogo
        self.sayso = protocol.sayso
        # An instance binds, in its scope, its action's name and the names of its
        # dependencies (as True). Where a dependency has the same keys, that
        # binding reads as an occurrence of it (``_compiled._occurred_in``): a
        # role that receives the instance holds the dependency as met, and its
        # nono and nogo partners as excluded, though it may not have received the
        # dependency itself yet. Only such a carrier or the dependency itself
        # binds its name in its scope, so a carrier exists only once the
        # dependency occurred there: its own performer holds it already.
        # ``names[(A, R)]``: what receiving A's instance binds for R.
        keysets = {name: frozenset(action.keys) for name, action in protocol.actions.items()}
        actor = {name: action.actor for name, action in protocol.actions.items()}
        self.names: dict[tuple[str, str], frozenset[str]] = {
            (name, role): frozenset(
                {name}
                | {
                    d
                    for d in action.dependencies
                    if keysets[d] == keysets[name] and actor[d] != role
                }
            )
            for name, action in protocol.actions.items()
            for role in protocol.roles
        }
        # Per action and role: the other roles' actions whose instances, received
        # by the role, bind the action's name where it would occur.
        self.bearers: dict[tuple[str, str], list[str]] = {
            (name, role): [
                a
                for a in protocol.actions
                if a != name and actor[a] != role and name in self.names[(a, role)]
            ]
            for name in protocol.actions
            for role in protocol.roles
        }
        self.by_action: dict[str, list[int]] = {}
        self.by_role: dict[str, list[int]] = {}
        for (name, _), index in self.do.items():
            self.by_action.setdefault(name, []).append(index)
            self.by_role.setdefault(protocol.actions[name].actor, []).append(index)
        self.carriers = {
            attribute: [n for n in protocol.actions if attribute in self.data[n]]
            for attribute in protocol.attributes
        }
        # Per role, the attributes its actions carry whose values in its own
        # state may disagree with what it receives (so the order of deliveries
        # decides which it holds). Values are tokens naming the binder, so that
        # takes two roles that may bind the attribute, or one leaving it absent.
        contested = {x for x, chain in self.sayso.items() if len(set(chain)) > 1}
        contested |= self.choices
        self.carried: dict[str, frozenset[str]] = {
            role: frozenset(
                x for b in protocol.actions_of(role) for x in self.data[b.name] if x in contested
            )
            for role in protocol.roles
        }
        self.dependents = self._dependents(peers)
        # Per role, the actions whose instances bear on its own: dependencies,
        # exclusions, shared attributes.
        self.relevant: dict[str, frozenset[str]] = {
            role: frozenset(
                a
                for a in protocol.actions
                for b in protocol.actions_of(role)
                if self.names[(a, role)] & set(b.dependencies)
                or any(frozenset((n, b.name)) in self.excluded for n in self.names[(a, role)])
                or self.data[a] & self.data[b.name]
            )
            for role in protocol.roles
        }

    def _add(self, kind: str, name: str, scope: Scope, role: str) -> int:
        self.kinds.append(kind)
        self.actions.append(name)
        self.scopes.append(scope)
        self.roles.append(role)
        return len(self.kinds) - 1

    def _dependents(self, peers: bool) -> list[tuple[int, ...]]:
        found: list[set[int]] = [set() for _ in self.kinds]
        actor = {n: a.actor for n, a in self.protocol.actions.items()}
        for i, j in itertools.combinations(range(len(self.kinds)), 2):
            if self._interfere(i, j, actor, peers) or self._interfere(j, i, actor, peers):
                found[i].add(j)
                found[j].add(i)
        return [tuple(sorted(s)) for s in found]

    def _interfere(self, i: int, j: int, actor: dict[str, str], peers: bool) -> bool:
        """May class ``i`` disable ``j``, or fail to commute with it?"""
        a, b = self.actions[i], self.actions[j]
        s, t = self.scopes[i], self.scopes[j]
        if self.kinds[j] == "get":
            # A delivery is disabled only by itself (see _interfere(j, i) for what
            # it does to actions). Two deliveries to one role commute unless both
            # bind an attribute the role carries in one scope: a state keeps the
            # first value it receives, so their order decides which it holds.
            return (
                self.kinds[i] == "get"
                and self.roles[i] == self.roles[j]
                and s == t
                and bool(self.data[a] & self.data[b] & self.carried[self.roles[i]])
            )
        if self.kinds[i] == "get":
            # Delivering A's instance to R changes only R's state: what R's own
            # actions may do, and the values they would carry (A's binding in
            # their scope, or in a scope above from which they inherit).
            if self.roles[i] != actor[b]:
                return False
            names = self.names[(a, self.roles[i])]
            if s == t and b in names:
                return True  # B's name bound where B would occur: a duplicate
            if agree(s, t) and any(frozenset((n, b)) in self.excluded for n in names):
                return True  # A, or a dependency A carries, excludes B
            return any(
                s == t or (above(s, t) and actor[b] not in self.sayso.get(x, ()))
                for x in self.data[a] & self.data[b]
            )
        pair = frozenset((a, b))
        # The same role: one disables the other. Two roles: each acts on its own
        # state, but which came first decides a nogo violation.
        if (
            pair in self.excluded
            and agree(s, t)
            and (actor[a] == actor[b] or not peers or pair in self.nogo)
        ):
            return True
        if self.choices & self.data[a] & self.data[b] and agree(s, t):
            return True  # who binds first decides bound or absent
        if peers:
            # Values come from each performer's knowledge: a binding above the
            # scope of an action that inherits (its role may not bind) changes
            # what it carries, or how the union judges it.
            for x in self.data[a] & self.data[b]:
                if s != t and above(s, t) and actor[b] not in self.sayso.get(x, ()):
                    return True
        return False

    def dependency_enablers(self, scope: Scope, needed: str) -> Iterator[int]:
        """Classes performing ``needed`` in a scope that could meet the dependency."""
        for index in self.by_action.get(needed, ()):
            if agree(self.scopes[index], scope):
                yield index

    def binding_enablers(self, scope: Scope, attribute: str) -> Iterator[int]:
        """Classes that could bind ``attribute`` in ``scope`` or a scope above it."""
        for name in self.carriers.get(attribute, ()):
            for index in self.by_action[name]:
                if above(self.scopes[index], scope):
                    yield index


def agree(s: Scope, t: Scope) -> bool:
    values = dict(s)
    return all(values.get(k, v) == v for k, v in t)


def above(s: Scope, t: Scope) -> bool:
    """``s`` is ``t`` or an ancestor of it."""
    values = dict(t)
    return all(k in values and values[k] == v for k, v in s)
