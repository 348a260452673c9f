"""The agent's hands: what happens when the model calls a tool.

A call is either an offered action (bound, then attempted through the adapter,
whose refusal goes back to the model), or one of the built-in tools (wait, note
to memory, dismiss an offer), or a local tool. Kept apart from
:mod:`peach.llm.agent`, which decides *when* to ask the model, so each stays one
concept.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from langshaw import json_equal
from peach.adapter import PeachAdapter
from peach.errors import ActionRejected, BindError, ExecutorError
from peach.feasible import FeasibleAction
from peach.llm._messages import _InvalidCall, _Stop, hide
from peach.llm._model import ToolCall
from peach.llm.prompting import (
    Event,
    Offer,
    Redactor,
    compact,
    describe_instance,
)
from peach.llm.report import AgentReport, DecisionRecord
from peach.llm.tools import Hooks, Tool

log = logging.getLogger("strabo.llm")


class _Acting:
    """Tool calls, mixed into :class:`peach.llm.LLMAgent` (which sets these)."""

    name: str
    adapters: list[PeachAdapter]
    hooks: Hooks
    tools: dict[str, Tool]
    redactor: Redactor
    report: AgentReport
    fallback: Any
    _events: list[Event]
    _notes: dict[str, Any]
    _outcomes: list[str]
    _mine: Any
    _waited: Any
    _waiting_for: Any
    _decision: Any
    _stop: _Stop | None
    _transcript: list[dict[str, Any]]

    def _label(self, adapter: PeachAdapter, root: tuple[Any, ...]) -> str:
        raise NotImplementedError

    def offers(self) -> list[Offer]:
        raise NotImplementedError

    async def _run_tools(
        self, uses: Sequence[ToolCall], by_tool: dict[str, Offer], record: DecisionRecord
    ) -> tuple[list[dict[str, Any]], bool, bool]:
        """Carry out the model's tool calls. Returns the results, whether any call
        was invalid, and whether the decision is settled: something was done (an
        action, wait, done, a dismissal), nothing failed, and no answer (a local
        tool's, a recall) is waiting to be read. A call whose arguments could not
        be read (malformed JSON from an OpenAI-compatible server) is invalid."""
        results: list[dict[str, Any]] = []
        invalid = False
        settled = False
        answers = False
        stopping = False
        for use in uses:
            name, arguments = use.name, dict(use.arguments)
            self.redactor.written(arguments)  # the model's values are no secrets
            called: dict[str, Any] = {"tool": name, "input": self.redactor.bindings(arguments)}
            record.tool_calls.append({**called, **({"error": use.error} if use.error else {})})
            error = False
            try:
                if stopping:
                    text = "ignored: done was called before"
                elif use.error is not None:
                    raise _InvalidCall(
                        f"{name} was not called: {use.error}; call it again with its "
                        "arguments as one JSON object"
                    )
                elif name in by_tool:
                    text, ok = await self.perform_offer(by_tool[name], arguments)
                    error = not ok
                    settled = settled or ok
                elif name == "wait":
                    text = self._wait(arguments)
                    settled = True
                elif name == "done" and self._events:
                    # docs/llm-agents.md: the agent does not finish while an event is
                    # pending; the model is told which, and what ends each.
                    pending = ", ".join(e.id for e in self._events)
                    raise _InvalidCall(
                        f"done was not called: events are pending ({pending}); handle each "
                        "(an action called with for_event) or dismiss it (dismiss_event) first"
                    )
                elif name == "done":
                    self._stop = _Stop("done", arguments.get("summary") or "the model called done")
                    text, settled, stopping = "stopping", True, True
                elif name == "memory":
                    text = self._memory(arguments)
                    answers = answers or arguments.get("op") == "recall"
                elif name == "dismiss_event":
                    text, settled = self._dismiss(arguments), True
                elif name in self.tools:
                    text, answers = compact(await self.tools[name].call(arguments), 4000), True
                else:
                    text, error = (
                        f"there is no tool {name!r} now (it may no longer be enabled)",
                        True,
                    )
                    invalid = True
            except _InvalidCall as exc:
                text, error, invalid = str(exc), True, True
            except Exception as exc:  # a local tool failed: say so to the model
                text = f"{name} failed: {type(exc).__name__}: {exc}"
                error = True
                log.warning("%s: %s", self.name, self.redactor.text(text))
            text = self.redactor.text(text)
            record.outcomes.append(f"{name}: {text}")
            self._outcomes.append(f"{name}: {text}")
            results.append({"id": use.id, "content": text, "error": error})
        if not uses:
            invalid = True
        failed = any(r["error"] for r in results)
        return results, invalid, settled and (stopping or not (failed or answers))

    def _wait(self, arguments: Mapping[str, Any]) -> str:
        names = arguments.get("for_actions") or []
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _InvalidCall("wait: for_actions must be a list of action names")
        known = {a for adapter in self.adapters for a in adapter.protocol.actions}
        prefixes = tuple(f"{a.protocol.name}_" for a in self.adapters)
        waited = set()
        for name in names:  # a tool-style name (Purchase_Quote) means the action Quote
            bare = next((name[len(p) :] for p in prefixes if name.startswith(p)), name)
            if bare not in known:
                raise _InvalidCall(
                    f"wait: no protocol of yours has an action {name!r} "
                    f"(actions: {', '.join(sorted(known))})"
                )
            waited.add(bare)
        self._waiting_for = waited
        self._waited = True
        return f"waiting for {', '.join(sorted(waited))}" if waited else "waiting"

    async def perform_offer(self, offer: Offer, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """Bind and attempt an offered action with the model's arguments."""
        arguments = dict(arguments)
        event = arguments.pop("for_event", None)
        unknown = set(arguments) - set(offer.asks)
        if unknown:
            raise _InvalidCall(
                f"{offer.tool} does not take {', '.join(sorted(unknown))}: it binds "
                f"{', '.join(offer.asks) or 'nothing'}"
            )
        optional = offer.adapter.protocol.optional
        missing = [a for a in offer.asks if a not in arguments and a not in optional]
        if missing:
            raise _InvalidCall(f"{offer.tool} needs {', '.join(missing)}")
        return await self.perform(
            offer.feasible, arguments, adapter=offer.adapter, event=event, label=offer.label
        )

    async def perform(
        self,
        feasible: FeasibleAction,
        bindings: Mapping[str, Any],
        *,
        adapter: PeachAdapter | None = None,
        event: str | None = None,
        label: str = "",
    ) -> tuple[str, bool]:
        """Run the before hooks, bind, attempt, run the after hooks. Returns a
        description of the outcome for the model and whether it succeeded."""
        if adapter is None:
            adapter = next(
                a
                for a in self.adapters
                if a.role == feasible.role
                and a.protocol.actions.get(feasible.name) is feasible.action
            )
        action = feasible.name
        given = dict(bindings)
        try:
            bindings = await self.hooks.run_before(action, given)
        except Exception as exc:  # its message may hold what it was fetching: not shown
            log.warning("%s: a before hook for %s failed (%s)", self.name, action,
                        type(exc).__name__)
            return f"{action} was not attempted: a before hook failed ({type(exc).__name__})", False
        changed = sorted(
            k for k in bindings if k not in given or not json_equal(given[k], bindings[k])
        )
        for attribute in {*changed, *self.hooks.provided(action)}:
            if attribute in bindings:  # whatever a hook set is a secret
                hide(self.redactor, bindings[attribute])
        if action in self.hooks.actions:
            note = f"hooks set {', '.join(changed) or 'nothing'} (values not shown)"
            log.info("%s: decision %d (hook): before %s: %s", self.name, self._decision, action,
                     note)
            self.report.decisions.append(
                DecisionRecord(self._decision, "hook", [f"before {action}"], outcomes=[note])
            )
        try:
            instance = feasible.bind_from(bindings)
        except BindError as exc:
            note = await self._after(action, None, str(exc))
            raise _InvalidCall(f"{action} could not be bound: {exc}{note}") from None
        try:
            [done] = await adapter.attempt([instance])
        except ActionRejected as exc:
            self.report.rejected(exc.rule, self.redactor.text(f"{action}: {exc.message}"))
            note = await self._after(action, instance, f"{exc.rule}: {exc.message}")
            return f"{action} was refused ({exc.rule}): {exc.message}{note}", False
        except ExecutorError as exc:
            note = await self._after(action, instance, str(exc))
            return f"{action} could not be attempted: {exc}{note}", False
        self.report.actions += 1
        index = self.adapters.index(adapter)
        root = adapter.state.root_of(done.bindings)
        self._mine.add((index, root))
        where = self._label(adapter, root)
        note = await self._after(action, done, None)
        if event is not None:
            self._events = [e for e in self._events if e.id != event]
        log.info(
            "%s: %s in %s: %s", self.name, action, where, describe_instance(done, self.redactor)
        )
        return f"done: {action} in {where} ({describe_instance(done, self.redactor)}){note}", True

    async def _after(self, action: str, instance: Any, error: str | None) -> str:
        """Run the after hooks; a failing one is reported, never mistaken for the
        action's own outcome."""
        try:
            await self.hooks.run_after(action, instance, error)
        except Exception as exc:
            text = self.redactor.text(f"{type(exc).__name__}: {exc}")
            log.warning("%s: after hook for %s failed: %s", self.name, action, text)
            return f" (an after hook failed: {text})"
        return ""

    def _memory(self, arguments: Mapping[str, Any]) -> str:
        op = arguments.get("op")
        key = arguments.get("key")
        if op == "save" and key:
            self._notes[str(key)] = arguments.get("value")
            return f"saved {key}"
        if op == "delete" and key:
            return (
                f"deleted {key}"
                if self._notes.pop(str(key), None) is not None
                else f"no note {key}"
            )
        if op == "recall":
            return compact(self._notes, 4000) if self._notes else "no notes"
        raise _InvalidCall("memory needs op save (with key and value), delete (with key) or recall")

    def _dismiss(self, arguments: Mapping[str, Any]) -> str:
        event = arguments.get("event_id")
        if not any(e.id == event for e in self._events):
            raise _InvalidCall(f"no pending event {event!r}")
        self._events = [e for e in self._events if e.id != event]
        return f"dismissed {event}"

    async def _without_model(self, record: DecisionRecord, reason: str, acted: int) -> None:
        """The model failed this decision: use the fallback policy, or stop. If the
        model already acted in this decision, that stands and the decision ends."""
        log.warning("%s: %s", self.name, reason)
        record.outcomes.append(f"model failed: {reason}")
        if self.report.actions > acted:
            return  # what the model did stands; the next event brings a new decision
        if self.fallback is None:
            raise _Stop("error", f"{reason}; no fallback policy was given")
        log.info("%s: decision %d (fallback): %s", self.name, record.number, reason)
        fallback = DecisionRecord(record.number, "fallback", [reason])
        self.report.decisions.append(fallback)
        self._transcript.append({"decision": record.number, "fallback": reason})
        before = self.report.actions
        try:
            await self.fallback(self, reason)
        except _Stop:
            raise
        except Exception as exc:
            text = self.redactor.text(f"{type(exc).__name__}: {exc}")
            raise _Stop("error", f"{reason}; the fallback policy failed too: {text}") from None
        fallback.outcomes.append(f"{self.report.actions - before} action(s) performed")
