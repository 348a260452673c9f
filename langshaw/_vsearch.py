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
of conflict, while skipping orders of independent moves, and with the model's
symmetry one state stands for every state that differs only in which key
values it uses: that is what makes the search fast. On the way it keeps one
path to each kind of deadlock it meets (``witnesses``), for when the search for
a shortest counterexample (``langshaw._vtraces``) runs out of time.

The exploration has two budgets, states and seconds; the clock is read once
every ``CHECK_EVERY`` steps (a reading costs about as much as a step), which is
also when a caller's ``progress`` hears how far it got.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from langshaw._vmodel import End, Move, SharedModel
from langshaw._vpeer import PeerModel

Model = SharedModel | PeerModel

# Steps (moves taken, states entered) between two readings of the clock: a few
# hundredths of a second on the slowest protocols measured (market, --sub-keys
# 4: about 0.4 ms a state), a negligible cost on the fastest.
CHECK_EVERY = 256


class StateLimit(Exception):
    """The exploration reached its bound on states, or on seconds."""


class Search:
    """The exploration of one model. ``deadline`` (a ``time.perf_counter()``
    reading, or None) is the budget in seconds, as ``max_states`` is in states;
    ``ran_out`` says which one stopped :meth:`explore` (``"states"`` or
    ``"seconds"``). ``progress`` is called at each reading of the clock with
    the states entered so far (the caller decides whether to say anything)."""

    def __init__(
        self,
        model: Model,
        *,
        reduce: bool,
        max_states: int,
        deadline: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.model = model
        self.reduce = reduce
        self.max_states = max_states
        self.deadline = deadline
        self.progress = progress
        self.ran_out: str | None = None
        self._steps = 0  # since the clock was last read
        self.good: dict[Hashable, bool] = {}  # some complete deadlock is reachable
        self.ends: dict[Hashable, End] = {}
        self.transitions = 0
        self.entered = 0  # states entered by explore(), held to max_states
        # The path the model was last brought to by load(); None when unknown.
        self._loaded: list[Move] | None = None
        # A path explore() took to a conflict of each kind, and to a stuck
        # deadlock: valid counterexamples, if not shortest ones.
        self.witnesses: dict[Hashable, tuple[Move, ...]] = {}
        self.stuck_witness: tuple[Move, ...] | None = None
        self._path: list[Move] = []

    def explore(self) -> bool:
        """Visit every state of the (reduced) graph; False if the bound cut it.

        Depth first, with an explicit stack: an enactment may be longer than
        Python's recursion limit."""
        self.model.reset()
        self._loaded = None
        self._path = []
        self.entered = 0
        self.ran_out = None
        self._steps = 0
        try:
            self._visit()
        except StateLimit:
            return False
        return True

    def _check(self) -> None:
        """Read the clock: past the deadline, stop; else tell ``progress``."""
        self._steps = 0
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.ran_out = "seconds"
            raise StateLimit
        if self.progress is not None:
            self.progress(self.entered)

    def _open(self, stack: list[list[Any]]) -> bool | None:
        """Enter the current state: its verdict if known or a deadlock, else
        None with a frame (key, moves, next move, good so far) pushed."""
        model = self.model
        self._steps += 1
        if self._steps >= CHECK_EVERY and (self.deadline is not None or self.progress):
            self._check()
        if model.kinds:
            # A path to each kind of conflict, kept when the kind is first met:
            # two orders of a race reach one state, each breaking its own rule.
            for kind in model.kinds:
                if kind not in self.witnesses:
                    self.witnesses[kind] = tuple(self._path)
        key = model.key()
        known = self.good.get(key)
        if known is not None:
            return known
        self.entered += 1
        if self.entered > self.max_states:
            self.ran_out = "states"
            raise StateLimit
        moves = model.reduced() if self.reduce else model.moves()
        if not moves:
            end = self.ends[key] = model.end()
            if not (end.bad or end.complete) and self.stuck_witness is None:
                self.stuck_witness = tuple(self._path)
            good = self.good[key] = end.complete or end.bad  # nothing past a conflict
            return good
        stack.append([key, moves, 0, model.complete()])
        return None

    def _visit(self) -> bool:
        model = self.model
        path = self._path
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
                path.append(moves[at])
                known = self._open(stack)
                if known is None:
                    continue  # went down into a new state
                model.undo()
                path.pop()
                frame[3] = good or known
                continue
            stack.pop()
            self.good[key] = good
            if not stack:
                return bool(good)
            model.undo()
            path.pop()
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
        """Bring the model to the end of ``path`` from the start, undoing only
        what it does not share with the path loaded last (the searches below
        load path after path, most with a long common prefix)."""
        model = self.model
        loaded = self._loaded
        if loaded is None:
            model.reset()
            loaded = []
        same = 0
        for a, b in zip(loaded, path, strict=False):
            if a is not b and a != b:
                break
            same += 1
        for _ in range(len(loaded) - same):
            model.undo()
        for move in path[same:]:
            model.do(move)
        self._loaded = list(path)

    def reset(self) -> None:
        self.model.reset()
        self._loaded = []

    def replay(self, path: Sequence[Move]) -> bool:
        """Take ``path`` from the start, each move only if it is enabled when
        its turn comes (nothing follows a conflict); False at the first that
        is not, leaving the model there."""
        self.reset()
        model = self.model
        for move in path:
            if move not in model.moves():
                return False
            model.do(move)
            self._loaded.append(move)  # type: ignore[union-attr]
        return True
