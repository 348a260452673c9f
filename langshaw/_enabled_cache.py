"""Enabled actions kept per enactment and role, brought up to date from what
changed rather than decided again.

``SocialState.enabled`` decides, for each action of a role, every candidate
scope: each value a non-root key has in the enactment, and a fresh one. An
enactment with a thousand versions has thousands of candidates, and deciding
all of them again after each instance made the cost grow with the history,
though one instance changes the outcome of only a few.

What one candidate's outcome reads is narrow (``_enablement``): bindings of
scopes that agree with it on the keys they share (its own, its ancestors, the
descendants its dependencies and exclusions look into), and of those only the
names of its action, dependencies, exclusion partners and data attributes. A
scope's bindings only ever grow, or shrink back in a rollback; so a candidate
needs deciding again only when a scope agreeing with it gained or lost one of
those names. The semantics reports each such change (``_Watch.touched``) and
each key value that appears or disappears (``_Watch.value``) to the views of
the enactment; a view decides again, when next asked, only the candidates those
touch.

The answer is the same list, in the same order, as deciding every candidate
(``afresh``, kept as the reference and for small enactments): candidates are
ordered as ``itertools.product`` enumerates them, each key's values in the
order they came into use in the enactment, a fresh value last. Each candidate
has its place as a tuple of numbers (its action's, then each value's in the
order of its key's values), and a view keeps the enabled ones sorted by it, so
an update is a bisection, never a re-sort.
"""

from __future__ import annotations

import itertools
import sys
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from langshaw._compiled import Enactment, _Compiled
from langshaw._enablement import _evaluate
from langshaw.instances import FRESH, Enablement, ScopeKey
from langshaw.model import Action

# Below this many candidates (for one role in one enactment) deciding them all
# costs less than keeping a view up to date, and the view's memory is saved.
THRESHOLD = 48
# A view whose role stopped asking while values keep coming and going (checks
# that open a sub-scope and roll it back) would pile up events: past this many
# it is dropped, and made again if the role asks.
EVENTS = 1024
_LAST = sys.maxsize  # a fresh value's place: after every value in use


def afresh(c: _Compiled, enactment: Enactment, role: str) -> list[Enablement]:
    """Every candidate scope decided from the state alone: the reference the
    views must agree with."""
    # A candidate scope takes, for each non-root key, a value that key already
    # has somewhere in the enactment, or a fresh one: any other value behaves
    # exactly like a fresh one, so this covers every scope an attempt can name.
    result = []
    root = dict(zip(c.protocol.root_keys, enactment.root, strict=True))
    for action in c.roles_actions.get(role, ()):
        keys = c.ordered_keys[action.name]
        choices = [[root[k]] if k in root else [*enactment.values_of(k), FRESH] for k in keys]
        for values in itertools.product(*choices):
            outcome = _evaluate(c, enactment, action, tuple(zip(keys, values, strict=True)))
            if isinstance(outcome, Enablement):
                result.append(outcome)
    return result


def enabled_in(c: _Compiled, enactment: Enactment, role: str) -> list[Enablement]:
    """What ``role`` may do in ``enactment``: from its view when it has one.

    A view is made the second time a role asks about an enactment large enough
    to need one: making it costs somewhat more than deciding afresh, which a
    state asked once (the SyncServer's replica of one enactment) would pay for
    nothing."""
    watch: _Watch | None = enactment.watch
    view = watch.views.get(role) if watch is not None else None
    if view is not None:
        if view.dirty or view.events:
            view.refresh(c, enactment)
        return view.on.copy()
    if watch is not None and role in watch.asked:
        view = watch.views[role] = _View(c, enactment, role)
        return view.on.copy()
    if _candidates(c, enactment, role) >= THRESHOLD:
        if watch is None:
            watch = enactment.watch = _Watch()
        watch.asked.add(role)
    return afresh(c, enactment, role)


