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

**What it keeps** is bounded, so a long-running agent does not grow with every
task: the :data:`KEPT_TASKS` tasks updated last (older ones are forgotten, and
a message or ``tasks/get`` naming one is answered "task not found"), a task's
enactment only while the task may still get a message (not once it is
completed, failed, rejected or canceled), and the SDK's live state of a task
waiting for input only :data:`IDLE_RELEASE` seconds (a message brings it back).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Generic, TypeVar

from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    SendMessageRequest,
    Task,
    TaskNotFoundError,
    TaskState,
    TaskStatus,
    UnsupportedOperationError,
)
from starlette.applications import Starlette
from starlette.middleware import Middleware

from langshaw.values import whole_numbers
from peach.a2a._guard import JsonBodies, quiet_client_mistakes
from peach.adapter import PeachAdapter
from peach.errors import ActionRejected, BindError, ExecutorError

log = logging.getLogger("strabo.a2a")
quiet_client_mistakes()

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]

KEPT_TASKS = 10_000
"""Tasks a RoleAgent keeps at most (``RoleAgent(kept=)``), the least recently
updated forgotten first: a client that opens tasks and never comes back cannot
fill the memory. A forgotten task is "not found"; its enactment goes on."""

IDLE_RELEASE = 300.0
"""Seconds the SDK keeps the live state (queues, tasks) of a task waiting for
input before it releases it; a message to the task rebuilds it from the store."""


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
        self, adapter: PeachAdapter, *, name: str | None = None, url: str = "",
        kept: int = KEPT_TASKS,
    ) -> None:
        if kept < 1:
            raise ValueError(f"kept must be at least 1, not {kept}")
        self.adapter = adapter
        self.name = name or f"strabo {adapter.protocol.name} {adapter.role}"
        self.url = url  # where clients reach it; set once serving (the card says it)
        self.kept = kept  # tasks kept at most (KEPT_TASKS)
        self._actions = {a.name for a in adapter.protocol.actions_of(adapter.role)}
        # A2A task id -> its enactment, while the task may get a message: dropped
        # when the task ends or its store forgets it, and bounded on its own too.
        self._roots: _Kept[str, tuple[Any, ...]] = _Kept(kept)
        # Tasks whose terminal state was written (by a message, a cancel or the
        # SDK), while the store holds them: the first terminal state is the only
        # one (A2ATask's nono), so a cancel racing a completion writes nothing.
        self._ended: set[str] = set()
        self._changed = asyncio.Event()  # set (and replaced) on every batch
        self._started = False
        self._handlers: list[_Handler] = []  # whose tasks stop() ends

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

    def forget(self, task_id: str) -> None:
        """Stop knowing ``task_id``'s enactment: the task ended, or was forgotten."""
        self._roots.pop(task_id, None)

    def end(self, task_id: str) -> bool:
        """Claim ``task_id``'s terminal state: False if it has one already (a
        completion and a cancel in flight at once: the first one wins)."""
        if task_id in self._ended:
            return False
        self._ended.add(task_id)
        self.forget(task_id)  # ended: no message can reach it now
        return True

    def _stored(self, task_id: str, state: int | None) -> None:
        """The task store saved ``task_id`` in ``state``, or dropped it (None)."""
        if state is None:
            self.forget(task_id)
            self._ended.discard(task_id)
        elif state in _ENDED:  # however it ended (a cancel the SDK writes itself)
            self.end(task_id)
        elif task_id in self._roots:  # forgotten with the task, not before it
            self._roots.move_to_end(task_id)

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
        handler = _Handler(
            agent_executor=_Executor(self),
            tasks=_KeptTasks(self.kept, self._stored),
            agent_card=self.agent_card(),
            interrupted_task_timeout=IDLE_RELEASE,
        )

        async def card(_: AgentCard) -> AgentCard:
            return self.agent_card()  # with the URL known once serving

        routes = [
            *create_agent_card_routes(self.agent_card(), card_modifier=card),
            *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
        ]
        self._handlers.append(handler)
        return Starlette(routes=routes, middleware=[Middleware(JsonBodies)])

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


