"""RoleAgent: one agent's role in a Langshaw protocol, served as an A2A agent.

Any A2A client can then delegate to the role: each A2A message names one of
the role's actions and its bindings, which are built and attempted through the
agent's :class:`~peach.adapter.PeachAdapter`, exactly as a coded agent's
would. The protocol's rules stay in the protocol and the adapter: this module
only maps A2A's task lifecycle (protocols/a2a-task.lsh) onto what the adapter
reports of the enactment.

**The mapping** (docs/a2a.md): a message's data part is ``{"action": NAME,
"bindings": {...}}``. A message that opens a task performs the action (in a new
enactment, or in the one its bindings' root keys name), and the task follows
that enactment: ``working`` while others act (one status update per action),
``input-required`` when the role is enabled in it again (the status message
lists what it may do), ``completed`` when the enactment completes. A message
sent to an ``input-required`` task acts in the task's enactment. A refusal
(the action is not enabled, a value does not fit its type, the SyncServer
refuses the attempt) ends a new task as ``rejected`` (checked before any
attempt) or ``failed`` (refused by the SyncServer), with the refusal's message
and rule; in a task that asked for input it asks again, saying why.
``tasks/cancel`` stops following the enactment: it attempts nothing, since
calling a protocol off is an action of the protocol's own (Purchase's Cancel).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

from langshaw.values import whole_numbers
from peach.adapter import PeachAdapter
from peach.errors import ActionRejected, BindError, ExecutorError

log = logging.getLogger("strabo.a2a")

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


class Refused(Exception):
    """What the role will not do for a message: the task says it, with the rule."""

    def __init__(self, message: str, rule: str | None = None, *, attempted: bool = False) -> None:
        super().__init__(message)
        self.rule = rule
        self.attempted = attempted  # refused by the SyncServer, not before the attempt


class RoleAgent:
    """Serve ``adapter``'s role as an A2A agent (JSON-RPC over HTTP, with SSE).

    ``async with RoleAgent(adapter) as agent:`` starts the adapter (unless it runs
    already); :meth:`app` is the ASGI app to serve, its agent card at
    ``/.well-known/agent-card.json`` and JSON-RPC at ``/``.
    """

    def __init__(
        self, adapter: PeachAdapter, *, name: str | None = None, url: str = ""
    ) -> None:
        self.adapter = adapter
        self.name = name or f"strabo {adapter.protocol.name} {adapter.role}"
        self.url = url  # where clients reach it; set once serving (the card says it)
        self._actions = {a.name for a in adapter.protocol.actions_of(adapter.role)}
        self._roots: dict[str, tuple[Any, ...]] = {}  # A2A task id -> its enactment
        self._changed = asyncio.Event()  # set (and replaced) on every batch
        self._started = False
        self._handlers: list[DefaultRequestHandler] = []  # whose tasks stop() ends

    # Life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        if self._on_batch not in self.adapter.listeners:
            self.adapter.listeners.append(self._on_batch)
        if not self.adapter.running:
            await self.adapter.start()
            self._started = True

    async def stop(self) -> None:
        if self._on_batch in self.adapter.listeners:
            self.adapter.listeners.remove(self._on_batch)
        self._changed.set()
        for handler in self._handlers:  # the tasks still following an enactment
            await handler.aclose()
        if self._started:
            self._started = False
            await self.adapter.stop()

    async def __aenter__(self) -> RoleAgent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _on_batch(self, batch: Any, newly: list[tuple[Any, ...]]) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # The agent card ---------------------------------------------------------------------

    def agent_card(self) -> AgentCard:
        """The role as an A2A agent: one skill per action of the role."""
        protocol, role = self.adapter.protocol, self.adapter.role
        skills = [
            AgentSkill(
                id=action.name,
                name=action.name,
                description=(action.doc or f"{role}'s action {action.name} in {protocol.name}")
                + f" Send a data part {{\"action\": \"{action.name}\", \"bindings\": "
                f"{{...}}}}; it binds {', '.join(action.attributes) or 'nothing'}.",
                tags=[protocol.name, role],
                input_modes=["application/json"],
                output_modes=["application/json", "text/plain"],
            )
            for action in protocol.actions_of(role)
        ]
        return AgentCard(
            name=self.name,
            description=(
                f"Plays {role} in the Langshaw protocol {protocol.name} (roles: "
                f"{', '.join(protocol.roles)}) as {self.adapter.name}. Each message names "
                "one of the role's actions and its bindings; the protocol decides whether "
                "it may be done, and a refused one changes nothing."
            ),
            version="1.0.0",
            supported_interfaces=[
                AgentInterface(url=self.url or "/", protocol_binding="JSONRPC",
                               protocol_version="1.0"),
            ],
            capabilities=AgentCapabilities(streaming=True),
            default_input_modes=["application/json"],
            default_output_modes=["application/json", "text/plain"],
            skills=skills,
        )

    def app(self) -> Starlette:
        """The ASGI app: the agent card, and JSON-RPC at ``/`` (A2A 1.0 method
        names, and 0.3's ``message/send``, ``tasks/get``... as well)."""
        handler = DefaultRequestHandler(
            agent_executor=_Executor(self),
            task_store=InMemoryTaskStore(),
            agent_card=self.agent_card(),
        )

        async def card(_: AgentCard) -> AgentCard:
            return self.agent_card()  # with the URL known once serving

        routes = [
            *create_agent_card_routes(self.agent_card(), card_modifier=card),
            *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
        ]
        self._handlers.append(handler)
        return Starlette(routes=routes)

    # Acting -----------------------------------------------------------------------------

    async def act(self, message: Message, task_id: str) -> tuple[Any, tuple[Any, ...]]:
        """Build and attempt the action ``message`` names (in the task's enactment
        if the task has one); returns the finalized instance and its enactment."""
        action, bindings = self._request(message)
        root = self._roots.get(task_id)
        if root is not None:
            bindings = {**bindings, **self.adapter.keys_of(root)}
        try:
            instance = self.adapter.build_action(action, bindings)
        except BindError as exc:
            raise Refused(str(exc), exc.rule) from None
        try:
            [done] = await self.adapter.attempt([instance])
        except ActionRejected as exc:
            raise Refused(f"{action} was refused ({exc.rule}): {exc.message}", exc.rule,
                          attempted=True) from None
        except ExecutorError as exc:
            raise Refused(f"{action} could not be attempted: {exc}", attempted=True) from None
        root = self.adapter.state.root_of(done.bindings)
        self._roots[task_id] = root
        log.info("%s: %s in %s", self.name, action, self.adapter.keys_of(root))
        return done, root

    def _request(self, message: Message) -> tuple[str, dict[str, Any]]:
        asks = [d for d in get_data_parts(message.parts) if isinstance(d, dict) and "action" in d]
        if len(asks) != 1:
            raise Refused(
                "send one data part {\"action\": NAME, \"bindings\": {...}}, NAME one of "
                f"{', '.join(sorted(self._actions))}", "request",
            )
        [ask] = asks
        action, bindings = ask["action"], ask.get("bindings", {})
        if not isinstance(action, str) or action not in self._actions:
            raise Refused(
                f"{self.adapter.role} has no action {str(action)[:80]!r} in "
                f"{self.adapter.protocol.name} (actions: {', '.join(sorted(self._actions))})",
                "request",
            )
        if not isinstance(bindings, dict) or set(ask) - {"action", "bindings"}:
            raise Refused("the data part holds action and bindings (an object) only",
                          "request")
        return action, whole_numbers(bindings)

    def offers(self, root: tuple[Any, ...]) -> list[dict[str, Any]]:
        """What the role may do now in ``root``: each action and what it binds."""
        return [{"action": f.name, "keys": f.keys, "bind": list(f.to_bind)}
                for f in self.adapter.enabled(root)]

    async def changed(self, seen: int, root: tuple[Any, ...]) -> None:
        """Wait until ``root``'s history grows past ``seen`` actions (or we stop)."""
        while len(self.adapter.history(root)) <= seen and self._on_batch in self.adapter.listeners:
            await self._changed.wait()


class _Executor(AgentExecutor):
    """The SDK's side: one call of :meth:`execute` per message, reporting the task's
    states as the enactment goes on."""

    def __init__(self, role: RoleAgent) -> None:
        self.role = role

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        role = self.role
        follow_up = task_id in role._roots
        assert context.message is not None  # a message always comes with execute
        if follow_up:
            await updater.start_work()
        else:  # the task itself, before its updates; working at once (no queue here)
            await event_queue.enqueue_event(Task(
                id=task_id, context_id=context_id, history=[context.message],
                status=TaskStatus(state=TaskState.TASK_STATE_WORKING)))
        try:
            done, root = await role.act(context.message, task_id)
        except Refused as exc:
            text = f"{exc}" + (f" (rule: {exc.rule})" if exc.rule else "")
            answer = _message(updater, text, {"error": str(exc), "rule": exc.rule})
            if follow_up:  # the task goes on: the client may try something else
                root = role._roots[task_id]
                await updater.requires_input(
                    _message(updater, text, {"error": str(exc), "rule": exc.rule,
                                             "you_may": role.offers(root)}))
            elif exc.attempted:
                await updater.failed(answer)
            else:
                await updater.reject(answer)
            return
        await updater.add_artifact(
            [new_data_part(_json({"done": done.name, "keys": done.keys,
                                  "bindings": done.bindings}))],
            name=done.name,
        )
        await self._follow(updater, root)

    async def _follow(self, updater: TaskUpdater, root: tuple[Any, ...]) -> None:
        """Report the enactment until it completes or the role may act again."""
        role, adapter = self.role, self.role.adapter
        seen = len(adapter.history(root))
        while True:
            if adapter.is_complete(root):
                done = [{"seq": s, "action": i.name, "by": who, "bindings": i.bindings}
                        for s, i, who in adapter.history(root)]
                await updater.add_artifact([new_data_part(_json({"history": done}))],
                                           name="enactment")
                await updater.complete(_message(
                    updater, f"{adapter.protocol.name} {adapter.keys_of(root)} is complete",
                    {"keys": adapter.keys_of(root), "complete": True}))
                return
            offers = role.offers(root)
            if offers:
                names = ", ".join(o["action"] for o in offers)
                await updater.requires_input(_message(
                    updater, f"{adapter.role} may now do: {names}",
                    {"keys": adapter.keys_of(root), "you_may": offers}))
                return
            await role.changed(seen, root)
            history = adapter.history(root)
            for seq, instance, who in history[seen:]:
                await updater.update_status(TaskState.TASK_STATE_WORKING, _message(
                    updater, f"#{seq} {instance.name} by {who}",
                    {"seq": seq, "action": instance.name, "by": who,
                     "bindings": instance.bindings}))
            if len(history) == seen:  # stopping: leave the task as it stands
                return
            seen = len(history)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await updater.cancel(_message(
            updater, "stopped following the enactment; nothing was attempted, and the "
            "enactment goes on for the other agents", {"canceled": True}))


def _message(updater: TaskUpdater, text: str, data: dict[str, Any]) -> Message:
    parts: list[Part] = [new_text_part(text), new_data_part(_json(data))]
    return updater.new_agent_message(parts)


def _json(value: Any) -> Any:
    """Protobuf's Value takes JSON only: tuples become lists, keys text."""
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return value




__all__ = ["Refused", "RoleAgent"]