def _candidates(c: _Compiled, enactment: Enactment, role: str) -> int:
    """How many candidate scopes ``role`` has in ``enactment``: whether a view
    would pay for itself."""
    shape = c.free_keys.get(role)
    if shape is None:
        root = c.protocol.root_keys
        free = [
            tuple(k for k in c.ordered_keys[action.name] if k not in root)
            for action in c.roles_actions.get(role, ())
        ]
        # Actions with root keys only have one candidate each.
        shape = (sum(not keys for keys in free), [keys for keys in free if keys])
        c.free_keys[role] = shape
    total, keyed = shape
    for keys in keyed:
        count = 1
        for key in keys:
            count *= len(enactment.values_of(key)) + 1
        total += count
    return total


class _Watch:
    """What changed in one enactment, for each role's view (``views``) until
    it next answers. The semantics calls it only for an enactment that has
    one, so an enactment nobody asks about pays nothing."""

    __slots__ = ("asked", "views")

    def __init__(self) -> None:
        self.views: dict[str, _View] = {}
        self.asked: set[str] = set()  # the roles that asked once, without a view

    def applied(self, key: ScopeKey, action: Action, bound: dict[str, Any]) -> None:
        """Before ``action`` binds in scope ``key`` (``bound``): what it adds."""
        if not self.views:
            return
        names = [a for a in action.attributes if a not in bound]
        if action.name not in bound:
            names.append(action.name)
        self.touched(key, names)

    def touched(self, key: ScopeKey, names: Iterable[str]) -> None:
        """Scope ``key`` gained or lost the bindings ``names``."""
        for view in self.views.values():
            dirty = view.dirty.get(key)
            if dirty is None:
                view.dirty[key] = set(names)
            else:
                dirty.update(names)

    def value(self, key: str, value: Any, added: bool) -> None:
        """A non-root key's value came into use in the enactment, or went out
        of it: candidates to add or drop. Kept in order, since the order values
        came in is the order of the answer."""
        for role, view in list(self.views.items()):
            view.events.append((key, value, added))
            if len(view.events) > EVENTS:
                del self.views[role]  # (the role is still in ``asked``)


class _Table:
    """One action's candidates: ``rows`` maps the values of its non-root keys
    to the outcome (None where it is not enabled)."""

    __slots__ = ("action", "build", "free", "number", "relevant", "rows")

    def __init__(self, c: _Compiled, action: Action, number: int) -> None:
        root = c.protocol.root_keys
        keys = c.ordered_keys[action.name]
        self.action = action
        self.number = number
        self.free = tuple(k for k in keys if k not in root)
        free_at = {k: i for i, k in enumerate(self.free)}
        # How a candidate is made: (key, index in the root) or (key, -1 - index
        # among the free values).
        self.build = tuple(
            (k, root.index(k)) if k in root else (k, -1 - free_at[k]) for k in keys
        )
        name = action.name
        self.relevant = frozenset(
            [
                name,
                *action.dependencies,
                *(other for other, *_ in c.exclusions[name]),
                *(attribute for attribute, _ in c.data[name]),
            ]
        )
        self.rows: dict[tuple[Any, ...], Enablement | None] = {}

    def decide(
        self, c: _Compiled, enactment: Enactment, values: tuple[Any, ...]
    ) -> Enablement | None:
        root = enactment.root
        candidate = tuple([(k, root[i] if i >= 0 else values[-1 - i]) for k, i in self.build])
        outcome = _evaluate(c, enactment, self.action, candidate)
        return outcome if isinstance(outcome, Enablement) else None


