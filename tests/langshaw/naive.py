"""A deliberately naive explorer of Langshaw enactments: a test oracle for
``langshaw.verify.verify``.

It re-states the enactment rules (docs/semantics.md, "The rules") over sets of
abstract instances and explores every interleaving of one root enactment
breadth first, with no reduction and nothing from the library but the parsed
model, so that a slip in the verifier's model or in its reduction cannot hide
in both. The definitions it holds the verifier to:

* The root keys take the value ``r``; each other key ``k`` the values ``k1`` ..
  ``k<sub_keys>``. A fresh value of ``a`` is ``<a>`` on a shared state (all
  equal) and ``(a, role, scope)`` decentralized (differs per binder and scope).
  An optional attribute a completion clause names may also be left ABSENT.
* Decentralized, each role acts on its own view (what it performed or
  received); a delivery hands one performed instance to one more role, who
  keeps the first value it got for each (scope, attribute). An instance records
  the actions it depends on in its own scope, which counts as an occurrence of
  a dependency with the same keys. Each performed instance is also checked
  against the union of all performed ones: the rules it breaks there are the
  conflict kinds of that path when it is the path's first violating step.
  A conflict ends the enactment: no move follows it.
* Live: completion (on the union) stays reachable from every reachable state
  before a conflict (a state after one is never stuck).
  ``bound_reached``: some role could act in a scope using a key value beyond
  the pool.

A *view* is the set of instances it holds plus the first value got for each
(scope, attribute): legality depends on nothing else, so orders that give the
same view are one state. A scope is the frozenset of its (key, value) pairs:
"ancestor" is a proper subset, "same, ancestor or descendant" a comparable
pair. A state is (each role's view, the union view, whether a violation
happened on the way). The numbers of performed actions and of deliveries are
functions of the state, so every path to a state has the same length and plain
reachability gives shortest lengths.
"""

from __future__ import annotations

import gc
from collections import deque
from dataclasses import dataclass
from itertools import product
from typing import Any

from langshaw import LangshawProtocol

Scope = frozenset[tuple[str, str]]
Kind = tuple[Any, ...]


