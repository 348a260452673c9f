"""How the verifier searches a model (``langshaw._vmodel``).

Every enactment is finite (an action occurs once per scope, and the pool of key
values is fixed) and every move adds to the state, so the state graph has no
cycles and every path ends in a *deadlock*: a state where no move is enabled.
What is checked holds once and for good (an action occurred, a clause holds, a
violation happened), so each verdict can be read off the deadlocks:

* live: every deadlock is complete, or ended by a conflict (from a state, some
  continuation completes exactly when some deadlock reachable from it is
  complete; nothing is claimed past a conflict, decentralized);
* an action is dead when no deadlock holds an instance of it, and a clause never
  holds when it holds in no deadlock;
* unsafe: some deadlock was ended by a conflict (the model notes each kind).

A stubborn-set reduction keeps every deadlock before a conflict, and every kind
of conflict, while skipping orders of independent moves, which is what makes
the search fast. Counterexamples are then searched for without reduction, in
order of length, so each is a shortest one.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from langshaw._vmodel import End, Move, SharedModel
from langshaw._vpeer import PeerModel

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
        self.entered = 0  # states entered by explore(), held to max_states

    def explore(self) -> bool:
        """Visit every state of the (reduced) graph; False if the bound cut it.

        Depth first, with an explicit stack: an enactment may be longer than
        Python's recursion limit."""
        self.model.reset()
        self.entered = 0
        try:
            self._visit()
        except StateLimit:
            return False
        return True

    def _open(self, stack: list[list[Any]]) -> bool | None:
        """Enter the current state: its verdict if known or a deadlock, else
        None with a frame (key, moves, next move, good so far) pushed."""
        model = self.model
        key = model.key()
        known = self.good.get(key)
        if known is not None:
            return known
        self.entered += 1
        if self.entered > self.max_states:
            raise StateLimit
        moves = model.reduced() if self.reduce else model.moves()
        if not moves:
            end = self.ends[key] = model.end()
            good = self.good[key] = end.complete or end.bad  # nothing past a conflict
            return good
        stack.append([key, moves, 0, model.complete()])
        return None

    def _visit(self) -> bool:
        model = self.model
        stack: list[list[Any]] = []
        found = self._open(stack)
        if found is not None:
            return found
        while True:
            frame = stack[-1]
            key, moves, at, good = frame
            if at < len(moves):
                frame[2] = at + 1
                self.transitions += 1
                model.do(moves[at])
                known = self._open(stack)
                if known is None:
                    continue  # went down into a new state
                model.undo()
                frame[3] = good or known
                continue
            stack.pop()
            self.good[key] = good
            if not stack:
                return bool(good)
            model.undo()
            stack[-1][3] = stack[-1][3] or good

    def good_here(self) -> bool:
        """Can the current state still reach completion? A depth-first search
        of the reduced graph that stops at the first complete state (complete
        stays complete, so a complete deadlock lies beyond it); what it learns
        of each state is kept for the next question."""
        model = self.model
        frames: list[list[Any]] = []  # (key, moves to try, next); the first is here
        found = self._settle(frames)
        if found is not None:
            return found
        while frames:
            frame = frames[-1]
            key, unknown, at = frame
            if at < len(unknown):
                frame[2] = at + 1
                model.do(unknown[at])
                found = self._settle(frames)
                if found is None:
                    continue  # went down
                model.undo()
                if not found:
                    continue
                # Good: so is every state on the way here.
                for _ in range(len(frames) - 1):
                    self.good[frames.pop()[0]] = True
                    model.undo()
                self.good[frames.pop()[0]] = True
                return True
            frames.pop()
            self.good[key] = False
            if frames:
                model.undo()
        return False

    def _settle(self, frames: list[list[Any]]) -> bool | None:
        """Whether the current state can complete, where one step tells (a
        step to a state known to, or known not to); else None with a frame of
        the steps still to search pushed."""
        model = self.model
        key = model.key()
        known = self.good.get(key)
        if known is not None:
            return known
        if model.complete() or model.violations():
            self.good[key] = True
            return True
        unknown = []
        for move in model.reduced():
            model.do(move)
            known = model.complete() or bool(model.violations()) or self.good.get(model.key())
            model.undo()
            if known:
                self.good[key] = True
                return True
            if known is None:
                unknown.append(move)
        if not unknown:
            self.good[key] = False
            return False
        frames.append([key, unknown, 0])
        return None

    def load(self, path: Sequence[Move]) -> None:
        self.model.reset()
        for move in path:
            self.model.do(move)

    def stuck_trace(self, targets: list[Hashable]) -> tuple[Move, ...]:
        """A shortest path (fewest performed actions, then fewest deliveries)
        to a state from which completion is out of reach, among the states
        below the stuck deadlocks ``targets``.

        Decentralized, the search takes steps that deliver to the performer
        only a minimal set of what lets it act as it does (as
        :func:`first_violations` does), then ends with the fewest deliveries
        that leave the state stuck: any path can be rearranged so that each
        delivery comes just before the step that needs it, or at the end,
        without changing where it leads. Whether some deliveries can make a
        state stuck is asked once, with all of them: a state that stays able to
        complete with all of them delivered stays able with fewer."""
        model = self.model
        peers = isinstance(model, PeerModel)
        below = _below(targets, peers)
        counter = itertools.count()
        model.reset()
        # (cost, tie, state key or None for a finished answer, path)
        heap: list[tuple[tuple[int, int], int, Hashable | None, tuple[Move, ...]]] = [
            ((0, 0), next(counter), model.key(), ())
        ]
        done: set[Hashable] = set()
        known: dict[tuple[str, int, Hashable], list[Move]] = {}
        while heap:
            cost, _, key, path = heapq.heappop(heap)
            if key is None:
                return path  # nothing cheaper is left in the heap
            if key in done:
                continue
            done.add(key)
            self.load(path)
            if model.violations():
                continue  # a conflict ends the enactment: never stuck
            if not peers:
                if not self.good_here():
                    return path
                for move in model.moves():
                    model.do(move)
                    following = model.key()
                    model.undo()
                    if following not in done and below(following):
                        entry = ((cost[0] + 1, cost[1]), next(counter), following, (*path, move))
                        heapq.heappush(heap, entry)
                continue
            assert isinstance(model, PeerModel)
            ending = _stuck_ending(self, model)
            if ending is not None:
                answer = (cost[0], cost[1] + len(ending))
                heapq.heappush(heap, (answer, next(counter), None, (*path, *ending)))
                continue  # any step more performs more: no better
            for role in model.protocol.roles:
                for gets, move in _minimal_steps(model, role, known):
                    reached, _ = _try(model, gets, move)
                    if reached in done or not below(reached):
                        continue
                    longer = (cost[0] + 1, cost[1] + len(gets))
                    heapq.heappush(heap, (longer, next(counter), reached, (*path, *gets, move)))
        raise AssertionError("a stuck deadlock was reachable")

