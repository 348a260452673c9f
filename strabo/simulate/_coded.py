"""A coded agent: a policy function driving one PeachAdapter.

The driver wakes whenever the agent's replica applies a finalized batch, offers
each enabled action to the policy (as a :class:`~strabo.simulate.move.Move`),
and attempts the first one the policy binds; then it looks again, since what
it did changed what is enabled. It never acts on a timer: a policy that waits
for a condition returns None and is asked again on the next batch.

When it finds nothing to do it records the sequence number it had seen
(``idle_at``). If every coded agent is idle at the same number and no LLM agent
is running, nobody will ever act again: the runner calls that a stall.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from peach import ActionRejected, BindError, PeachAdapter
from strabo.simulate.move import Move, Occurrence, Policy

log = logging.getLogger("strabo.simulate")


class PolicyError(Exception):
    """A policy raised, or returned bindings the action does not take."""


class CodedAgent:
    def __init__(
        self,
        adapter: PeachAdapter,
        policy: Policy,
        *,
        params: Mapping[str, Any],
        rounds: int | None,
        index: int,
        count: int,
        population: Mapping[str, Sequence[str]],
        on_idle: Callable[[], None],
    ) -> None:
        self.adapter = adapter
        self.policy = policy
        self.params = params
        self.rounds = rounds
        self.index = index
        self.count = count
        self.population = population
        self.on_idle = on_idle
        self.memory: dict[str, Any] = {}
        self.wake = asyncio.Event()
        self.stopping = False
        self.last_seq = 0
        self.idle_at: int | None = None
        self.acted = 0
        self.rejected = 0
        self._streak = 0  # rejections in a row: a policy stuck on a refused action
        adapter.listeners.append(self._heard)

    def _heard(self, batch: Any, newly: Any) -> None:
        self.last_seq = max(self.last_seq, batch.seq)
        self.wake.set()

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()

    async def run(self) -> None:
        """Decide until stopped; a PolicyError ends the run (the runner reports it)."""
        self.wake.set()
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.stopping:
                return
            self.idle_at = None
            if await self._step():
                self.wake.set()
            else:
                self.idle_at = self.last_seq
                self.on_idle()

    async def _step(self) -> bool:
        """Attempt the first enabled action the policy binds; False if none."""
        protocol = self.adapter.protocol
        histories: dict[tuple[Any, ...], list[Occurrence]] = {}
        for feasible in self.adapter.enabled():
            if self.stopping:
                return False
            keys = feasible.keys
            root = tuple(keys.get(k) for k in protocol.root_keys)
            if None in root:
                history: list[Occurrence] = []  # initiating: a new enactment
            else:
                if root not in histories:
                    histories[root] = [
                        Occurrence(seq, i.name, performer, dict(i.bindings))
                        for seq, i, performer in self.adapter.history(root)
                    ]
                history = histories[root]
            move = Move(
                agent=self.adapter.name, role=self.adapter.role, action=feasible,
                history=history, params=self.params, rounds=self.rounds, index=self.index,
                count=self.count, population=self.population, memory=self.memory,
            )
            try:
                decision = self.policy(move)
            except Exception as exc:
                raise PolicyError(
                    f"agent {self.adapter.name}: its policy failed on {feasible.name}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if decision is None:
                continue
            try:
                instance = feasible.bind(**decision)
            except BindError as exc:
                raise PolicyError(
                    f"agent {self.adapter.name}: its policy bound {feasible.name} "
                    f"wrongly: {exc}"
                ) from exc
            try:
                await self.adapter.attempt([instance])
            except ActionRejected as exc:
                # Our replica was behind the SyncServer (another agent acted
                # first): catch up and look again.
                self.rejected += 1
                self._streak += 1
                log.debug("%s: %s rejected: %s", self.adapter.name, feasible.name, exc)
                if self._streak > 20:
                    raise PolicyError(
                        f"agent {self.adapter.name}: {feasible.name} was rejected "
                        f"{self._streak} times in a row, last: {exc}"
                    ) from exc
                await self.adapter.sync()
                return True
            self.acted += 1
            self._streak = 0
            return True
        return False
