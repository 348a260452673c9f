"""Counterexamples: for each kind of conflict, and for a stuck state, a
shortest path from the start (fewest performed actions, then fewest
deliveries), searched without the reduction (:mod:`langshaw._vsearch` explores
with it first, and says what to look for).

A search for a shortest path may have to visit many more states than the
reduced exploration did, so each search is given a deadline: past it, the path
the exploration itself took is shortened until no single move can be dropped,
and the report says the traces are not known to be shortest.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from langshaw._vmodel import Move, SharedModel
from langshaw._vpeer import PeerModel
from langshaw._vsearch import Search
from langshaw.model import LangshawProtocol


def stuck_trace(
    search: Search, targets: list[Hashable], deadline: float | None = None
) -> tuple[tuple[Move, ...], bool]:
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
    complete with all of them delivered stays able with fewer.

    Past ``deadline`` (a ``time.perf_counter()`` reading) the search gives up
    and shortens the exploration's own path to a stuck deadlock instead; the
    flag returned says whether the path is a shortest one."""
    model = search.model
    peers = isinstance(model, PeerModel)
    below = _below([k for t in targets for k in model.images(t)], peers)
    search.reset()
    # (cost, tie, state key or None for a finished answer, path)
    heap: list[tuple[tuple[int, int], int, Hashable | None, tuple[Move, ...]]] = [
        ((0, 0), 0, model.key(), ())
    ]
    try:
        return _stuck_search(search, model, peers, below, heap, deadline), True
    except _Expired:
        assert search.stuck_witness is not None
        return shorten(search, search.stuck_witness, lambda: _stuck(search)), False


def _stuck_search(
    search: Search,
    model: SharedModel | PeerModel,
    peers: bool,
    below: Callable[[Hashable], bool],
    heap: list[tuple[tuple[int, int], int, Hashable | None, tuple[Move, ...]]],
    deadline: float | None,
) -> tuple[Move, ...]:
    counter = itertools.count(len(heap))
    done: set[Hashable] = set()
    known: dict[tuple[str, int, Hashable], list[Move]] = {}
    first = True
    while True:
        if not heap:
            raise AssertionError("a stuck deadlock was reachable")
        if not first:  # the start is looked at even out of time: it may be the answer
            _in_time(deadline)
        first = False
        cost, _, key, path = heapq.heappop(heap)
        if key is None:
            return path  # nothing cheaper is left in the heap
        if key in done:
            continue
        done.add(key)
        search.load(path)
        if model.violations():
            continue  # a conflict ends the enactment: never stuck
        if not peers:
            if not search.good_here():
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
        ending = _stuck_ending(search, model, deadline)
        if ending is not None:
            answer = (cost[0], cost[1] + len(ending))
            heapq.heappush(heap, (answer, next(counter), None, (*path, *ending)))
            continue  # any step more performs more: no better
        for role in model.protocol.roles:
            for gets, move in _minimal_steps(model, role, known, deadline):
                reached, _ = _try(model, gets, move)
                if reached in done or not below(reached):
                    continue
                longer = (cost[0] + 1, cost[1] + len(gets))
                heapq.heappush(heap, (longer, next(counter), reached, (*path, *gets, move)))


def first_violations(
    search: Search, wanted: frozenset[tuple[str, ...]], deadline: float | None = None
) -> tuple[dict[Hashable, tuple[Move, ...]], bool]:
    """Decentralized: for each kind of violation in ``wanted`` (what the
    exploration found), a shortest path (fewest performed actions, then fewest
    deliveries) to a state whose first unsafe step breaks it.

    An A* search over steps that each deliver to the performer only a minimal
    set of what it has not received that lets it perform the instance it
    performs. That loses no shortest path: had the performer received more,
    every later step could still be taken with it receiving the rest just
    before, and the check of each action against the union does not depend on
    who received what. A conflict ends a path. Each state is ranked by its cost
    plus a lower bound on the performs still needed (``_needed``); the search
    ends once every wanted kind has a path that no state left can beat.

    Past ``deadline`` it gives up: each kind gets the shorter of the best path
    found so far and the exploration's own path to it, shortened; the flag
    returned says whether every path is a shortest one."""
    model = search.model
    assert isinstance(model, PeerModel)
    needed = _needed(model.protocol, wanted)
    # A kind's path is kept when the unsafe step is generated: states after one
    # are told apart only by whether it happened, not by what it broke.
    found: dict[Hashable, tuple[tuple[int, int], tuple[Move, ...]]] = {}
    search.reset()
    # (rank, tie, cost, state key, path): rank is the cost with the bound added
    heap: list[tuple[tuple[int, int], int, tuple[int, int], Hashable, tuple[Move, ...]]] = [
        ((needed(set()), 0), 0, (0, 0), model.key(), ())
    ]
    try:
        _conflict_search(search, model, wanted, needed, found, heap, deadline)
    except _Expired:
        return _fallback(search, wanted, found), False
    return {name: trace for name, (_, trace) in found.items()}, True


