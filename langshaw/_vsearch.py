"""How the verifier searches a model (``langshaw._vmodel``).

Every enactment is finite (an action occurs once per scope, and the pool of key
values is fixed) and every move adds to the state, so the state graph has no
cycles and every path ends in a *deadlock*: a state where no move is enabled.
What is checked holds once and for good (an action occurred, a clause holds, a
violation happened), so each verdict can be read off the deadlocks:

* live: every deadlock is complete (from a state, some continuation completes
  exactly when some deadlock reachable from it is complete);
* an action is dead when no deadlock holds an instance of it, and a clause never
  holds when it holds in no deadlock;
* unsafe: some deadlock lies after a violation.

A stubborn-set reduction keeps every deadlock while skipping orders of
independent moves, which is what makes the search fast. Counterexamples are
then searched for without reduction, but only among states below a deadlock
that shows the fault (every state on a path to a fault lies below the deadlock
that path extends to), in order of length: so each is a shortest one.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from langshaw._vmodel import End, Move, PeerModel, SharedModel

Model = SharedModel | PeerModel


class StateLimit(Exception):
    """The exploration reached its bound on states."""


class Search:
    def __init__(self, model: Model, *, reduce: bool, max_states: int) -> None:
        self.model = model
        self.reduce = reduce
        self.max_states = max_states
        self.good: dict[Hashable, bool] = {}  # some complete deadlock is reachable
        self.ends: dict[Hashable, End] = {}
        self.transitions = 0

    def explore(self) -> bool:
        """Visit every state of the (reduced) graph; False if the bound cut it."""
        self.model.reset()
        try:
            self._visit()
        except StateLimit:
            return False
        return True

    def good_here(self) -> bool:
        """Can the current state still reach completion?"""
        return self._visit()

    def _visit(self) -> bool:
        model = self.model
        key = model.key()
        known = self.good.get(key)
        if known is not None:
            return known
        if len(self.good) >= self.max_states:
            raise StateLimit
        moves = model.reduced() if self.reduce else model.moves()
        if not moves:
            end = self.ends[key] = model.end()
            good = end.complete or end.truncated
        else:
            good = model.complete()
            for move in moves:
                self.transitions += 1
                model.do(move)
                try:
                    good = self._visit() or good
                finally:
                    model.undo()
        self.good[key] = good
        return good

    def load(self, path: Sequence[Move]) -> None:
        self.model.reset()
        for move in path:
            self.model.do(move)

    def shortest(
        self,
        targets: list[Hashable],
        test: Callable[[], Hashable | None],
        *,
        first_only: bool,
    ) -> dict[Hashable, tuple[Move, ...]]:
        """For each answer ``test`` gives, a shortest path to a state where it
        gives it, among the states below one of ``targets``. Paths are ordered by
        their number of performed actions, then of deliveries; a state where
        ``test`` answers is not expanded."""
        model = self.model
        below = _below(targets, isinstance(model, PeerModel))
        found: dict[Hashable, tuple[Move, ...]] = {}
        counter = itertools.count()
        model.reset()
        heap: list[tuple[tuple[int, int], int, Hashable, tuple[Move, ...]]] = [
            ((0, 0), next(counter), model.key(), ())
        ]
        done: set[Hashable] = set()
        while heap:
            cost, _, key, path = heapq.heappop(heap)
            if key in done:
                continue
            done.add(key)
            self.load(path)
            answer = test()
            if answer is not None:
                found.setdefault(answer, path)
                if first_only:
                    break
                continue
            for move in model.moves():
                model.do(move)
                following = model.key()
                model.undo()
                if following in done or not below(following):
                    continue
                step = (1, 0) if move.kind == "do" else (0, 1)
                heapq.heappush(
                    heap,
                    (
                        (cost[0] + step[0], cost[1] + step[1]),
                        next(counter),
                        following,
                        (*path, move),
                    ),
                )
        return found


def first_violations(
    search: Search, targets: list[Hashable], kind: Callable[[], Hashable | None]
) -> dict[Hashable, tuple[Move, ...]]:
    """Decentralized: for each kind of violation, a shortest path (fewest performed
    actions, then fewest deliveries) to a state where it is the first violation.

    A step delivers to its performer only a minimal set of what it has not
    received that lets it perform the instance it performs. That loses no
    shortest path: had the performer received more, every later step could
    still be taken with it receiving the rest just before, and the check of
    each action against the union does not depend on who received what."""
    model = search.model
    assert isinstance(model, PeerModel)
    below = _below(targets, True)
    found: dict[Hashable, tuple[Move, ...]] = {}
    model.reset()
    seen: set[tuple[Hashable, Hashable | None]] = {(model.key(), None)}
    level: list[tuple[Move, ...]] = [()]
    while level:
        reached: dict[Hashable, tuple[Move, ...]] = {}
        following: list[tuple[Move, ...]] = []
        for path in level:
            search.load(path)
            for role in model.protocol.roles:
                for gets, move in _minimal_steps(model, role):
                    for get in gets:
                        model.do(get)
                    model.do(move)
                    key = (model.key(), kind())
                    model_key = key[0]
                    for _ in range(len(gets) + 1):
                        model.undo()
                    if key in seen or not below(model_key):
                        continue
                    seen.add(key)
                    longer = (*path, *gets, move)
                    if key[1] is None:
                        following.append(longer)
                    elif key[1] not in found:
                        best = reached.get(key[1])
                        if best is None or len(longer) < len(best):
                            reached[key[1]] = longer
        found.update(reached)
        level = following
    return found


def _minimal_steps(model: PeerModel, role: str) -> list[tuple[tuple[Move, ...], Move]]:
    """What ``role`` may perform next, each with a minimal set of deliveries."""
    inflight = [m for m in model.inflight(role) if model.relevant(m.instance.name, role)]
    minimal: dict[int, list[frozenset[int]]] = {}
    steps: list[tuple[tuple[Move, ...], Move]] = []
    for size in range(len(inflight) + 1):
        for gets in itertools.combinations(inflight, size):
            given = frozenset(g.ident for g in gets)
            for get in gets:
                model.do(get)
            for move in model.performs(role):
                sets = minimal.setdefault(move.ident, [])
                if not any(s <= given for s in sets):
                    sets.append(given)
                    steps.append((gets, move))
            for _ in gets:
                model.undo()
    return steps


def _below(targets: list[Hashable], peers: bool) -> Callable[[Hashable], bool]:
    if not peers:
        masks = [int(t) for t in targets]  # type: ignore[call-overload]

        def shared(key: Any) -> bool:
            return any(key & ~t == 0 for t in masks)

        return shared
    tuples = [t[0] for t in targets]  # type: ignore[index]

    def decentralized(key: Any) -> bool:
        masks = key[0]
        return any(all(m & ~t == 0 for m, t in zip(masks, ts, strict=True)) for ts in tuples)

    return decentralized
