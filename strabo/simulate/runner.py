"""Run a scenario: an embedded SyncServer, its agents, until a stop condition.

Every agent gets its own executor (its own replica of the social state), in
process (``LocalExecutor``) or over HTTP on loopback (``SyncExecutor``, with
``http``). All adapters start before any agent decides, so the recorder (the
first agent's adapter, which sees every enactment) hears every batch.

The run ends at the first of:

* ``complete``: an enactment of the protocol completed (the coordinator closed it);
* ``rounds``: a round beyond the round limit opened, or every agent stopped
  acting after the limit was reached;
* ``budget``: ``stop.max_actions`` actions were finalized;
* ``stalled``: no agent will ever act again (every coded agent idle at the
  same point of the log, no LLM agent running) before the round limit;
* ``timeout``: ``stop.timeout`` seconds passed;
* ``error``: a policy failed (the detail says which and how);
* ``interrupted``: SIGINT or SIGTERM (Ctrl-C), with ``interruptible``.

However it ends, the agents are stopped and what was finalized is in the
result's trace, so the report is written whatever the ending.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from peach import Executor, LocalExecutor, PeachAdapter, SyncExecutor
from strabo.simulate._coded import CodedAgent, PolicyCaller, PolicyError
from strabo.simulate.move import Occurrence
from strabo.simulate.scenario import Scenario

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["ENDINGS", "SimulationResult", "simulate"]

log = logging.getLogger("strabo.simulate")

# How a run may end; the first three are the scenario's own stop conditions.
ENDINGS = ("complete", "rounds", "budget", "stalled", "timeout", "error", "interrupted")


@dataclass
class SimulationResult:
    """What a run did: how it ended (``reason``, one of ENDINGS, and ``detail``
    in words), the trace in log order, and counts."""

    scenario: Scenario
    reason: str
    detail: str
    trace: list[Occurrence]
    rounds_ended: int = 0
    seconds: float = 0.0
    rejected: int = 0
    agents: dict[str, str] = field(default_factory=dict)  # name(s) -> what plays
    llm_reports: dict[str, Any] = field(default_factory=dict)  # name -> AgentReport

    @property
    def ok(self) -> bool:
        """True when a stop condition of the scenario ended the run."""
        return self.reason in ("complete", "rounds", "budget")


class _Run:
    """The state of one run: what was heard, and when to stop."""

    def __init__(self, scenario: Scenario, progress: Progress | None) -> None:
        self.scenario = scenario
        self.progress = progress
        self.task: TaskID | None = None
        self.done = asyncio.Event()
        self.reason = ""
        self.detail = ""
        self.actions = 0
        self.rounds_seen: set[Any] = set()
        self.rounds_ended: set[Any] = set()
        self.coded: list[CodedAgent] = []
        self.llm_tasks: list[asyncio.Task[Any]] = []
        self.recorder: PeachAdapter | None = None
        self.deadline = float("inf")  # set when the agents start

    def finish(self, reason: str, detail: str) -> None:
        if not self.done.is_set():
            self.reason, self.detail = reason, detail
            self.done.set()

    def expired(self) -> bool:
        """Whether the run is over; ends it at its deadline. The agents ask before
        each step: with many agents, one turn of the event loop through all
        their steps can take longer than the timeout's own timer would wait."""
        if not self.done.is_set() and time.monotonic() >= self.deadline:
            self.finish("timeout", f"{self.scenario.timeout:g} seconds passed")
        return self.done.is_set()

    @property
    def limit(self) -> int | None:
        return self.scenario.rounds.limit if self.scenario.rounds else None

    def heard(self, batch: Any, newly: Any) -> None:
        """The recorder's listener: count actions and rounds, check the stop
        conditions (it runs synchronously after each batch is applied)."""
        assert self.recorder is not None
        spec = self.scenario.rounds
        for entry in batch.entries:
            self.actions += 1
            instance = entry.instance
            if spec is not None and spec.key in instance.bindings:
                value = instance[spec.key]
                self.rounds_seen.add(value)
                if instance.name == spec.end:
                    self.rounds_ended.add(value)
            if self.recorder.is_complete(instance.keys):
                self.finish("complete", f"the enactment completed ({instance.name} "
                                        f"by {entry.performer})")
        self._show()
        limit = self.limit
        if limit is not None and len(self.rounds_seen) > limit:
            self.finish("rounds", f"round {len(self.rounds_seen)} opened, beyond the "
                                  f"limit of {limit}")
        budget = self.scenario.max_actions
        if budget is not None and self.actions >= budget:
            self.finish("budget", f"{self.actions} actions, the budget of {budget}")

    def _show(self) -> None:
        if self.progress is None or self.task is None:
            return
        done = len(self.rounds_ended) if self.limit else self.actions
        self.progress.update(self.task, completed=done,
                             description=f"{self.scenario.name}: {self.actions} actions")

    def idle(self) -> None:
        """A coded agent found nothing to do: is everyone stuck for good?"""
        if any(not t.done() for t in self.llm_tasks):
            return
        marks = {agent.idle_at for agent in self.coded}
        if len(marks) > 1 or None in marks:
            return
        limit = self.limit
        if limit is not None and len(self.rounds_ended) >= limit:
            self.finish("rounds", f"{limit} rounds ended and no agent acts any more")
        else:
            self.finish("stalled", f"no agent can or will act after {self.actions} "
                                   "actions, and the enactment is not complete")