def _conflict_search(
    search: Search,
    model: PeerModel,
    wanted: frozenset[tuple[str, ...]],
    needed: Callable[[set[str]], int],
    found: dict[Hashable, tuple[tuple[int, int], tuple[Move, ...]]],
    heap: list[tuple[tuple[int, int], int, tuple[int, int], Hashable, tuple[Move, ...]]],
    deadline: float | None,
) -> None:
    """first_violations' search; it fills ``found``."""
    counter = itertools.count(len(heap))
    done: set[Hashable] = set()
    known: dict[tuple[str, int, Hashable], list[Move]] = {}
    while heap:
        _in_time(deadline)
        rank, _, cost, key, path = heapq.heappop(heap)
        if wanted <= found.keys() and all(best <= rank for best, _ in found.values()):
            break  # every path from here on costs at least that: none can be shorter
        if key in done:
            continue
        done.add(key)
        search.load(path)
        occurred = {name for name, _ in model.occurred}
        for role in model.protocol.roles:
            for gets, move in _minimal_steps(model, role, known, deadline):
                longer = (cost[0] + 1, cost[1] + len(gets))
                following, broken = _try(model, gets, move)
                if broken:
                    for name in broken:
                        if name not in found or longer < found[name][0]:
                            found[name] = (longer, (*path, *gets, move))
                    continue
                if following in done:
                    continue
                entry = (
                    (longer[0] + needed(occurred | {move.instance.name}), longer[1]),
                    next(counter),
                    longer,
                    following,
                    (*path, *gets, move),
                )
                heapq.heappush(heap, entry)


def _fallback(
    search: Search,
    wanted: frozenset[tuple[str, ...]],
    found: dict[Hashable, tuple[tuple[int, int], tuple[Move, ...]]],
) -> dict[Hashable, tuple[Move, ...]]:
    paths: dict[Hashable, tuple[Move, ...]] = {}
    for name in wanted:
        best = found.get(name)
        witness = search.witnesses.get(name)
        if witness is not None:
            witness = shorten(search, witness, functools.partial(_breaks, search, name))
            if best is None or _cost(witness) < best[0]:
                best = (_cost(witness), witness)
        if best is not None:
            paths[name] = best[1]
    return paths


def _cost(path: Sequence[Move]) -> tuple[int, int]:
    performs = sum(move.kind == "do" for move in path)
    return performs, len(path) - performs


def _breaks(search: Search, name: Hashable) -> bool:
    model = search.model
    assert isinstance(model, PeerModel)
    return name in model.kinds


def _stuck(search: Search) -> bool:
    return not search.model.violations() and not search.good_here()


class _Expired(Exception):
    """A search ran past its deadline (raised from within a step, too: one step
    may try many sets of deliveries)."""


def _in_time(deadline: float | None) -> None:
    if deadline is not None and time.perf_counter() > deadline:
        raise _Expired


def shorten(
    search: Search, path: Sequence[Move], holds: Callable[[], bool]
) -> tuple[Move, ...]:
    """``path`` with moves left out, one at a time, for as long as what is left
    can still be taken and still ends where ``holds()`` (a counterexample
    where no single move can be dropped, if not a shortest one). The model is
    left at the end of the path returned."""
    kept = list(path)
    shorter = True
    while shorter:
        shorter = False
        for i in reversed(range(len(kept))):
            trial = kept[:i] + kept[i + 1 :]
            if search.replay(trial) and holds():
                kept = trial
                shorter = True
    search.replay(kept)
    return tuple(kept)


def _needed(
    protocol: LangshawProtocol, wanted: frozenset[tuple[str, ...]]
) -> Callable[[set[str]], int]:
    """A lower bound on the performs a path from the model's state needs before
    its first unsafe step breaks some wanted kind (that step included).

    That step performs an action the kind names, and a nono or nogo needs both
    of its actions performed; an action is performed only once every action it
    depends on, transitively, was performed somewhere. So whatever of those
    actions has not occurred in any scope must still be performed, and the
    unsafe step is a perform itself. One perform changes the count by at most
    one, so the bound is consistent: A* closes each state at its least cost."""
    actions = protocol.actions

    def before(name: str) -> set[str]:
        found = {name}
        stack = [name]
        while stack:
            for d in actions[stack.pop()].dependencies:
                if d not in found:
                    found.add(d)
                    stack.append(d)
        return found

    sets = []
    for kind in wanted:
        rule, names = kind[0], list(kind[1:])
        if rule not in ("nono", "nogo"):
            names = names[:1]
        sets.append(frozenset().union(*(before(n) for n in names if n in actions)))

    def needed(occurred: set[str]) -> int:
        """The bound, given the actions that occurred (in any scope)."""
        return max(1, min((len(s - occurred) for s in sets), default=1))

    return needed


def _try(
    model: PeerModel, gets: Sequence[Move], move: Move
) -> tuple[Hashable, frozenset[tuple[str, ...]]]:
    """Where a step (deliveries, then a performed action) leads, and what it
    broke, if it was the first unsafe step; the model is left as it was."""
    assert not model.first, "no step follows a conflict"
    return model.after(gets, move)


def _stuck_ending(
    search: Search, model: PeerModel, deadline: float | None = None
) -> tuple[Move, ...] | None:
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
            _in_time(deadline)
            for move in ending:
                model.do(move)
            stuck = not search.good_here()
            for _ in ending:
                model.undo()
            if stuck:
                return ending
    raise AssertionError("all of them left it stuck")


def _minimal_steps(
    model: PeerModel,
    role: str,
    known: dict[tuple[str, int, Hashable], list[Move]],
    deadline: float | None = None,
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
    tried = 0
    for size in range(len(inflight) + 1):
        for gets in itertools.combinations(inflight, size):
            tried += 1
            if tried % 64 == 0:  # 2^n sets of deliveries: a step can take long
                _in_time(deadline)
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