def first_violations(
    search: Search, wanted: frozenset[Hashable]
) -> dict[Hashable, tuple[Move, ...]]:
    """Decentralized: for each kind of violation in ``wanted`` (what the
    exploration found), a shortest path (fewest performed actions, then fewest
    deliveries) to a state whose first unsafe step breaks it.

    Dijkstra's search over steps that each deliver to the performer only a
    minimal set of what it has not received that lets it perform the instance
    it performs. That loses no shortest path: had the performer received more,
    every later step could still be taken with it receiving the rest just
    before, and the check of each action against the union does not depend on
    who received what. A conflict ends a path; the search ends once every
    wanted kind has a path that no longer one can beat."""
    model = search.model
    assert isinstance(model, PeerModel)
    # A kind's path is kept when the unsafe step is generated: states after one
    # are told apart only by whether it happened, not by what it broke.
    found: dict[Hashable, tuple[tuple[int, int], tuple[Move, ...]]] = {}
    counter = itertools.count()
    model.reset()
    heap: list[tuple[tuple[int, int], int, Hashable, tuple[Move, ...]]] = [
        ((0, 0), next(counter), model.key(), ())
    ]
    done: set[Hashable] = set()
    known: dict[tuple[str, int, Hashable], list[Move]] = {}
    while heap:
        cost, _, key, path = heapq.heappop(heap)
        if wanted <= found.keys() and all(
            best <= (cost[0] + 1, cost[1]) for best, _ in found.values()
        ):
            break  # every later step costs at least that: none can be shorter
        if key in done:
            continue
        done.add(key)
        search.load(path)
        for role in model.protocol.roles:
            for gets, move in _minimal_steps(model, role, known):
                following, broken = _try(model, gets, move)
                longer = (cost[0] + 1, cost[1] + len(gets))
                if broken:
                    for name in broken:
                        if name not in found or longer < found[name][0]:
                            found[name] = (longer, (*path, *gets, move))
                    continue
                if following not in done:
                    entry = (longer, next(counter), following, (*path, *gets, move))
                    heapq.heappush(heap, entry)
    return {name: trace for name, (_, trace) in found.items()}


