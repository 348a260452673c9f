"""RemoteAgent: a remote A2A agent, playing the Agent role of A2ATask for Peach agents.

A Peach agent (on any executor) that plays the Client of protocols/a2a-task.lsh
delegates to a remote A2A agent through this proxy: the Client's ``Send`` goes
to the remote agent as an A2A message, and the remote task's lifecycle comes
back as the Agent's actions (Submitted, Working, InputRequired, Completed,
Failed, Rejected, Canceled), so the exchange itself is an enactment that every
agent of the MAS sees and that the protocol governs. The inverse of
:class:`~peach.a2a.server.RoleAgent`, which serves a role to A2A clients.

The proxy reacts to what the protocol enables for it, as any Peach agent does:
``Submitted`` enabled means a Send awaits an answer (the message is sent),
``Resumed`` a Reply (sent to the remote task, with its taskId), ``Canceled`` a
Cancel (sent as ``tasks/cancel``). A Reply or Cancel that comes after the task
ended enables nothing, so nothing is sent: the protocol is the only source of
rules. The proxy never checks them itself; it attempts through its adapter,
and a refusal is logged (warning) with the rule.

docs/a2a.md ("Delegating to a remote A2A agent") gives the mapping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    Client,
    ClientConfig,
    create_client,
)
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError

from langshaw import ActionInstance
from peach.a2a._lifecycle import (
    AGENT_ACTIONS,
    CLIENT_ACTIONS,
    TERMINAL,
    Misbehaved,
    Seen,
    as_json,
    settled,
    steps,
    to_message,
    turn_of,
)
from peach.adapter import PeachAdapter
from peach.errors import ActionRejected, BindError, ExecutorError
from peach.feasible import FeasibleAction

log = logging.getLogger("strabo.a2a.remote")
T = TypeVar("T")

CARD_PATH = "/.well-known/agent-card.json"


class Unanswered(Exception):
    """The remote agent gave no answer (refused, unreachable, timed out)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass
