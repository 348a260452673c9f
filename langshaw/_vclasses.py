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

    def __init__(
        self, protocol: LangshawProtocol, sub_keys: int, peers: bool, collisions: bool = True
    ) -> None:
        self.protocol = protocol
        # Without collisions, a role may use a sub-key value only if it holds
        # it or nobody used it yet: whoever uses a value first disables every
        # other role's class in a scope with it.
        self.collisions = collisions
        self.root_keys = frozenset(protocol.root_keys)
        root = set(protocol.root_keys)
        pool = {
            k: [ROOT] if k in root else [f"{k}{i}" for i in range(1, sub_keys + 1)]
            for k in protocol.keys
        }
        self.pool = pool
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
        # Sentinels: each action in each scope that uses a key value beyond the
        # pool (``k{N+1}``). They are never performed; the model asks whether one
        # is enabled, which is what "the bound was reached" means (verify.py).
        self.real = len(self.kinds)
        self.beyond: list[int] = []
        wider = {
            k: values if k in root else [*values, f"{k}{sub_keys + 1}"]
            for k, values in pool.items()
        }
        for name, action in protocol.actions.items():
            keys = sorted(action.keys, key=order.__getitem__)
            for values in itertools.product(*(wider[k] for k in keys)):
                if all(v in pool[k] for k, v in zip(keys, values, strict=True)):
                    continue
                scope = tuple(zip(keys, values, strict=True))
                self.beyond.append(self._add("beyond", name, scope, action.actor))
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
        # Per attribute, the keysets of the scopes that can hold it.
        self.holding = {
            attribute: {keysets[n] for n in names} for attribute, names in self.carriers.items()
        }
        self.dependents = self._dependents(peers)
        # Decentralized: per perform class, the other roles' perform classes
        # whose instances the union could refuse for this one's (or this one's
        # for theirs): an exclusion partner, or an attribute that can hold two
        # values, carried in the same scope or one above or below. A class with
        # none can never be unsafe.
        self.clashes: dict[int, tuple[int, ...]] = {}
        # Per such class, every kind of conflict its instance could be (a
        # superset: what verify.py's kinds would name).
        self.potential: dict[int, frozenset[tuple[str, ...]]] = {}
        if peers:
            rebound = self._rebound()
            for i in range(self.real):
                found = tuple(
                    j
                    for j in range(self.real)
                    if self.kinds[i] == self.kinds[j] == "do"
                    and self.roles[j] != self.roles[i]
                    and self._clash(i, j, rebound)
                )
                if found:
                    self.clashes[i] = found
                    self.potential[i] = frozenset(
                        k for j in found for k in self._kinds(i, j, rebound)
                    )
        self.seeds = sorted(
            range(self.real), key=lambda i: (i in self.clashes, len(self.dependents[i]))
        )
        self.rank = {cls: i for i, cls in enumerate(self.seeds)}
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
                or (not collisions and self._sub_keys(a) & self._sub_keys(b.name))
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
        for i, j in itertools.combinations(range(self.real), 2):
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
            # it does to actions), and two deliveries commute: before a conflict
            # no role receives two values of one attribute in one scope, and
            # nothing follows a conflict.
            return False
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
        if peers and not self.collisions and actor[a] != actor[b]:
            mine = {kv for kv in s if kv[0] not in self.root_keys}
            if any(kv in mine for kv in t):
                return True  # the first to use a sub-key value takes it
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
            # what it carries, or how the union judges it. Only an action whose
            # role may bind the attribute binds it: one that merely carries it
            # (its role may not bind it either) carries what its performer was
            # told, a value already in the log, and changes nothing of either:
            # unless another scope above the lower action's, not above the
            # carrier's, can hold the attribute. Then the carrier's copy is
            # nearer than where it came from, and may stand beside a value of
            # that other scope, one size up: the lower action, in its own
            # role's state or as the union judges it, reads another value, or
            # two ({j} and {k} above {k, j}: ambiguous, so disabled).
            for x in self.data[a] & self.data[b]:
                sayso = self.sayso.get(x, ())
                if (
                    s != t
                    and above(s, t)
                    and actor[b] not in sayso
                    and (actor[a] in sayso or self._beside(x, s, t))
                ):
                    return True
        return False

    def _beside(self, attribute: str, s: Scope, t: Scope) -> bool:
        """Can a scope above ``t`` (not ``t``) that is not above ``s`` hold
        ``attribute``?"""
        mine, theirs = {k for k, _ in s}, {k for k, _ in t}
        return any(k < theirs and not k <= mine for k in self.holding.get(attribute, ()))

    def _rebound(self) -> frozenset[str]:
        """Attributes that can hold two values in one scope: two roles may bind
        them, or one may leave them absent (completion names them), or a role
        may bind them afresh in a scope below one where it bound them already."""
        two = {x for x, chain in self.sayso.items() if len(set(chain)) > 1} | self.choices
        for x, chain in self.sayso.items():
            binders = [
                i
                for i in range(self.real)
                if self.kinds[i] == "do" and x in self.data[self.actions[i]]
                and self.roles[i] in chain
            ]
            if any(
                self.scopes[i] != self.scopes[j] and above(self.scopes[i], self.scopes[j])
                for i in binders
                for j in binders
            ):
                two.add(x)
        return frozenset(two)

    def _kinds(self, i: int, j: int, rebound: frozenset[str]) -> Iterator[tuple[str, ...]]:
        """The conflicts ``i``'s instance could be, for one of ``j``'s."""
        a, b = self.actions[i], self.actions[j]
        pair = frozenset((a, b))
        if pair in self.excluded and pair not in self.nogo:
            yield ("nono", *sorted((a, b)))
        if (b, a) in self.protocol.nogo:
            yield ("nogo", a, b)
        for x in self.data[a] & self.data[b] & rebound:
            yield ("bound", a, x)

    def _clash(self, i: int, j: int, rebound: frozenset[str]) -> bool:
        a, b = self.actions[i], self.actions[j]
        s, t = self.scopes[i], self.scopes[j]
        if frozenset((a, b)) in self.excluded and agree(s, t):
            return True
        shared = self.data[a] & self.data[b] & rebound
        return bool(shared) and (above(s, t) or above(t, s))

    def _sub_keys(self, name: str) -> frozenset[str]:
        return frozenset(self.protocol.actions[name].keys) - self.root_keys

    def holders(self, key: str, value: str, role: str) -> Iterator[int]:
        """The deliveries to ``role`` of instances in scopes where ``key`` has
        ``value``: what lets it use a value another role made."""
        for (_, scope, receiver), index in self.get.items():
            if receiver == role and (key, value) in scope:
                yield index

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