class _View:
    """One role's enabled actions in one enactment, with what changed since
    they were last brought up to date (``dirty``: scope -> names; ``events``:
    key values that came or went).

    ``on`` is the answer: the enabled outcomes in order, ``places`` beside it
    (for the bisection) each one's place, ``(action's number, values' numbers)``.
    ``index`` numbers each non-root key's values in the order they came into
    use, as the enactment's ``values_of`` orders them."""

    __slots__ = ("dirty", "events", "index", "next", "on", "places", "tables")

    def __init__(self, c: _Compiled, enactment: Enactment, role: str) -> None:
        self.dirty: dict[ScopeKey, set[str]] = {}
        self.events: list[tuple[str, Any, bool]] = []
        actions = c.roles_actions.get(role, ())
        self.tables = [_Table(c, action, n) for n, action in enumerate(actions)]
        self.index: dict[str, dict[Any, int]] = {}
        self.next = 0
        for key in dict.fromkeys(k for table in self.tables for k in table.free):
            numbers = self.index[key] = {}
            for value in enactment.values_of(key):
                numbers[value] = self.next
                self.next += 1
        self.on: list[Enablement] = []
        self.places: list[tuple[int, ...]] = []
        for table in self.tables:
            rows = table.rows
            choices = [[*self.index[k], FRESH] for k in table.free]
            for values in itertools.product(*choices):
                outcome = rows[values] = table.decide(c, enactment, values)
                if outcome is not None:
                    self.on.append(outcome)
                    self.places.append(self._place(table, values))

    def _place(self, table: _Table, values: tuple[Any, ...]) -> tuple[int, ...]:
        index = self.index
        numbers = zip(table.free, values, strict=True)
        return (table.number, *[_LAST if v is FRESH else index[k][v] for k, v in numbers])

    def _set(self, table: _Table, values: tuple[Any, ...], outcome: Enablement | None) -> None:
        """Make ``outcome`` the row's, and keep ``on`` in step."""
        old = table.rows.get(values)
        table.rows[values] = outcome
        if old is None and outcome is None:
            return
        place = self._place(table, values)
        at = bisect_left(self.places, place)
        if old is None:
            self.on.insert(at, outcome)  # type: ignore[arg-type]
            self.places.insert(at, place)
        elif outcome is None:
            del self.on[at]
            del self.places[at]
        else:
            self.on[at] = outcome

    def refresh(self, c: _Compiled, enactment: Enactment) -> None:
        stale: list[set[tuple[Any, ...]]] = [set() for _ in self.tables]
        events, self.events = self.events, []
        for key, value, added in events:
            if key in self.index:
                self._restructure(key, value, added, stale)
        dirty, self.dirty = self.dirty, {}
        for scope, names in dirty.items():
            here = dict(scope)
            for table, marked in zip(self.tables, stale, strict=True):
                if table.relevant.isdisjoint(names):
                    continue
                wanted = [here.get(k, _ANY) for k in table.free]
                if _ANY not in wanted:
                    marked.add(tuple(wanted))
                else:
                    marked.update(
                        values
                        for values in table.rows
                        if all(w is _ANY or w == v for w, v in zip(wanted, values, strict=True))
                    )
        for table, marked in zip(self.tables, stale, strict=True):
            rows = table.rows
            for values in marked:
                if values in rows:
                    self._set(table, values, table.decide(c, enactment, values))

    def _restructure(
        self, key: str, value: Any, added: bool, stale: list[set[tuple[Any, ...]]]
    ) -> None:
        """Replay one key value coming into use (its rows appear, to be
        decided) or going (its rows go)."""
        numbers = self.index[key]
        if added:
            numbers[value] = self.next
            self.next += 1
        for table, marked in zip(self.tables, stale, strict=True):
            if key not in table.free:
                continue
            if added:
                choices: list[Iterable[Any]] = [
                    (value,) if k == key else [*self.index[k], FRESH] for k in table.free
                ]
                for values in itertools.product(*choices):
                    table.rows[values] = None
                    marked.add(values)
                continue
            at = table.free.index(key)
            gone = [(value,)] if len(table.free) == 1 else [v for v in table.rows if v[at] == value]
            for values in gone:
                self._set(table, values, None)
                del table.rows[values]
        if not added:
            del numbers[value]


_ANY: Any = object()  # a key the touched scope does not have: any value of it