class _Handler(DefaultRequestHandler):
    """The SDK's handler, refusing a message to an ended task before it builds the
    task's live state: the SDK would refuse it too, but leave that state's
    queues running, to be destroyed pending (an error logged per message). And
    letting go of a forgotten task's live state at once."""

    def __init__(self, tasks: _KeptTasks, **options: Any) -> None:
        super().__init__(task_store=tasks, **options)
        self._tasks, tasks.dropped = tasks, self._let_go

    async def _let_go(self, task_id: str) -> None:
        """The store forgot ``task_id``, waiting for input: its live state goes
        now, not IDLE_RELEASE later (a flood of tasks would hold one each)."""
        active = await self._active_task_registry.get(task_id)
        if active is not None:
            await active.aclose()

    async def _refuse_ended(self, params: SendMessageRequest, context: ServerCallContext
                            ) -> None:
        task_id = params.message.task_id
        _refuse_ended(await self._tasks.get(task_id, context) if task_id else None)

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext
                              ) -> Task | Message:
        await self._refuse_ended(params, context)
        answer: Task | Message = await super().on_message_send(params, context)
        return answer

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Any, None]:
        await self._refuse_ended(params, context)
        async for event in super().on_message_send_stream(params, context):
            yield event


def _refuse_ended(task: Task | None) -> None:
    """The SDK's answer to a message to an ended task."""
    if task is not None and task.status.state in _ENDED:
        raise UnsupportedOperationError(
            f"Task {task.id} is in terminal state: {TaskState.Name(task.status.state)}")


class _Executor(AgentExecutor):
    """The SDK's side: one call of :meth:`execute` per message, reporting the task's
    states as the enactment goes on."""

    def __init__(self, role: RoleAgent) -> None:
        self.role = role

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        role = self.role
        assert context.message is not None  # a message always comes with execute
        # A stored task is a follow-up (a new one is stored once it is reported);
        # one whose enactment is no longer known must not start a new one.
        follow_up = context.current_task is not None
        _refuse_ended(context.current_task)  # queued behind the message that ended it
        if follow_up and task_id not in role._roots:
            raise TaskNotFoundError(
                f"Task {task_id} is no longer followed by {role.name} (it keeps the "
                f"{role.kept} latest tasks); send a new message to start a new task")
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
            if follow_up and task_id in role._roots:  # the client may try another
                root = role._roots[task_id]
                offers = role.offers(root)
                if offers and not role.adapter.is_complete(root):
                    await updater.requires_input(_message(
                        updater, text, {"error": str(exc), "rule": exc.rule, "you_may": offers}))
                    return
                # The enactment went on without this task (a message to another
                # task named it): say why, then report it as it stands.
                await updater.update_status(TaskState.TASK_STATE_WORKING, _message(
                    updater, text, {"error": str(exc), "rule": exc.rule}))
                await self._follow(updater, root)
            elif role.end(task_id):  # unless canceled meanwhile
                await (updater.failed if exc.attempted else updater.reject)(answer)
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
                if not role.end(updater.task_id):
                    return  # canceled meanwhile: that state stands
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
        if not self.role.end(updater.task_id):
            return  # it completed (or failed) just before: that state stands
        await updater.cancel(_message(
            updater, "stopped following the enactment; nothing was attempted, and the "
            "enactment goes on for the other agents", {"canceled": True}))


K = TypeVar("K")
V = TypeVar("V")

_ENDED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
                    TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_CANCELED})


class _Kept(OrderedDict[K, V], Generic[K, V]):
    """A mapping that keeps its ``bound`` latest set entries, the oldest set
    forgotten first (as strabo.merchant's idempotency records: peach cannot
    import strabo)."""

    def __init__(self, bound: int) -> None:
        super().__init__()
        self.bound = bound

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.bound:
            self.popitem(last=False)


class _KeptTasks(TaskStore):
    """The SDK's in-memory task store, holding the ``bound`` tasks saved last
    (each update saves its task). A task it drops is deleted, so the SDK answers
    a message or ``tasks/get`` naming it with TaskNotFoundError, and ``stored``
    tells the agent (of each save too: a task kept keeps its enactment)."""

    def __init__(self, bound: int, stored: Callable[[str, int | None], None]) -> None:
        self._tasks = InMemoryTaskStore()
        self._order: OrderedDict[str, ServerCallContext] = OrderedDict()  # by last save
        self.bound = bound
        self._stored = stored  # told of each save (the task's state) and drop (None)
        self.dropped: Callable[[str], Awaitable[None]] | None = None  # the handler's

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._tasks.save(task, context)
        self._order[task.id] = context  # the owner the store files it under
        self._order.move_to_end(task.id)
        self._stored(task.id, task.status.state)
        while len(self._order) > self.bound:
            old, saved_by = self._order.popitem(last=False)
            gone = await self._tasks.get(old, saved_by)
            await self._tasks.delete(old, saved_by)
            self._stored(old, None)
            if self.dropped and gone and gone.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                await self.dropped(old)  # parked: no client waits on it

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await self._tasks.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext
                   ) -> ListTasksResponse:
        return await self._tasks.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._order.pop(task_id, None)
        await self._tasks.delete(task_id, context)
        self._stored(task_id, None)


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
