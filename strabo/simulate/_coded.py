"""A coded agent: a policy function driving one PeachAdapter.

The driver wakes whenever the agent's replica applies a finalized batch, offers
each enabled action to the policy (as a :class:`~strabo.simulate.move.Move`),
and attempts the first one the policy binds; then it looks again, since what
it did changed what is enabled. It never acts on a timer: a policy that waits
for a condition returns None and is asked again on the next batch.

When it finds nothing to do it records the sequence number it had seen
(``idle_at``). If every coded agent is idle at the same number and no LLM agent
is running, nobody will ever act again: the runner calls that a stall.

Policies are called through a :class:`PolicyCaller`: in a daemon thread, waited
for at most ``policy_timeout`` seconds, so a policy that never returns ends the
run with an error instead of hanging it (and its thread is abandoned). The
event loop waits meanwhile, so a policy never runs alongside the agents.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from peach import ActionRejected, BindError, ExecutorError, PeachAdapter
from strabo.simulate.move import Move, Occurrence, Policy

log = logging.getLogger("strabo.simulate")


class PolicyError(Exception):
    """A policy raised, returned something other than bindings or None, took
    too long, or its action could not be attempted."""


class _Call:
    __slots__ = ("done", "error", "move", "policy", "result")

    def __init__(self, policy: Policy, move: Move) -> None:
        self.policy = policy
        self.move = move
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


def _work(calls: queue.SimpleQueue[_Call | None]) -> None:
    while (call := calls.get()) is not None:
        try:
            call.result = call.policy(call.move)
        except BaseException as exc:  # handed to the caller, which decides
            call.error = exc
        finally:
            call.done.set()


class PolicyCaller:
    """Calls policies in a worker thread, waiting at most ``seconds`` each."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._calls: queue.SimpleQueue[_Call | None] | None = None

    def __call__(self, policy: Policy, move: Move) -> Any:
        if self._calls is None:
            self._calls = queue.SimpleQueue()
            threading.Thread(target=_work, args=(self._calls,), daemon=True,
                             name="strabo-simulate-policy").start()
        call = _Call(policy, move)
        self._calls.put(call)
        if not call.done.wait(self.seconds):
            self._calls = None  # the thread is stuck in the policy: abandoned with its queue
            raise TimeoutError(f"it did not return within {self.seconds:g} s "
                               "([stop] policy_timeout)")
        if call.error is not None:
            raise call.error
        return call.result

    def close(self) -> None:
        if self._calls is not None:
            self._calls.put(None)
            self._calls = None


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
        caller: PolicyCaller | None = None,
        expired: Callable[[], bool] = lambda: False,
    ) -> None:
        self.adapter = adapter
        self.policy = policy
        self.caller = caller or PolicyCaller(10.0)
        self.expired = expired  # True once the run is over (its timeout, say)
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
            if self.stopping or self.expired():
                return
            self.idle_at = None
            if await self._step():
                self.wake.set()
                # An attempt may finish without ever suspending (in process, with
                # nothing to wait for): yield, or an agent that always has
                # something to do would starve the loop, and with it the stop
                # conditions, the timeout and Ctrl-C.
                await asyncio.sleep(0)
            else:
                self.idle_at = self.last_seq
                self.on_idle()

    async def _step(self) -> bool:
        """Attempt the first enabled action the policy binds; False if none."""
        protocol = self.adapter.protocol
        histories: dict[tuple[Any, ...], list[Occurrence]] = {}
        for feasible in self.adapter.enabled():
            if self.stopping or self.expired():
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
                decision = self.caller(self.policy, move)
            except Exception as exc:
                raise PolicyError(
                    f"agent {self.adapter.name}: its policy failed on {feasible.name}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if decision is None:
                continue
            instance = self._bind(feasible, decision)
            try:
                await self.adapter.attempt([instance])
            except (ExecutorError, TypeError, ValueError) as exc:
                raise PolicyError(
                    f"agent {self.adapter.name}: {feasible.name} could not be attempted: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
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

    def _bind(self, feasible: Any, decision: Any) -> Any:
        """The instance the policy's bindings make, or a PolicyError saying why not."""
        who = f"agent {self.adapter.name}: its policy"
        if inspect.isawaitable(decision):
            close = getattr(decision, "close", None)
            if close is not None:
                close()  # never awaited: closed without a warning
            raise PolicyError(f"{who} returned an awaitable for {feasible.name}: a policy is "
                              "a plain function (def, not async def)")
        if not isinstance(decision, Mapping) or not all(isinstance(k, str) for k in decision):
            raise PolicyError(f"{who} returned {type(decision).__name__} for {feasible.name}: "
                              "a policy returns a dict of bindings (attribute names to "
                              "values), {} for none, or None to leave the action")
        try:
            return feasible.bind(**decision)
        except (BindError, TypeError, ValueError) as exc:
            raise PolicyError(f"{who} bound {feasible.name} wrongly: {exc}") from exc
