"""LLMAgent: an agent whose decisions a language model makes, within the protocols.

The adapters enforce the protocols; the model only chooses among the enabled
actions and binds their attributes, through native tool use. Decisions are
taken one at a time, each with a fresh prompt, when something calls for one:
the start, an action newly enabled, an awaited action, an external event.
Events arriving during a decision are folded into the next one. The model is
reached through one provider-neutral interface (:mod:`peach.llm._model`), so
none of this depends on whose model it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from peach._mandate import Approver
from peach.adapter import PeachAdapter
from peach.llm._acting import _Acting
from peach.llm._base_url import check_base_url
from peach.llm._messages import (
    _results_message,
    _scrub_message,
    _shown_message,
    _shown_turn,
    _Stop,
)
from peach.llm._model import Message, Model, ModelTurn, ToolSpec
from peach.llm._offers import _Offering
from peach.llm._providers import DEFAULT_MODEL, connect, default_model, provider_of
from peach.llm.prompting import (
    BUILTIN_TOOLS,
    DISMISS_TOOL,
    Event,
    Offer,
    Redactor,
    system_prompt,
    tool_base,
    user_prompt,
)
from peach.llm.report import AgentReport, DecisionRecord, LLMError
from peach.llm.tools import Budget, Hooks, Tool
from syncserver.mandate import Mandate, read_mandate

log = logging.getLogger("strabo.llm")

Fallback = Callable[["LLMAgent", str], Awaitable[Any]]


class LLMAgent(_Offering, _Acting):
    """One agent, one goal, any number of adapters (roles in one or more protocols).

    ``provider`` is ``"anthropic"`` (the Messages API) or ``"openai"`` (any
    OpenAI-compatible Chat Completions endpoint: OpenAI, Ollama, vLLM, llama.cpp's
    server, at ``base_url``). ``client`` is an ``anthropic.AsyncAnthropic`` or an
    ``openai.AsyncOpenAI``, and names the provider by itself; without one it is
    made from ``ANTHROPIC_API_KEY`` or ``OPENAI_API_KEY`` (not needed with a
    ``base_url``), with ``api_retries`` retries of 429, 5xx and timeouts.
    ``model`` defaults to :data:`DEFAULT_MODEL` for Anthropic and must be given
    for OpenAI-compatible endpoints. ``tools`` are local :class:`Tool` s;
    ``hooks`` a :class:`Hooks`; ``fallback`` a coroutine ``fallback(agent, reason)``
    used when the model cannot be (it may call :meth:`perform`); ``budget`` bounds
    the run. ``secrets`` names attributes whose values the model never sees.
    ``mandate`` (a :class:`~peach.Mandate`, its table, or a file) is what the
    principal allows beyond the protocols (how often, how much, how many
    enactments), enforced by every adapter; ``approve(agent, instances)`` is
    asked before an action the mandate reserves for a human, and given
    ``approve_timeout`` seconds to answer (the adapters' own, 300 s, if None).
    """

    def __init__(
        self,
        adapters: Sequence[PeachAdapter],
        goal: str,
        client: Any = None,
        model: str | None = None,
        tools: Iterable[Tool] = (),
        hooks: Hooks | None = None,
        fallback: Fallback | None = None,
        budget: Budget | None = None,
        *,
        name: str | None = None,
        secrets: Iterable[str] = (),
        mandate: Mandate | Mapping[str, Any] | str | Path | None = None,
        approve: Approver | None = None,
        approve_timeout: float | None = None,
        provider: str | None = None,
        base_url: str | None = None,
        api_retries: int = 2,
        confirm_done: bool = True,
        max_retries: int = 2,
        max_rounds: int = 6,
        max_tools: int = 60,
        max_tokens: int = 1024,
        timeout: float = 60.0,
        transcript: str | Path | None = None,
        prompt_limit: int = 12_000,
        success: str | Iterable[str] | None = None,
    ) -> None:
        self.adapters = list(adapters)
        if not self.adapters:
            raise ValueError("an LLMAgent needs at least one adapter")
        if not goal or not goal.strip():
            # Roles adopted with a RoleSpec carry their goals: together they are
            # the agent's.
            goal = "\n".join(
                f"As {a.role} in {a.protocol.name}: {a.spec.goal}"
                for a in self.adapters
                if a.spec is not None and a.spec.goal
            )
        if not goal:
            raise ValueError("an LLMAgent needs a goal (or roles adopted with goals)")
        self.goal = goal
        self.name = name or self.adapters[0].name
        self.provider = provider_of(client, provider)
        self.model = default_model(self.provider, model)
        self.client = client
        if base_url is not None:
            check_base_url(base_url, "base_url")
        elif client is None:  # the SDK would read it, and fail only at the first request
            variable = "OPENAI_BASE_URL" if self.provider == "openai" else "ANTHROPIC_BASE_URL"
            if os.environ.get(variable):
                check_base_url(os.environ[variable], variable)
        self.base_url = base_url
        self.api_retries = api_retries
        self._model: Model | None = None
        # Set once the model failed in a way no retry mends (a wrong key, model or
        # URL): later decisions go to the fallback without asking it again.
        self._model_down: str | None = None
        self.tools = {t.name: t for t in tools}
        reserved = {t["name"] for t in BUILTIN_TOOLS} | {DISMISS_TOOL["name"]}
        clash = reserved & set(self.tools)
        if clash:
            raise ValueError(f"local tool names {sorted(map(str, clash))} are reserved")
        several = len({a.protocol.name for a in self.adapters}) > 1
        bases = {tool_base(a, name, several) for a in self.adapters for name in a.protocol.actions}
        shadowed = sorted(
            t for t in self.tools if t in bases or (t.rpartition("_")[0] in bases
            and t.rpartition("_")[2].isdigit())
        )
        if shadowed:
            raise ValueError(
                f"local tool names {shadowed} are those of protocol actions offered as tools: "
                "rename them (an MCPTools prefix does)"
            )
        self.hooks = hooks or Hooks()
        known = {a for adapter in self.adapters for a in adapter.protocol.actions}
        known |= {t.name for t in self.tools.values() if t.runs_hooks}  # MCP tools
        unknown = self.hooks.actions - known
        if unknown:
            raise ValueError(f"hooks name actions no protocol of this agent has: {sorted(unknown)}")
        self.fallback = fallback
        self.mandate = _mandate_of(mandate, self.adapters)
        for adapter in self.adapters:  # enforced by the adapters, not by the prompt
            if self.mandate is not None:
                adapter.mandate = self.mandate
            if approve is not None:
                adapter.approve = approve
            if approve_timeout is not None:
                adapter.approve_timeout = approve_timeout
        self.budget = budget or Budget()
        self.confirm_done = confirm_done
        self.max_retries = max_retries
        self.max_rounds = max_rounds
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.transcript_path = Path(transcript) if transcript else None
        if self.transcript_path is not None and not self.transcript_path.parent.is_dir():
            raise ValueError(
                f"transcript {self.transcript_path}: the folder "
                f"{self.transcript_path.parent} does not exist"
            )
        self.max_tools = max_tools
        self.prompt_limit = prompt_limit
        provided = {a for action in self.hooks.actions for a in self.hooks.provided(action)}
        self.redactor = Redactor({*secrets, *provided})
        self._system = system_prompt(self.name, goal, self.adapters, list(self.tools.values()))
        self._several = len({a.protocol.name for a in self.adapters}) > 1
        self._names = {a.name for a in self.adapters}
        self._events: list[Event] = []
        self._event_count = 0
        self._notes: dict[str, Any] = {}
        self._outcomes: list[str] = []
        self._waiting_for: set[str] = set()
        self._reasons: list[str] = []
        self._own_reasons: list[str] = []  # enabled by the agent's own actions, this decision
        self._deciding = False
        self._waited = False
        self._task: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()
        self._labels: dict[tuple[str, tuple[Any, ...]], str] = {}
        self._mine: set[tuple[int, tuple[Any, ...]]] = set()  # (adapter index, root)
        self._finished_asked = False
        self._stop: _Stop | None = None
        self._started_at = 0.0
        self._decision = 0
        self._transcript: list[dict[str, Any]] = [
            {"system": self._system, "provider": self.provider, "model": self.model}
        ]
        self.report = AgentReport("running", "")
        self.success = self.report.expect(success, self.adapters)  # the outcomes that count

    # Outside world ----------------------------------------------------------------

    async def inject(self, event: Mapping[str, Any] | str) -> str:
        """Add an external event (a dict or text); returns its id. Safe from any task."""
        self._event_count += 1
        item = Event(f"ev{self._event_count}", event)
        self._events.append(item)
        self._trigger(f"external event {item.id}")
        return item.id

    def stop(self, reason: str = "stopped") -> None:
        """Ask the run to end after the current decision."""
        self._stop = _Stop("stopped", reason)
        if self._task is not None and not self._task.done():
            self._task.cancel()  # a decision in progress ends now; what it did stands
        self._wake.set()

    # The run --------------------------------------------------------------------------

    async def run(self) -> AgentReport:
        """Start the adapters (those not running), decide until the goal is reached,
        the protocols' enactments are complete, or the budget runs out."""
        self._model = connect(
            self.provider, self.client, self.model, base_url=self.base_url,
            timeout=self.timeout, retries=self.api_retries,
        )
        self.client = self._model.client
        self._started_at = time.monotonic()
        started: list[PeachAdapter] = []
        listeners = []
        try:
            for index, adapter in enumerate(self.adapters):
                listener = self._listener(index)
                adapter.listeners.append(listener)
                listeners.append((adapter, listener))
                if not adapter.running:
                    await adapter.start()
                    started.append(adapter)
                for root in adapter.enactments():  # a restarted agent resumes its enactments
                    if any(who in self._names for _, _, who in adapter.history(root)):
                        self._mine.add((index, root))
            self._trigger("start")
            await self._loop()
        except _Stop as stop:
            self._end(stop.status, stop.reason)
        except LLMError as exc:
            self._end("error", str(exc))
        finally:
            for adapter, listener in listeners:
                if listener in adapter.listeners:
                    adapter.listeners.remove(listener)
            for adapter in self.adapters if self.success else ():
                if adapter.running:  # the log as it is now (a peer's last action, say)
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(adapter.sync(), 5.0)
            for adapter in started:
                await adapter.stop()
            # Judged on the log, not on what the model said (peach/llm/_outcomes.py).
            self.report.judge(self.adapters, self._mine, self._label, self.redactor.bindings)
            self.report.seconds = time.monotonic() - self._started_at
            await asyncio.to_thread(self._write_transcript)
        log.info("%s: %s", self.name, self.report)
        return self.report

    async def _loop(self) -> None:
        while True:
            remaining = self.budget.max_seconds - (time.monotonic() - self._started_at)
            if remaining <= 0:
                raise _Stop("budget", f"wall time budget of {self.budget.max_seconds:g} s used up")
            try:
                await asyncio.wait_for(self._wake.wait(), remaining)
            except TimeoutError:
                continue
            self._wake.clear()
            if self._stop is not None:
                raise self._stop
            reasons, self._reasons = self._reasons, []
            finishing = self._all_complete() and not self._events
            if finishing and (self._finished_asked or not self.confirm_done):
                raise _Stop("complete", "every enactment the agent is in is complete")
            if not reasons and not finishing:
                continue  # woken by a completion that leaves work: nothing new to decide
            if finishing:
                self._finished_asked = True
                reasons = [
                    *reasons,
                    "every enactment you are in is complete: call done if your "
                    "goal is achieved, or start what remains",
                ]
            self._deciding, self._waited, self._own_reasons = True, False, []
            acted = self.report.actions
            try:
                await self._bounded(self._decide(reasons, force=finishing or "start" in reasons))
            finally:
                self._deciding = False
            if finishing and self.report.actions > acted:
                self._finished_asked = False  # it started more: ask again when that ends
            if not self._waited:  # what the agent's own actions made possible is news
                for reason in self._own_reasons:
                    self._trigger(reason)
            if self._stop is not None:
                raise self._stop
            if self._all_complete() and not self._events:
                self._wake.set()  # the next turn of the loop finishes

    async def _bounded(self, decision: Awaitable[None]) -> None:
        """Run one decision within the wall-time budget; ``stop()`` cancels it."""
        remaining = self.budget.max_seconds - (time.monotonic() - self._started_at)
        task = self._task = asyncio.ensure_future(decision)
        try:
            finished, _ = await asyncio.wait({task}, timeout=max(remaining, 0.0))
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self._task = None
        if not finished:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise _Stop(
                "budget",
                f"wall time budget of {self.budget.max_seconds:g} s used up "
                f"(during decision {self._decision})",
            )
        if task.cancelled():
            raise self._stop or _Stop("stopped", "the decision was cancelled")
        task.result()

    def _end(self, status: str, reason: str) -> None:
        self.report.status = status
        self.report.reason = reason

    # Triggers -------------------------------------------------------------------------

    def _trigger(self, reason: str) -> None:
        self._reasons.append(reason)
        self._wake.set()

    def _listener(self, index: int) -> Callable[[Any, list[tuple[Any, ...]]], None]:
        adapter = self.adapters[index]
        roots = adapter.protocol.root_keys

        def on_batch(batch: Any, newly: list[tuple[Any, ...]]) -> None:
            own = all(entry.performer in self._names for entry in batch.entries)
            for entry in batch.entries:
                # The agent's own code's values of secret attributes are secrets; the
                # model's and the counterparts' are not (peach.llm._redact).
                self.redactor.bound(entry.instance.bindings, own=entry.performer in self._names)
                root = tuple(entry.instance.bindings[k] for k in roots)
                if entry.performer in self._names:
                    self._mine.add((index, root))
                elif entry.instance.name in self._waiting_for:
                    self._waiting_for.discard(entry.instance.name)  # woken once per wait
                    self._trigger(
                        f"{entry.instance.name} by {entry.performer} in "
                        f"{self._label(adapter, root)}"
                    )
            for root, feasible in newly:
                if root == "initiating":
                    continue
                reason = f"{feasible.name} is now possible in {self._label(adapter, root)}"
                if own and self._deciding:
                    self._own_reasons.append(reason)  # kept unless the model said wait
                else:
                    self._trigger(reason)
            if any(adapter.is_complete(root) for i, root in self._mine if i == index):
                self._wake.set()

        return on_batch

    def _label(self, adapter: PeachAdapter, root: tuple[Any, ...]) -> str:
        key = (adapter.protocol.name, root)
        if key not in self._labels:
            self._labels[key] = f"E{len(self._labels) + 1}"
        return self._labels[key]

    def _all_complete(self) -> bool:
        return bool(self._mine) and all(
            self.adapters[i].is_complete(root) for i, root in self._mine
        )

    # Deciding ---------------------------------------------------------------------------

    def prompt(self, reasons: Sequence[str] = (), offers: Sequence[Offer] | None = None) -> str:
        """The user prompt the next decision would get now (secrets replaced)."""
        offers = self.offers() if offers is None else offers
        text = user_prompt(
            number=self._decision or 1,
            reasons=reasons,
            enactments=self._enactments(offers),
            offers=offers,
            events=self._events,
            notes=self._notes,
            outcomes=self._outcomes,
            redactor=self.redactor,
            me=self._names,
            limit=self.prompt_limit,
        )
        return self.redactor.text(text)

    async def _decide(self, reasons: list[str], force: bool = False) -> None:
        offers = self.offers()
        # No call when there is nothing to decide: nothing enabled (initiating
        # actions count only at the start and at the end) and no pending event.
        idle = all(o.label == "new" for o in offers) if not force else not offers
        if idle and not self._events:
            log.debug("%s: nothing to decide (%s)", self.name, "; ".join(reasons))
            return
        self._decision += 1
        log.info("%s: decision %d (llm): %s", self.name, self._decision, "; ".join(reasons))
        record = DecisionRecord(self._decision, "llm", list(reasons))
        self.report.decisions.append(record)
        by_tool = {o.tool: o for o in offers}
        tools: list[ToolSpec] = [o.spec(self.redactor, bool(self._events)) for o in offers]
        tools += BUILTIN_TOOLS + ([DISMISS_TOOL] if self._events else [])
        tools += [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in self.tools.values()
        ]
        prompt = self.prompt(reasons, offers)
        self._outcomes = []
        messages = [Message("user", text=prompt)]
        entry: dict[str, Any] = {"decision": self._decision, "reasons": reasons, "rounds": []}
        self._transcript.append(entry)
        acted = self.report.actions
        if self._model_down is not None:
            await self._without_model(record, self._model_down, acted)
            return
        failures = 0
        for _ in range(self.max_rounds):
            try:
                turn = await self._call(messages, tools, entry)
            except _Stop:
                raise
            except Exception as exc:  # the API failed (after the SDK's own retries)
                self.report.failed_calls += 1
                reason = self.redactor.text(f"the model could not be reached: {exc}")
                if getattr(exc, "permanent", False):
                    self._model_down = reason
                await self._without_model(record, reason, acted)
                return
            record.calls += 1
            results, invalid, settled = await self._run_tools(turn.tool_calls, by_tool, record)
            entry["rounds"][-1]["results"] = results
            if settled:
                return
            if invalid or any(r["error"] for r in results):
                failures += 1
            if failures > self.max_retries:
                reason = (
                    f"the model's tool calls were still invalid or refused after {failures} tries"
                )
                await self._without_model(record, reason, acted)
                return
            # Feed the results back (a local tool's answer, an error, a refusal) and go on.
            # An empty answer is not echoed: the APIs refuse an empty assistant turn.
            if turn.text or turn.tool_calls:
                messages.append(turn.message())
            messages.append(_results_message(results))
        reason = f"the model did not settle the decision in {self.max_rounds} rounds"
        await self._without_model(record, reason, acted)

    async def _call(
        self, messages: list[Message], tools: list[ToolSpec], entry: dict[str, Any]
    ) -> ModelTurn:
        self._check_budget()
        if self._model is None:
            raise RuntimeError("the model is connected by run()")
        # Last line of defence: whatever was assembled, no secret leaves the process.
        messages = [_scrub_message(m, self.redactor) for m in messages]
        tools = [{**t, "description": self.redactor.text(t["description"])} for t in tools]
        system = self.redactor.text(self._system)
        # Stop before a call that could cross the token budget, not after it.
        max_tokens = self._check_budget(Budget.estimate_tokens(system, messages, tools))
        entry["rounds"].append(
            {"prompt": _shown_message(messages[-1]), "tools": [t["name"] for t in tools]}
        )
        remaining = self.budget.max_seconds - (time.monotonic() - self._started_at)
        with self.redactor.scrubbing_logs():  # the SDKs' DEBUG logs hold the requests
            turn = await self._model.complete(
                system,
                messages,
                tools,
                max_tokens=max_tokens,
                request_timeout=max(min(self.timeout, remaining), 1.0),
            )
        self.report.llm_calls += 1
        self.report.input_tokens += turn.input_tokens
        self.report.output_tokens += turn.output_tokens
        entry["rounds"][-1]["response"] = _shown_turn(turn, self.redactor)
        return turn

    def _check_budget(self, prompt: int | None = None) -> int:
        """Stop the run if a budget is used up; with the ``prompt``'s estimated
        size in tokens, also if the next call could cross the token budget (its
        prompt and a full answer). Returns the answer's ``max_tokens``: less than
        the agent's when only a shorter answer fits."""
        budget, report = self.budget, self.report
        if report.llm_calls + report.failed_calls >= budget.max_calls:
            raise _Stop("budget", f"LLM call budget of {budget.max_calls} used up")
        used = report.input_tokens + report.output_tokens
        if used >= budget.max_tokens:
            raise _Stop("budget", f"token budget of {budget.max_tokens} used up")
        if time.monotonic() - self._started_at >= budget.max_seconds:
            raise _Stop("budget", f"wall time budget of {budget.max_seconds:g} s used up")
        if prompt is None:
            return self.max_tokens
        left = budget.max_tokens - used
        answer = min(self.max_tokens, left - prompt)
        least = min(self.max_tokens, Budget.MIN_ANSWER)
        if answer < least:
            raise _Stop(
                "budget",
                f"token budget of {budget.max_tokens}: the next call is estimated at "
                f"{prompt + least} tokens ({prompt} of prompt, {least} of answer at least), "
                f"more than the {left} left",
            )
        return answer

    # Transcript ---------------------------------------------------------------------------

    def _write_transcript(self) -> None:
        if self.transcript_path is None:
            return
        self._transcript.append({"report": str(self.report)})
        # Secrets learned late are scrubbed from early entries too.
        data = self.redactor.scrub(self._transcript)
        try:
            self.transcript_path.write_text(json.dumps(data, indent=2, default=str))
        except OSError as exc:
            log.error("%s: cannot write the transcript %s: %s", self.name, self.transcript_path,
                      exc.strerror or exc)


__all__ = ["DEFAULT_MODEL", "LLMAgent"]


def _mandate_of(
    given: Mandate | Mapping[str, Any] | str | Path | None, adapters: Sequence[PeachAdapter]
) -> Mandate | None:
    """A mandate as given: checked against the agent's protocols, or None for none."""
    if given is None or isinstance(given, Mandate):
        return given or None
    protocols = list({a.protocol.name: a.protocol for a in adapters}.values())
    roles: dict[str, set[str]] = {}
    for adapter in adapters:
        roles.setdefault(adapter.protocol.name, set()).add(adapter.role)
    if isinstance(given, Mapping):
        problems: list[str] = []
        found = Mandate.parse(
            given, protocols, "mandate",
            lambda at, m: problems.append(f"{'.'.join(at)}: {m}"), roles,
        )
        if problems:
            raise ValueError("the mandate is wrong: " + "; ".join(problems))
        return found or None
    return read_mandate(given, protocols, roles) or None