async def simulate(
    scenario: Scenario,
    *,
    progress: bool = False,
    http: bool | None = None,
    interruptible: bool = False,
) -> SimulationResult:
    """Run ``scenario`` to a stop condition; ``progress`` shows a progress bar
    (rounds ended, or actions) on stderr; ``http`` serves the SyncServer on a
    loopback port and connects the agents over HTTP (default: the scenario's
    ``server.http``); ``interruptible`` ends the run as ``interrupted`` on the
    first SIGINT or SIGTERM (a second one is not caught)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from strabo.simulate._llm import llm_agent
    from syncserver.server import SyncServer

    use_http = scenario.http if http is None else http
    population = scenario.population()
    roles = {name: [spec.role] for spec in scenario.agents for name in spec.names()}
    if not roles:
        raise ValueError(f"{scenario.name}: no agent to run")
    # Tokens of plain ASCII whatever the names (a header carries them over HTTP).
    tokens = {name: f"agent-{i}-token" for i, name in enumerate(roles)}
    acts_for = {name: {target: name for target in spec.acts_for}
                for spec in scenario.agents if spec.acts_for for name in spec.names()}
    server = SyncServer.embedded([scenario.protocol], roles, tokens=tokens,
                                 acts_for=acts_for, policy=scenario.policy)
    caller = PolicyCaller(scenario.policy_timeout)
    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("rounds" if scenario.rounds and scenario.rounds.limit else "actions"),
        TimeElapsedColumn(),
        console=Console(stderr=True), disable=not progress, transient=False,
    )
    run = _Run(scenario, bar)
    started = time.monotonic()
    adapters: list[PeachAdapter] = []
    agents: dict[str, str] = {}
    llm_agents: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        executor_for: Callable[[str], Executor]
        if use_http:
            from strabo import serve
            from syncserver import create_app, uvicorn_options

            app, options = create_app(server), uvicorn_options(server.config.limits)
            url = await stack.enter_async_context(serve(app, **options))
            executor_for = lambda name: SyncExecutor(url, tokens[name])  # noqa: E731
        else:
            await server.start()
            stack.push_async_callback(server.stop)
            executor_for = lambda name: LocalExecutor(server)  # noqa: E731
        for spec in scenario.agents:
            policy = spec.resolve() if spec.kind == "coded" else None
            names = spec.names()
            shown = names[0] if len(names) == 1 else f"{names[0]} ... {names[-1]}"
            agents[shown] = f"{spec.role}, " + (
                f"coded: {spec.policy}" if policy else
                "LLM agent" + (f" ({spec.model})" if spec.model else ""))
            for index, name in enumerate(names):
                adapter = PeachAdapter(name, scenario.protocol, spec.role, executor_for(name))
                adapters.append(adapter)
                if policy is not None:
                    run.coded.append(CodedAgent(
                        adapter, policy, params=spec.params,
                        rounds=run.limit, index=index, count=spec.count,
                        population=population, on_idle=run.idle, caller=caller,
                        expired=run.expired,
                    ))
                else:
                    llm_agents[name] = llm_agent(spec, adapter, scenario, population)
        run.recorder = adapters[0]
        adapters[0].listeners.append(run.heard)
        stack.callback(caller.close)
        for adapter in adapters:
            await adapter.start()
            stack.push_async_callback(adapter.stop)
        if interruptible:
            stack.enter_context(_signals(run))
        tasks: list[asyncio.Task[Any]] = []
        try:
            with bar:
                total = run.limit or scenario.max_actions
                run.task = bar.add_task(scenario.name, total=total)
                run.deadline = time.monotonic() + scenario.timeout
                tasks = [asyncio.create_task(agent.run()) for agent in run.coded]
                run.llm_tasks = [asyncio.create_task(a.run()) for a in llm_agents.values()]
                for name, task in zip(llm_agents, run.llm_tasks, strict=True):
                    task.add_done_callback(functools.partial(_llm_ended, run, name))
                for task in tasks:
                    task.add_done_callback(lambda t: _failed(run, t))
                try:
                    await asyncio.wait_for(run.done.wait(), scenario.timeout)
                except TimeoutError:
                    run.finish("timeout", f"{scenario.timeout:g} seconds passed")
                _stop_agents(run, llm_agents)
                results = await asyncio.gather(*tasks, *run.llm_tasks, return_exceptions=True)
                run._show()
        finally:  # cancelled (a second Ctrl-C) or failing: no agent outlives the run
            _stop_agents(run, llm_agents)
            for task in [*tasks, *run.llm_tasks]:
                task.cancel()
        reports = {
            name: result
            for name, result in zip(llm_agents, results[len(tasks):], strict=True)
            if not isinstance(result, BaseException)
        }
        await adapters[0].sync()
        trace = sorted(
            (
                Occurrence(seq, instance.name, performer, dict(instance.bindings))
                for root in adapters[0].enactments()
                for seq, instance, performer in adapters[0].history(root)
            ),
            key=lambda o: o.seq,
        )
    return SimulationResult(
        scenario=scenario,
        reason=run.reason,
        detail=run.detail,
        trace=trace,
        rounds_ended=len(run.rounds_ended),
        seconds=time.monotonic() - started,
        rejected=sum(agent.rejected for agent in run.coded),
        agents=agents,
        llm_reports=reports,
    )


def _stop_agents(run: _Run, llm_agents: dict[str, Any]) -> None:
    for agent in run.coded:
        agent.stop()
    for llm in llm_agents.values():
        llm.stop("the simulation is over")


@contextlib.contextmanager
def _signals(run: _Run) -> Any:
    """End the run on the first SIGINT or SIGTERM; then the handlers are removed,
    so a second one interrupts as usual."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def interrupted(sig: signal.Signals) -> None:
        run.finish("interrupted", f"interrupted by {sig.name}; the report holds what was "
                                  "finalized until then")
        for each in signals:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(each)

    installed = []
    for sig in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, interrupted, sig)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)


def _llm_ended(run: _Run, name: str, task: asyncio.Task[Any]) -> None:
    """An LLM agent's run ended: by an error (no API key, say), that ends the
    run; otherwise the others may now be all that is left."""
    if not task.cancelled() and task.exception() is not None:
        error = task.exception()
        run.finish("error", f"LLM agent {name}: {type(error).__name__}: {error}")
    else:
        run.idle()


def _failed(run: _Run, task: asyncio.Task[None]) -> None:
    """A coded agent's loop ended: by a policy error, that ends the run."""
    if task.cancelled():
        return
    error = task.exception()
    if isinstance(error, PolicyError):
        run.finish("error", str(error))
    elif error is not None:  # not the policy's doing: the detail names it, the debug log has more
        log.debug("coded agent failed", exc_info=error)
        run.finish("error", f"a coded agent failed: {type(error).__name__}: {error}")