class _Absent:
    """Absence of an optional attribute: a value equal only to itself."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()
_MISSING = object()


@dataclass(frozen=True, eq=False)
class Instance:
    """One performed action: its scope and the values of its data attributes
    (keys are the scope; dependencies are always true).

    Interned: :meth:`_Model.candidates` makes one object per (action, scope,
    values), so identity is equality, and an instance is compared and hashed by
    identity (in C: it is hashed millions of times in an exploration)."""

    action: str
    scope: Scope
    values: tuple[tuple[str, Any], ...]


@dataclass
class NaiveResult:
    """The verdicts of one exploration, in the terms the verifier reports:
    ``kinds`` maps each conflict kind (``("nono", frozenset({A, B}))``,
    ``("nogo", X, A)``, ``("bound", A, attribute)`` ...) to the (performed
    actions, deliveries) of a shortest path whose first violation has it;
    ``never_hold`` holds indices into ``protocol.completion``."""

    live: bool
    safe: bool
    dead: set[str]
    never_hold: set[int]
    bound_reached: bool
    kinds: dict[Kind, tuple[int, int]]
    stuck_length: int | None
    states: int


def correlated(a: Scope, b: Scope) -> bool:
    """Agree on every shared key (one root enactment: the root key is shared)."""
    values = dict(a)
    return all(values.get(k, v) == v for k, v in b)


class View:
    """What one role knows (or the union of all performed instances). Interned
    by :class:`_Model`, so the per-view caches below are shared by every state
    that contains the view. The indices are built from the parent view plus the
    one instance added, which is only bookkeeping: they are what a scan of
    ``instances`` and ``values`` would give."""

    __slots__ = (
        "added", "by_attr", "cache", "id", "instances", "items", "key_values", "occ", "values"
    )

    def __init__(
        self, instances: frozenset[Instance], values: dict[tuple[Scope, str], Any], ident: int
    ) -> None:
        self.instances = instances
        self.values = values  # (scope, attribute) -> first value got
        self.items = frozenset(values.items())
        self.id = ident
        self.cache: dict[Any, Any] = {}
        self.added: dict[Instance, View] = {}  # the view with one instance more
        # An occurrence is an instance, or a dependency it records in its own
        # scope when the dependency has the same keys.
        self.occ: dict[str, frozenset[Scope]] = {}
        self.key_values: dict[str, frozenset[str]] = {}
        self.by_attr: dict[str, tuple[tuple[Scope, Any], ...]] = {}

    def extended(self, inst: Instance, records: tuple[str, ...], ident: int) -> View:
        values = dict(self.values)
        for attr, value in inst.values:
            values.setdefault((inst.scope, attr), value)
        view = View(self.instances | {inst}, values, ident)
        view.occ = dict(self.occ)
        for name in (inst.action, *records):
            view.occ[name] = view.occ.get(name, frozenset()) | {inst.scope}
        view.key_values = dict(self.key_values)
        for k, v in inst.scope:
            view.key_values[k] = view.key_values.get(k, frozenset()) | {v}
        view.by_attr = dict(self.by_attr)
        for attr, value in inst.values:
            if (inst.scope, attr) not in self.values:
                view.by_attr[attr] = (*view.by_attr.get(attr, ()), (inst.scope, value))
        return view


class _Model:
    """The rules over views, and the interned views themselves."""

    def __init__(self, p: LangshawProtocol, semantics: str, sub_keys: int, collisions: bool):
        self.protocol, self.collisions = p, collisions
        self.shared = semantics == "shared"
        self.non_root = [k for k in p.keys if k not in p.root_keys]
        self.pool = {k: [f"{k}{i}" for i in range(1, sub_keys + 1)] for k in self.non_root}
        self.extra = {k: f"{k}{sub_keys + 1}" for k in self.non_root}
        named = {n for clause in p.completion for n in clause}
        self.choosable = set(p.optional) & named
        self.data = {
            a.name: tuple(x for x in a.attributes if x not in p.keys and x not in p.actions)
            for a in p.actions.values()
        }
        self.records = {
            a.name: tuple(d for d in a.dependencies if set(p.actions[d].keys) == set(a.keys))
            for a in p.actions.values()
        }
        self.nono = {a: {o for g in p.nono if a in g for o in g if o != a} for a in p.actions}
        self.nogo = {a: {x for x, y in p.nogo if y == a} for a in p.actions}
        self.empty = View(frozenset(), {}, 0)
        self.by_id = [self.empty]
        self.views: dict[Any, View] = {(frozenset(), frozenset()): self.empty}
        self.scope_cache: dict[tuple[str, bool], list[Scope]] = {}
        self.instances: dict[tuple[str, Scope, tuple[tuple[str, Any], ...]], Instance] = {}

    # Views -----------------------------------------------------------------------

    def add(self, view: View, inst: Instance) -> View:
        """Record ``inst``: the first value of each attribute in a scope stays."""
        found = view.added.get(inst)
        if found is None:
            new = [
                ((inst.scope, a), v) for a, v in inst.values if (inst.scope, a) not in view.values
            ]
            ident = (view.instances | {inst}, view.items.union(new))
            found = self.views.get(ident)
            if found is None:
                found = view.extended(inst, self.records[inst.action], len(self.by_id))
                self.views[ident] = found
                self.by_id.append(found)
            view.added[inst] = found
        return found

    # The rules -------------------------------------------------------------------

    def fresh(self, attr: str, role: str, scope: Scope) -> Any:
        return f"<{attr}>" if self.shared else (attr, role, scope)

    def scopes(self, action: str, extra: bool) -> list[Scope]:
        """The scopes ``action`` may be tried in: pool values, or (``extra``)
        scopes using at least one value beyond the pool."""
        if (action, extra) in self.scope_cache:
            return self.scope_cache[action, extra]
        keys = self.protocol.actions[action].keys
        options = [
            [self.extra[k], *self.pool[k]] if extra and k in self.pool else self.pool.get(k, ["r"])
            for k in keys
        ]
        found = [frozenset(zip(keys, combo, strict=True)) for combo in product(*options)]
        if extra:
            found = [s for s in found if any(self.extra.get(k) == v for k, v in s)]
        self.scope_cache[action, extra] = found
        return found

    def candidates(self, view: View, action: str, scope: Scope) -> list[Instance]:
        """Every instance the actor of ``action`` may perform in ``scope`` on
        ``view`` (several where an optional attribute may be left absent)."""
        role = self.protocol.actions[action].actor
        occ = view.occ
        if scope in occ.get(action, ()):
            return []
        for dep in self.protocol.actions[action].dependencies:
            if not any(s <= scope or scope <= s for s in occ.get(dep, ())):
                return []
        for other in self.nono[action] | self.nogo[action]:
            if any(correlated(s, scope) for s in occ.get(other, ())):
                return []
        choices: list[list[Any]] = []
        for attr in self.data[action]:
            value = view.values.get((scope, attr), _MISSING)
            if value is not _MISSING:
                choices.append([value])
            elif role in self.protocol.sayso.get(attr, ()):
                fresh = self.fresh(attr, role, scope)
                choices.append([fresh, ABSENT] if attr in self.choosable else [fresh])
            else:
                inherited = self.inherited(view, attr, scope)
                if not inherited or any(v != inherited[0] for v in inherited):
                    return []  # nobody binds it, or two nearest ancestors disagree
                choices.append(inherited[:1])
        names = self.data[action]
        # Interned: equal instances are one object, compared by identity.
        found = []
        for combo in product(*choices):
            values = tuple(zip(names, combo, strict=True))
            inst = self.instances.get((action, scope, values))
            if inst is None:
                inst = self.instances[action, scope, values] = Instance(action, scope, values)
            found.append(inst)
        return found

    def inherited(self, view: View, attr: str, scope: Scope) -> list[Any]:
        """The values of ``attr`` in the nearest ancestors of ``scope`` binding it."""
        found = [(len(s), v) for s, v in view.by_attr.get(attr, ()) if s < scope]
        nearest = max((size for size, _ in found), default=0)
        return [v for size, v in found if size == nearest]

    def moves(self, view: View, role: str) -> list[Instance]:
        key = ("moves", role)
        if key not in view.cache:
            view.cache[key] = [
                inst
                for a in self.protocol.actions.values()
                if a.actor == role
                for scope in self.scopes(a.name, extra=False)
                for inst in self.candidates(view, a.name, scope)
            ]
        result: list[Instance] = view.cache[key]
        return result

    def wants_more(self, view: View, role: str) -> bool:
        """Could ``role`` act in a scope beyond the key pools?"""
        key = ("beyond", role)
        if key not in view.cache:
            view.cache[key] = any(
                self.candidates(view, a.name, scope)
                for a in self.protocol.actions.values()
                if a.actor == role
                for scope in self.scopes(a.name, extra=True)
            )
        result: bool = view.cache[key]
        return result

    def violations(self, view: View, inst: Instance) -> list[Kind]:
        """Every rule ``inst`` breaks when checked against ``view``."""
        key = ("violations", inst)
        if key not in view.cache:
            view.cache[key] = self._violations(view, inst)
        result: list[Kind] = view.cache[key]
        return result

    def _violations(self, view: View, inst: Instance) -> list[Kind]:
        action, scope = inst.action, inst.scope
        role = self.protocol.actions[action].actor
        occ = view.occ
        kinds: list[Kind] = []
        if scope in occ.get(action, ()):
            kinds.append(("duplicate", action, None))
        for dep in self.protocol.actions[action].dependencies:
            if not any(s <= scope or scope <= s for s in occ.get(dep, ())):
                kinds.append(("dependency", action, dep))
        for other in sorted(self.nono[action]):
            if any(correlated(s, scope) for s in occ.get(other, ())):
                kinds.append(("nono", frozenset({action, other})))
        for other in sorted(self.nogo[action]):
            if any(correlated(s, scope) for s in occ.get(other, ())):
                kinds.append(("nogo", other, action))
        for attr, value in inst.values:
            here = view.values.get((scope, attr), _MISSING)
            if here is not _MISSING:
                if here != value:
                    kinds.append(("bound", action, attr))
            elif role not in self.protocol.sayso.get(attr, ()):
                inherited = self.inherited(view, attr, scope)
                if not inherited:
                    kinds.append(("sayso", action, attr))
                elif any(v != value for v in inherited):
                    kinds.append(("bound", action, attr))
        return kinds

    def holding(self, view: View) -> frozenset[int]:
        """The completion clauses that hold on ``view``."""
        if "holding" not in view.cache:
            p = self.protocol
            bound = {a for (_, a), v in view.values.items() if v is not ABSENT}
            bound |= set(view.key_values)
            view.cache["holding"] = frozenset(
                i
                for i, clause in enumerate(p.completion)
                if any(n in view.occ or n in bound for n in clause)
            )
        result: frozenset[int] = view.cache["holding"]
        return result

    def allowed(self, own: View, union: View, inst: Instance) -> bool:
        """Without collisions a role picks a sub-key value it knows or a fresh one."""
        return self.collisions or all(
            v in own.key_values.get(k, ()) or v not in union.key_values.get(k, ())
            for k, v in inst.scope
            if k in self.pool
        )


def explore(
    protocol: LangshawProtocol,
    semantics: str = "shared",
    sub_keys: int = 2,
    max_states: int = 200_000,
    collisions: bool = True,
) -> NaiveResult | None:
    """Explore every interleaving of one root enactment; None beyond ``max_states``.

    The cyclic garbage collector is paused meanwhile: the exploration makes
    hundreds of thousands of tuples and views that live until it returns (and
    no cycles), which the collector would otherwise walk again and again, for
    half the time of an exploration."""
    if semantics not in ("shared", "decentralized"):
        raise ValueError(f"unknown semantics {semantics!r}")
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _explore(protocol, semantics, sub_keys, max_states, collisions)
    finally:
        if collecting:
            gc.enable()


def _explore(
    protocol: LangshawProtocol, semantics: str, sub_keys: int, max_states: int, collisions: bool
) -> NaiveResult | None:
    m = _Model(protocol, semantics, sub_keys, collisions)
    roles = protocol.roles
    shared = semantics == "shared"
    # A state: (view ids per role, union view id, violated). Shared: every role's
    # view is the union.
    start = (tuple(m.empty.id for _ in roles), m.empty.id, False)
    index = {start: 0}
    states = [start]
    successors: list[list[int]] = []
    kinds: dict[Kind, tuple[int, int]] = {}

    by_id = m.by_id.__getitem__

    def cost(state: tuple[Any, ...]) -> tuple[int, int]:
        own, union_id, _ = state
        performed = len(by_id(union_id).instances)
        known = 0 if shared else sum(len(by_id(v).instances) for v in own)
        return performed, known - (0 if shared else performed)

    # What one role may do from its view and the union: (its view after, the
    # union after, the rules broken), one list for every state holding the pair.
    steps: dict[tuple[int, int, int], list[tuple[int, int, list[Kind]]]] = {}

    def role_steps(role: str, mine: View, union: View) -> list[tuple[int, int, list[Kind]]]:
        found: list[tuple[int, int, list[Kind]]] = []
        for inst in m.moves(mine, role):
            if not m.allowed(mine, union, inst):
                continue
            after = m.add(union, inst).id
            if shared:
                found.append((mine.id, after, []))
            else:
                found.append((m.add(mine, inst).id, after, m.violations(union, inst)))
        if not shared:
            for inst in union.instances - mine.instances:
                found.append((m.add(mine, inst).id, union.id, []))
        return found

    queue = deque([0])
    while queue:
        n = queue.popleft()
        own_ids, union_id, violated = states[n]
        if violated:
            successors.append([])  # a conflict ends the enactment
            continue
        out: list[int] = []
        for r, role in enumerate(roles):
            key = (r, own_ids[r], union_id)
            found = steps.get(key)
            if found is None:
                union = by_id(union_id)
                found = steps[key] = role_steps(
                    role, union if shared else by_id(own_ids[r]), union
                )
            for own_id, after_id, broken in found:
                if shared:
                    target: tuple[Any, ...] = (own_ids, after_id, False)
                else:
                    target = ((*own_ids[:r], own_id, *own_ids[r + 1 :]), after_id, bool(broken))
                    if broken:
                        length = cost(target)
                        for kind in broken:
                            kinds[kind] = min(kinds.get(kind, length), length)
                t = index.get(target)
                if t is None:
                    t = index[target] = len(states)
                    states.append(target)
                    queue.append(t)
                    if len(states) > max_states:
                        return None
                out.append(t)
        successors.append(out)

    # Liveness: which states can still reach a complete one (backwards).
    clauses = set(range(len(protocol.completion)))
    # A state after a conflict is never stuck: nothing is claimed beyond it.
    complete = [s[2] or m.holding(by_id(s[1])) == clauses for s in states]
    preds: list[list[int]] = [[] for _ in states]
    for n, out in enumerate(successors):
        for t in out:
            preds[t].append(n)
    can = list(complete)
    todo = [n for n, c in enumerate(complete) if c]
    while todo:
        for p in preds[todo.pop()]:
            if not can[p]:
                can[p] = True
                todo.append(p)
    stuck = [cost(s) for s, ok in zip(states, can, strict=True) if not ok]
    performed: set[str] = set()
    held: set[int] = set()
    bound_reached = False
    for own_ids, union_id, violated in states:
        union = by_id(union_id)
        performed |= {i.action for i in union.instances}
        held |= m.holding(union)
        if not bound_reached and m.non_root and not violated:
            bound_reached = any(
                m.wants_more(union if shared else by_id(own_ids[r]), role)
                for r, role in enumerate(roles)
            )
    return NaiveResult(
        live=not stuck,
        safe=not kinds,
        dead=set(protocol.actions) - performed,
        never_hold=clauses - held,
        bound_reached=bound_reached,
        kinds=kinds,
        stuck_length=min(stuck)[0] if stuck else None,
        states=len(states),
    )