class _Remote:
    """What the proxy knows of one remote task (an enactment of A2ATask)."""

    task_id: str = ""
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    turn: str = ""
    artifacts: dict[str, Any] = field(default_factory=dict)  # artifactId -> JSON
    sizes: dict[str, int] = field(default_factory=dict)  # artifactId -> bytes (protobuf)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class RemoteAgent:
    """Play ``adapter``'s role, the Agent of A2ATask, for the A2A agent at ``url``.

    ``url`` is the remote agent's base URL or its agent card's URL. ``streaming``:
    None follows the card (``message/stream`` when it says it streams), False always
    uses ``message/send`` then ``tasks/get``. ``timeout`` bounds each request (a
    silent stream falls back to ``tasks/get``); ``poll_max`` is the longest wait
    between two ``tasks/get``. ``accepts(send)`` picks the Sends this proxy answers,
    when several agents play the Agent role (default: all). ``max_artifact_bytes``
    bounds what a task's artifacts may hold (past it, the task fails).
    ``follow_card``: the card's endpoints on another origin than ``url``'s are used
    too (by default they are not: a card cannot send the proxy elsewhere).

    Build it before the adapter starts, and run it with ``async with
    RemoteAgent(adapter, url):``, which starts the adapter unless it runs already.
    """

    def __init__(
        self,
        adapter: PeachAdapter,
        url: str,
        *,
        streaming: bool | None = None,
        timeout: float = 30.0,
        poll_max: float = 2.0,
        accepts: Callable[[ActionInstance], bool] | None = None,
        max_artifact_bytes: int = 8 * 2**20,
        follow_card: bool = False,
    ) -> None:
        protocol, role = adapter.protocol, adapter.role
        mine = {a.name for a in protocol.actions_of(role)}
        missing = [a for a in AGENT_ACTIONS if a not in mine]
        missing += [a for a in CLIENT_ACTIONS if a not in protocol.actions or a in mine]
        if missing:
            raise ValueError(
                f"{role} of {protocol.name} is not the Agent of A2ATask (protocols/"
                f"a2a-task.lsh): {', '.join(missing)} missing or not the right role's"
            )
        if timeout <= 0 or poll_max <= 0:
            raise ValueError("timeout and poll_max are positive numbers of seconds")
        self.adapter = adapter
        self.url = url
        self.streaming = streaming
        self.timeout = timeout
        self.poll_max = poll_max
        self.accepts = accepts
        self.max_artifact_bytes = max_artifact_bytes
        self.follow_card = follow_card
        self.card: AgentCard | None = None  # the remote's, once read
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None
        self._connecting = asyncio.Lock()
        self._tasks: dict[tuple[Any, ...], _Remote] = {}
        self._running: set[asyncio.Task[Any]] = set()
        self._started = False
        adapter.on_enabled("Submitted")(self._on_send)
        adapter.on_enabled("Resumed")(self._on_reply)
        adapter.on_enabled("Canceled")(self._on_cancel)

    # Life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout)
        if not self.adapter.running:
            await self.adapter.start()
            self._started = True

    async def stop(self) -> None:
        """Stop following the remote tasks (they go on there), then the adapter."""
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        if self._started:
            self._started = False
            await self.adapter.stop()
        if self._http is not None:
            await self._http.aclose()
            self._http, self._client = None, None

    async def __aenter__(self) -> RemoteAgent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # The Client's actions ---------------------------------------------------------------

    async def _on_send(self, fa: FeasibleAction) -> None:
        root = self._root(fa)
        [(_, send, _)] = [h for h in self.adapter.history(root) if h[1].name == "Send"]
        try:
            if self.accepts is not None and not self.accepts(send):
                return
        except Exception:  # not ours to fail: some other Agent's, maybe
            log.exception("%s: accepts() failed on %s", self.adapter.name, send.keys)
            return
        keys = self.adapter.keys_of(root)
        async with self._guard(root):
            try:
                message = to_message(send.bindings["message"], keys["task"], keys["ctx"])
            except ValueError as exc:
                await self._say(root, [("Rejected", {"rejection": {"error": str(exc)}})])
                return
            await self._exchange(root, SendMessageRequest(message=message))

    async def _on_reply(self, fa: FeasibleAction) -> None:
        root, turn = self._root(fa), fa.keys["turn"]
        [reply] = [i for _, i, _ in self.adapter.history(root)
                   if i.name == "Reply" and i.bindings["turn"] == turn]
        remote = self._remote(root)
        remote.task_id = remote.task_id or reply.bindings["task_id"]
        async with self._guard(root):
            try:
                message = to_message(reply.bindings["reply"], self.adapter.new_key(),
                                     fa.keys["ctx"], remote.task_id)
            except ValueError as exc:
                await self._fail(root, f"the reply cannot be sent: {exc}")
                return
            await self._exchange(root, SendMessageRequest(message=message))

    async def _on_cancel(self, fa: FeasibleAction) -> None:
        root = self._root(fa)
        [cancel] = [i for _, i, _ in self.adapter.history(root) if i.name == "Cancel"]
        remote = self._remote(root)
        task_id = remote.task_id or cancel.bindings["task_id"]
        async with self._guard(root):
            try:
                client = await self._remote_client()
                task = await self._call(client.cancel_task(CancelTaskRequest(id=task_id)))
            except Unanswered as exc:
                await self._fail(root, f"tasks/cancel: {exc}")
                return
            except A2AError as exc:  # not cancelable: it ended first, which it reports
                log.info("%s: the remote agent did not cancel task %s: %s",
                         self.adapter.name, task_id, _said(exc))
                return
            await self._task(root, task)

    # Talking to the remote agent ----------------------------------------------------------

    async def _exchange(self, root: tuple[Any, ...], request: SendMessageRequest) -> None:
        """Send a message and follow the task until it waits for the Client or ends."""
        remote = self._remote(root)
        try:
            client = await self._remote_client()
            if not self._streams():
                request.configuration.return_immediately = True
            async for event in self._sent(client, request):
                await self._event(root, event)
        except Unanswered as exc:
            if not remote.task_id or not exc.timed_out:
                await self._fail(root, str(exc))
                return
            log.info("%s: %s; asking with tasks/get", self.adapter.name, exc)
        except A2AError as exc:  # the remote agent answered with an error
            said = {"error": _said(exc), "code": type(exc).__name__}
            if "Submitted" not in Seen.of(self.adapter.history(root)).names:
                await self._say(root, [("Rejected", {"rejection": said})])
            else:
                await self._fail(root, f"the remote agent refused the message: {_said(exc)}")
            return
        await self._poll(root)

    async def _poll(self, root: tuple[Any, ...]) -> None:
        """``tasks/get`` until the task waits for the Client or ends, waiting longer
        (up to ``poll_max``) while nothing changes."""
        remote, delay = self._remote(root), 0.05
        while remote.task_id and not self._settled(root):
            await asyncio.sleep(delay)  # polling's back-off, not a race fix
            before = (remote.state, remote.turn)
            try:
                client = await self._remote_client()
                task = await self._call(client.get_task(GetTaskRequest(id=remote.task_id)))
            except Unanswered as exc:
                await self._fail(root, f"tasks/get: {exc}")
                return
            except A2AError as exc:
                await self._fail(root, f"tasks/get: {_said(exc)}")
                return
            await self._task(root, task)
            delay = 0.05 if (remote.state, remote.turn) != before else min(
                delay * 2, self.poll_max)

    async def _sent(self, client: Client, request: SendMessageRequest
                    ) -> AsyncIterator[StreamResponse]:
        """The SDK's events for ``request``, its transport errors as Unanswered."""
        events = client.send_message(request)
        try:
            while True:
                try:
                    event = await self._call(events.__anext__())
                except StopAsyncIteration:
                    return
                yield event
        finally:
            with contextlib.suppress(Exception):
                await events.aclose()  # type: ignore[attr-defined]

    async def _call(self, call: Awaitable[T]) -> T:
        """An SDK call's answer, its transport errors (no answer) as Unanswered."""
        try:
            return await call
        except (A2AClientError, httpx.HTTPError, OSError) as exc:
            raise self._unanswered(exc) from None

    async def _remote_client(self) -> Client:
        """The SDK's client for the remote agent, from its card (read again after the
        remote agent failed to answer: it may have come back elsewhere)."""
        async with self._connecting:
            if self._client is None:
                if self._http is None:
                    raise Unanswered("the RemoteAgent is not started")
                base, path = _card_location(self.url)
                try:
                    card = await A2ACardResolver(self._http, base, path).get_agent_card()
                except (A2AError, httpx.HTTPError, OSError) as exc:
                    raise self._unanswered(exc, "its agent card") from None
                self.card = _here(card, self.url, base + path, self.follow_card)
                config = ClientConfig(streaming=self.streaming is not False,
                                      httpx_client=self._http)
                self._client = await create_client(card, config)
            return self._client

    def _streams(self) -> bool:
        return (self.streaming is not False and self.card is not None
                and self.card.capabilities.streaming)

    def _unanswered(self, exc: BaseException, what: str = "") -> Unanswered:
        self._client = None  # read the card again next time
        chain: list[BaseException] = [exc]
        while chain[-1].__cause__ is not None:
            chain.append(chain[-1].__cause__)
        cause = chain[-1]
        timed_out = any(isinstance(e, httpx.TimeoutException | A2AClientTimeoutError
                                   | TimeoutError) for e in chain)
        why = f"timed out after {self.timeout:g}s" if timed_out else _said(cause)
        return Unanswered(f"the remote A2A agent at {self.url} did not answer"
                          f"{' for ' + what if what else ''}: {why}", timed_out=timed_out)

    # Enacting what the remote agent says ----------------------------------------------------

    async def _event(self, root: tuple[Any, ...], event: StreamResponse) -> None:
        remote = self._remote(root)
        if event.HasField("task"):
            await self._task(root, event.task)
        elif event.HasField("status_update"):
            update = event.status_update
            self._same(remote, update.task_id)
            await self._status(root, update.status)
        elif event.HasField("artifact_update"):
            update = event.artifact_update
            self._same(remote, update.task_id)
            name = update.artifact.artifact_id
            known = remote.artifacts.get(name)
            appended = update.append and known is not None
            self._bound(remote, {**remote.sizes, name: update.artifact.ByteSize()
                                 + (remote.sizes.get(name, 0) if appended else 0)})
            artifact = as_json(update.artifact)
            if known is not None and appended:
                known.setdefault("parts", []).extend(artifact.get("parts", []))
            else:
                remote.artifacts[name] = artifact
        elif event.HasField("message") and not remote.task_id:
            # A direct answer, no task: done, the message its one artifact.
            self._bound(remote, {"message": event.message.ByteSize()})
            answer = as_json(event.message)
            remote.artifacts = {"message": {"artifactId": answer.get("messageId", ""),
                                            "name": "message",
                                            "parts": answer.get("parts", [])}}
            await self._status(root, TaskStatus(state=TaskState.TASK_STATE_COMPLETED))

    async def _task(self, root: tuple[Any, ...], task: Task) -> None:
        remote = self._remote(root)
        self._same(remote, task.id)
        if task.artifacts:
            self._bound(remote, {a.artifact_id: a.ByteSize() for a in task.artifacts})
            remote.artifacts = {a.artifact_id: as_json(a) for a in task.artifacts}
        await self._status(root, task.status)

    @staticmethod
    def _same(remote: _Remote, task_id: str) -> None:
        """The task the remote agent reports on is the one followed (or the first),
        with an id it can be asked about by (not empty, at most 1024 characters)."""
        if not task_id or len(task_id) > 1024:
            raise Misbehaved(f"the remote agent's task id {task_id[:80]!r} "
                             f"({len(task_id)} characters) cannot be followed: "
                             "it is empty or longer than 1024 characters")
        if remote.task_id and task_id != remote.task_id:
            raise Misbehaved(f"the remote agent answered for task id {task_id[:80]!r}, "
                             f"not for {remote.task_id[:80]!r}, the one followed")
        remote.task_id = remote.task_id or task_id

    def _bound(self, remote: _Remote, sizes: dict[str, int]) -> None:
        """Keep ``sizes`` as the task's artifact sizes, unless past the bound."""
        if sum(sizes.values()) > self.max_artifact_bytes:
            remote.artifacts, remote.sizes = {}, {}
            raise Misbehaved(f"the remote agent's artifacts exceed {self.max_artifact_bytes} "
                             "bytes (max_artifact_bytes)")
        remote.sizes = sizes

    async def _status(self, root: tuple[Any, ...], status: TaskStatus) -> None:
        remote = self._remote(root)
        if status.message.ByteSize() > self.max_artifact_bytes:
            raise Misbehaved(f"the remote agent's status message exceeds "
                             f"{self.max_artifact_bytes} bytes (max_artifact_bytes)")
        async with remote.lock:  # one report at a time: each reads what the last did
            remote.state, remote.turn = status.state, turn_of(remote.task_id, status)
            if self.adapter.is_complete(root):
                return  # the enactment is over: the Agent says nothing more of the task
            seen = Seen.of(self.adapter.history(root))
            await self._enact(root, steps(status.state, remote.task_id, status,
                                          list(remote.artifacts.values()), seen))

    async def _say(self, root: tuple[Any, ...], todo: list[tuple[str, dict[str, Any]]]) -> None:
        async with self._remote(root).lock:
            await self._enact(root, todo)

    async def _enact(self, root: tuple[Any, ...], todo: list[tuple[str, dict[str, Any]]]) -> None:
        """Attempt each step in turn, through the adapter; a refusal stops there (the
        steps after it depend on it). A refused terminal state becomes Failed, saying
        why, so that the Client never waits for a task that ended."""
        keys = self.adapter.keys_of(root)
        for name, values in todo:
            refusal = await self._attempt(name, {**keys, **values})
            if refusal is None:
                continue
            if name in ("Completed", "Canceled", "Rejected") and not self.adapter.is_complete(root):
                state = name.lower()
                await self._failed(root, f"the remote agent says the task is {state}, which "
                                 f"{self.adapter.protocol.name} refuses: {refusal}")
            return

    async def _attempt(self, name: str, bindings: dict[str, Any]) -> str | None:
        """Build and attempt one action; None, or the refusal (logged)."""
        try:
            [done] = await self.adapter.attempt([self.adapter.build_action(name, bindings)])
        except (BindError, ActionRejected) as exc:
            rule = getattr(exc, "rule", None)
            refusal = f"{exc}" + (f" (rule: {rule})" if rule else "")
        except ExecutorError as exc:
            refusal = f"{name} could not be attempted: {exc}"
        else:
            log.info("%s: %s in %s", self.adapter.name, done.name, done.keys)
            return None
        log.warning("%s: %s refused: %s", self.adapter.name, name, refusal)
        return refusal

    async def _fail(self, root: tuple[Any, ...], error: str) -> None:
        """The task failed on this side (no answer, a bad reply): Failed, after a
        Submitted with no taskId if the remote agent never made the task."""
        async with self._remote(root).lock:
            await self._failed(root, error)

    async def _failed(self, root: tuple[Any, ...], error: str) -> None:
        log.warning("%s: task %s failed: %s", self.adapter.name, self.adapter.keys_of(root), error)
        remote = self._remote(root)
        remote.state = TaskState.TASK_STATE_FAILED
        if self.adapter.is_complete(root):
            return
        todo: list[tuple[str, dict[str, Any]]] = []
        if "Submitted" not in Seen.of(self.adapter.history(root)).names:
            todo.append(("Submitted", {"task_id": remote.task_id}))
        todo.append(("Failed", {"error": {"error": error, "remote": self.url}}))
        await self._enact(root, todo)

    # Helpers ------------------------------------------------------------------------------

    def _root(self, fa: FeasibleAction) -> tuple[Any, ...]:
        return tuple(fa.keys[k] for k in self.adapter.protocol.root_keys)

    def _remote(self, root: tuple[Any, ...]) -> _Remote:
        return self._tasks.setdefault(root, _Remote())

    def _settled(self, root: tuple[Any, ...]) -> bool:
        remote = self._remote(root)
        return self.adapter.is_complete(root) or settled(
            remote.state, remote.turn, Seen.of(self.adapter.history(root)))

    @contextlib.asynccontextmanager
    async def _guard(self, root: tuple[Any, ...]) -> AsyncIterator[None]:
        """An exchange with the remote agent, stopped by :meth:`stop`; whatever goes
        wrong ends the task as Failed, never in a traceback that stops the adapter."""
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        remote = self._remote(root)
        try:
            yield
        except Misbehaved as exc:
            await self._fail(root, str(exc))
        except Exception as exc:  # a bug here, or in the SDK: the task fails
            log.debug("%s: unexpected", self.adapter.name, exc_info=True)
            await self._fail(root, f"{type(exc).__name__}: {_said(exc)}")
        finally:
            self._running.discard(task)
            if self.adapter.is_complete(root) or remote.state in TERMINAL:
                self._tasks.pop(root, None)