def _try(
    model: PeerModel, gets: Sequence[Move], move: Move
) -> tuple[Hashable, frozenset[tuple[str, ...]]]:
    """Where a step (deliveries, then a performed action) leads, and what it
    broke, if it was the first unsafe step; the model is left as it was."""
    for get in gets:
        model.do(get)
    model.do(move)
    found = model.key(), model.kinds
    for _ in range(len(gets) + 1):
        model.undo()
    return found


def _stuck_ending(search: Search, model: PeerModel) -> tuple[Move, ...] | None:
    """The fewest pending deliveries after which the current state cannot
    complete, or None when even all of them leave it able to."""
    pending = [
        move
        for role in model.protocol.roles
        for move in model.inflight(role)
        if model.relevant(move.instance.name, role)
    ]
    for move in pending:
        model.do(move)
    stuck = not search.good_here()
    for _ in pending:
        model.undo()
    if not stuck:
        return None
    for size in range(len(pending) + 1):
        for ending in itertools.combinations(pending, size):
            for move in ending:
                model.do(move)
            stuck = not search.good_here()
            for _ in ending:
                model.undo()
            if stuck:
                return ending
    raise AssertionError("all of them left it stuck")


def _minimal_steps(
    model: PeerModel, role: str, known: dict[tuple[str, int, Hashable], list[Move]]
) -> list[tuple[tuple[Move, ...], Move]]:
    """What ``role`` may perform next, each with a minimal set of deliveries.

    Before any unsafe step no role holds two values of one attribute, so what
    a role may perform depends only on which instances it holds (and, when
    key values are fresh, which values anyone used): ``known`` keeps that
    answer for the whole search."""
    inflight = [m for m in model.inflight(role) if model.relevant(m.instance.name, role)]
    held = model.masks[model.role_index[role]]
    used = model.used()
    minimal: dict[int, list[frozenset[int]]] = {}
    steps: list[tuple[tuple[Move, ...], Move]] = []
    for size in range(len(inflight) + 1):
        for gets in itertools.combinations(inflight, size):
            given = frozenset(g.ident for g in gets)
            mask = held
            for ident in given:
                mask |= 1 << ident
            moves = known.get((role, mask, used))
            if moves is None:
                for get in gets:
                    model.do(get)
                moves = known[(role, mask, used)] = model.performs(role)
                for _ in gets:
                    model.undo()
            for move in moves:
                sets = minimal.setdefault(move.ident, [])
                if not any(s <= given for s in sets):
                    sets.append(given)
                    steps.append((gets, move))
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