def _said(exc: BaseException, limit: int = 1000) -> str:
    """What an exception says, cut to ``limit`` characters (a remote agent's error
    goes into the enactment, and a hostile one may write megabytes)."""
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _origin(url: str) -> str:
    """scheme://host:port, the port said even when it is the scheme's default."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port: int | str = parts.port or {"http": 80, "https": 443}.get(scheme) or ""
    except ValueError:  # not a port: an origin of its own, matching no other
        port = parts.netloc
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}"


def _here(card: AgentCard, url: str, card_url: str, follow: bool) -> AgentCard:
    """``card`` with only its endpoints on ``url``'s origin, unless ``follow``: a
    card names where to send messages, and a card (a hostile one, or one
    rewritten on the way) naming another host would send the Client's messages
    there. Unanswered if none is left."""
    if follow:
        return card
    here = [i for i in card.supported_interfaces if _origin(i.url) == _origin(url)]
    if not here:
        elsewhere = ", ".join(sorted({i.url[:200] for i in card.supported_interfaces}))[:600]
        raise Unanswered(f"the agent card at {card_url} names no endpoint at {_origin(url)} "
                         f"(it names {elsewhere or 'none'}): RemoteAgent does not follow a "
                         "card to another origin unless built with follow_card=True")
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(here)
    return card


def _card_location(url: str) -> tuple[str, str]:
    """The base URL and the card's path, from a base URL or the card's own URL."""
    parts = urlsplit(url)
    if parts.path.endswith(".json"):
        return f"{parts.scheme}://{parts.netloc}", parts.path
    return url.rstrip("/"), CARD_PATH


__all__ = ["RemoteAgent"]
