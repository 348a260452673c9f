"""RoleServer: one agent's role in a Langshaw protocol, served as MCP tools.

Any MCP client (a desktop assistant, an IDE, another agent framework) can then
enact the protocol while the adapter enforces it: each action of the role is a
tool whose call is bound and attempted through the adapter, so a call the
protocol does not allow is refused, with the rule it breaks, and changes
nothing. Three more tools read the state: ``enactments`` (what the role may do
now, and with what), ``history`` (one enactment) and ``wait_event`` (what
happens next).

**One tool per action of the role, always listed**, rather than the enabled
actions only: what is enabled changes with every action of anyone, in every
enactment at once, and an action may be enabled in several enactments. A list
that changes would need ``tools/list_changed`` notifications, which many
clients ignore, which the 2026-07-28 protocol delivers only to clients that
subscribe, and which clients caching ``tools/list`` would miss; a stable list
works with all of them. Whether a call is allowed is the adapter's business at
call time, and ``enactments`` says what is enabled where, with the exact schema
an LLM agent would be offered.

Before and after hooks (:class:`peach.llm.Hooks`, by action name) run around
each attempt as for an LLM agent: what a before hook ``provides`` is not in the
tool's schema, and is a secret, like the attributes named in ``secrets``: it is
shown as ``[secret]`` in every answer.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError

from langshaw import json_equal
from peach.adapter import PeachAdapter
from peach.errors import ActionRejected, BindError, ExecutorError
from peach.llm._messages import hide
from peach.llm.prompting import Redactor, compact
from peach.llm.tools import Hooks
from peach.mcp._events import EventLog
from peach.mcp._shapes import (
    BUILTINS,
    action_tool,
    builtin_tools,
    enabled_entry,
    instructions,
    shown,
)

log = logging.getLogger("strabo.mcp")

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


class ToolError(Exception):
    """A call that cannot be carried out: returned to the client as a tool error."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class RoleServer:
    """Serve ``adapter``'s role over MCP (stdio or streamable HTTP).

    ``hooks`` run around attempts (by action name); ``secrets`` names attributes
    whose values are never shown; ``max_wait`` bounds one ``wait_event`` call, and
    ``max_waits`` how many run at once (past it, the oldest ends early: a client
    that went away mid-wait is not told to the server).
    ``async with RoleServer(adapter) as role:`` starts the adapter (unless it
    runs already) and records events until the block exits.
    """

    def __init__(
        self,
        adapter: PeachAdapter,
        *,
        hooks: Hooks | None = None,
        secrets: Iterable[str] = (),
        name: str | None = None,
        max_wait: float = 300.0,
        max_events: int = 10_000,
        max_waits: int = 64,
    ) -> None:
        self.adapter = adapter
        self.hooks = hooks or Hooks()
        self.name = name or f"strabo {adapter.protocol.name} {adapter.role}"
        self.max_wait = max_wait
        actions = {a.name for a in adapter.protocol.actions_of(adapter.role)}
        unknown = self.hooks.actions - actions
        if unknown:
            raise ValueError(
                f"hooks name actions {adapter.role} does not perform in "
                f"{adapter.protocol.name}: {sorted(unknown)}"
            )
        clash = actions & set(BUILTINS)
        if clash:
            raise ValueError(
                f"actions {sorted(clash)} are named like the role server's own tools"
            )
        self._actions = actions
        secret = set(secrets)
        attributes = {a for action in adapter.protocol.actions.values() for a in action.attributes}
        if secret - attributes:  # a misspelt secret would leave the real one shown
            raise ValueError(
                f"secrets name attributes {adapter.protocol.name} does not have: "
                f"{', '.join(sorted(secret - attributes))} (attributes: "
                f"{', '.join(sorted(attributes))})"
            )
        provided = {a for action in self.hooks.actions for a in self.hooks.provided(action)}
        self.redactor = Redactor({*secret, *provided})
        self.events = EventLog(limit=max_events, max_waits=max_waits)
        self._completed: set[tuple[Any, ...]] = set()
        self._started = False
        self._listening = False
        self._servers: list[Server[Any]] = []  # those serving HTTP, whose sessions stop() ends

    # Life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the adapter (unless it runs) and listen to what it applies."""
        if self._listening:
            return
        if not self.adapter.running:
            await self.adapter.start()
            self._started = True
        self.adapter.listeners.append(self._on_batch)
        self._listening = True
        self.events.closed = False  # stopped before, started again
        seqs = [
            seq for root in self.adapter.enactments() for seq, _, _ in self.adapter.history(root)
        ]
        self.events.last = self.events.horizon = max(seqs, default=0)
        for root in self.adapter.enactments():
            for _, instance, who in self.adapter.history(root):
                self._learn(instance.bindings, who)
            if self.adapter.is_complete(root):
                self._completed.add(root)

    async def stop(self) -> None:
        """End the waits in progress and the HTTP sessions, stop listening, and
        stop the adapter if :meth:`start` started it."""
        await self.close_sessions()
        self._listening = False
        if self._on_batch in self.adapter.listeners:
            self.adapter.listeners.remove(self._on_batch)
        if self._started:
            self._started = False
            await self.adapter.stop()

    async def __aenter__(self) -> RoleServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def close_sessions(self) -> None:
        """End every ``wait_event`` in progress (its client is told the server is
        stopping) and every streamable HTTP session, so that the HTTP server can
        stop at once rather than wait for clients that keep a stream open."""
        self.events.close()
        try:  # the waits answer their clients before the sessions end
            await asyncio.wait_for(self.events.idle.wait(), 1.0)
        except TimeoutError:
            log.warning("%s: %d waits still running at stop", self.name, self.events.waiting)
        for server in self._servers:
            manager = getattr(server, "_session_manager", None)
            for transport in list(getattr(manager, "_server_instances", {}).values()):
                try:
                    await transport.terminate()
                except Exception as exc:  # already gone: nothing to end
                    log.debug("%s: ending an MCP session: %s", self.name, exc)

    def _learn(self, bindings: Mapping[str, Any], performer: str) -> None:
        # Only the principal's values are secrets: what its hooks or code bound,
        # not what the client wrote (Redactor.written) nor a counterpart bound.
        self.redactor.bound(bindings, own=performer == self.adapter.name)

    def _on_batch(self, batch: Any, newly: list[tuple[Any, ...]]) -> None:
        try:
            self._record(batch, newly)
        except Exception:  # never the adapter's problem; the events of one batch are lost
            log.exception("%s: cannot record the events of batch %s", self.name,
                          getattr(batch, "seq", "?"))

    def _record(self, batch: Any, newly: list[tuple[Any, ...]]) -> None:
        adapter = self.adapter
        events: list[dict[str, Any]] = []
        roots: dict[tuple[Any, ...], None] = {}
        for entry in batch.entries:
            self._learn(entry.instance.bindings, entry.performer)
            events.append({
                "kind": "action",
                "action": entry.instance.name,
                "by": entry.performer,
                "keys": entry.instance.keys,
                "bindings": shown(entry.instance, self.redactor),
            })
            roots[adapter.state.root_of(entry.instance.bindings)] = None
        for root, feasible in newly:
            if root != "initiating":
                events.append({"kind": "enabled", "action": feasible.name, "keys": feasible.keys})
        for root in roots:
            if root not in self._completed and adapter.is_complete(root):
                self._completed.add(root)
                events.append({"kind": "complete", "keys": adapter.keys_of(root)})
        self.events.add(batch.seq, events)

    # The tools --------------------------------------------------------------------------

    def tools(self) -> list[dict[str, Any]]:
        """Every tool, as ``{"name", "description", "input_schema"}``."""
        initiating = {f.name for f in self.adapter.initiating()}
        specs = [
            action_tool(self.adapter, action, self.hooks.provided(action.name),
                        action.name in initiating)
            for action in self.adapter.protocol.actions_of(self.adapter.role)
        ]
        return [*specs, *builtin_tools(self.adapter)]

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Carry out one tool call; returns the answer (JSON), or raises
        :class:`ToolError` (a refusal, an invalid call) or ``KeyError`` (no such tool)."""
        arguments = dict(arguments or {})
        if name == "enactments":
            return self._enactments(arguments)
        if name == "history":
            return self._history(arguments)
        if name == "wait_event":
            return await self._wait(arguments)
        if name in self._actions:
            return await self._perform(name, arguments)
        raise KeyError(name)

    def _offers(self, root: tuple[Any, ...]) -> list[dict[str, Any]]:
        return [
            enabled_entry(self.adapter, f, self.hooks.provided(f.name), self.redactor)
            for f in self.adapter.enabled(root)
        ]

    def _summary(self, root: tuple[Any, ...]) -> dict[str, Any]:
        history = self.adapter.history(root)
        last = f"{history[-1][1].name} by {history[-1][2]}" if history else None
        return {
            "keys": self.adapter.keys_of(root),
            "complete": self.adapter.is_complete(root),
            "actions": len(history),
            "last": last,
            "last_seq": history[-1][0] if history else None,
        }

    def _enactments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        _only(arguments, {"complete", "limit"}, "enactments")
        limit = _positive(arguments.get("limit", 20), "limit")
        complete = arguments.get("complete", False)
        if not isinstance(complete, bool):
            raise ToolError("complete must be true or false")
        roots = [
            r for r in self.adapter.enactments()
            if complete or not self.adapter.is_complete(r)
        ][-limit:]
        initiating = self.adapter.initiating()
        return {
            "enactments": [{**self._summary(r), "you_may": self._offers(r)} for r in roots],
            "new": [
                enabled_entry(self.adapter, f, self.hooks.provided(f.name), self.redactor)
                for f in initiating
            ],
            "last_seq": self.events.last,
        }

    def _root(self, arguments: dict[str, Any]) -> tuple[Any, ...]:
        keys = self.adapter.protocol.root_keys
        missing = [k for k in keys if k not in arguments]
        if missing:
            raise ToolError(f"give the enactment's {', '.join(missing)}")
        _keys(arguments, keys)
        root = tuple(arguments[k] for k in keys)
        if root not in set(self.adapter.enactments()):
            where = ", ".join(f"{k}={v!r}" for k, v in zip(keys, root, strict=True))
            raise ToolError(f"there is no enactment {where} (call enactments to list them)")
        return root

    def _history(self, arguments: dict[str, Any]) -> dict[str, Any]:
        keys = self.adapter.protocol.root_keys
        _only(arguments, {*keys, "limit"}, "history")
        limit = _positive(arguments.get("limit", 50), "limit")
        root = self._root(arguments)
        history = self.adapter.history(root)
        return {
            **self._summary(root),
            "history": [
                {"seq": seq, "action": i.name, "by": who, "bindings": shown(i, self.redactor)}
                for seq, i, who in history[-limit:]
            ],
            "you_may": self._offers(root),
        }

    async def _wait(self, arguments: dict[str, Any]) -> dict[str, Any]:
        _only(arguments, {"after", "timeout"}, "wait_event")
        after = arguments.get("after")
        last = self.events.last
        if after is not None and (not isinstance(after, int) or isinstance(after, bool)):
            raise ToolError("after must be an integer (a sequence number)")
        if after is not None and not 0 <= after <= last:
            raise ToolError(
                f"after {after} is no sequence number of this server (the last is {last}): "
                "give one from history or a previous answer, or leave it out to wait "
                "for what comes next"
            )
        timeout = arguments.get("timeout", 30)
        # "not >= 0" refuses a NaN too (JSON parsers accept one; it would never end).
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout >= 0:
            raise ToolError("timeout must be a number of seconds, 0 or more")
        try:
            return await self.events.wait(after, min(float(timeout), self.max_wait))
        except EOFError:
            raise ToolError("the role server is stopping: no more events") from None

    async def _perform(self, action: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Before hooks, ``build_action`` (which finds the enactment from the keys
        and says why an action is not enabled there), ``attempt``, after hooks."""
        adapter = self.adapter
        provided = self.hooks.provided(action)
        allowed = set(action_tool(adapter, adapter.protocol.actions[action], provided, False)
                      ["input_schema"]["properties"])
        unknown = sorted(set(arguments) - allowed)
        _keys(arguments, adapter.protocol.actions[action].keys)
        if unknown:
            hooked = sorted(set(unknown) & provided)
            if hooked:
                raise ToolError(f"{action}: {', '.join(hooked)} is supplied by the server")
            raise ToolError(
                f"{action} does not take {', '.join(unknown)} (it takes "
                f"{', '.join(sorted(allowed)) or 'nothing'})"
            )
        self.redactor.written(arguments)
        try:
            bindings = await self.hooks.run_before(action, arguments)
        except Exception as exc:  # its message may hold what it was fetching: not shown
            log.warning("%s: a before hook for %s failed (%s)", self.name, action,
                        type(exc).__name__)
            raise ToolError(
                f"{action} was not attempted: a before hook failed ({type(exc).__name__})"
            ) from None
        for attribute in {*provided, *bindings}:
            if attribute in bindings and (
                attribute in provided
                or attribute not in arguments
                or not json_equal(arguments[attribute], bindings[attribute])
            ):
                hide(self.redactor, bindings[attribute])  # whatever a hook set is secret
        try:
            instance = adapter.build_action(action, bindings)
        except BindError as exc:
            await self._after(action, None, str(exc))
            rule = f" (rule: {exc.rule})" if exc.rule else ""
            raise ToolError(
                self.redactor.text(f"{exc}{rule}"), rule=exc.rule, attribute=exc.attribute
            ) from None
        try:
            [done] = await adapter.attempt([instance])
        except ActionRejected as exc:
            await self._after(action, instance, f"{exc.rule}: {exc.message}")
            raise ToolError(
                self.redactor.text(f"{action} was refused ({exc.rule}): {exc.message}"),
                rule=exc.rule, attribute=exc.violation.attribute,
            ) from None
        except ExecutorError as exc:
            await self._after(action, instance, str(exc))
            raise ToolError(self.redactor.text(f"{action} could not be attempted: {exc}")) from None
        note = await self._after(action, done, None)
        root = adapter.state.root_of(done.bindings)
        log.info("%s: %s %s", self.name, action, compact(shown(done, self.redactor), 200))
        # This action's own sequence number: what others did while it was being
        # answered (during the attempt's round trip or the after hooks) is already
        # in the enactment's last_seq, so waiting after that would skip it.
        seq = next((n for n, i, _ in reversed(adapter.history(root))
                    if i.name == done.name and i.keys == done.keys), None)
        return {
            "done": action,
            "seq": seq,
            "keys": done.keys,
            "bindings": shown(done, self.redactor),
            **({"after_hook": note} if note else {}),
            "enactment": self._summary(root),
            "you_may": self._offers(root),
        }

    async def _after(self, action: str, instance: Any, error: str | None) -> str:
        try:
            await self.hooks.run_after(action, instance, error)
        except Exception as exc:  # reported, never mistaken for the action's outcome
            text = self.redactor.text(f"{type(exc).__name__}: {exc}")
            log.warning("%s: after hook for %s failed: %s", self.name, action, text)
            return f"an after hook failed: {text}"
        return ""

    # MCP --------------------------------------------------------------------------------

    def mcp_server(self) -> Server[Any]:
        """A low-level MCP server whose tools are this role's (a new one each call:
        a server serves one streamable HTTP app)."""

        async def list_tools(
            ctx: Any, params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[types.Tool(**t) for t in self.tools()])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            if params.name not in self._actions and params.name not in BUILTINS:
                known = ", ".join(t["name"] for t in self.tools())
                raise MCPError(
                    code=types.INVALID_PARAMS,
                    message=f"no tool {params.name[:80]!r} (tools: {known})",
                )
            try:
                answer = await self.call(params.name, params.arguments)
            except ToolError as exc:
                return _refusal(str(exc), exc.details)
            except Exception as exc:  # a bug of ours: the client is told, state is intact
                text = self.redactor.text(f"{type(exc).__name__}: {exc}")[:300]
                log.error("%s: %s failed: %s", self.name, params.name, text)
                log.debug("%s: %s failed", self.name, params.name, exc_info=True)
                return _refusal(
                    f"{params.name} failed inside the role server ({text}); nothing was "
                    "attempted unless history shows it", {}
                )
            return types.CallToolResult(
                content=[types.TextContent(text=compact(answer, 100_000))],
                structured_content=answer,
            )

        return Server(
            self.name,
            instructions=instructions(self.adapter, self.adapter.name),
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )

    async def serve_stdio(self) -> None:
        """Serve one client over this process's stdin and stdout, until it closes stdin."""
        from peach.mcp._stdio import serve_stdio

        await serve_stdio(self.mcp_server())

    def http_app(
        self, *, path: str = "/mcp", host: str = "127.0.0.1", token: str | None = None
    ) -> ASGIApp:
        """A streamable HTTP app (ASGI) serving the role at ``path``; with ``token``,
        every request must carry ``Authorization: Bearer <token>``. ``host`` is
        where it will listen: on loopback, requests naming another host are
        refused (DNS rebinding)."""
        if token is not None and not token.strip():
            raise ValueError("an empty token would let anyone in: give a token, or None")
        server = self.mcp_server()
        self._servers.append(server)
        app: ASGIApp = server.streamable_http_app(streamable_http_path=path, host=host)
        return _bearer(app, token) if token is not None else app


def _bearer(app: ASGIApp, token: str) -> ASGIApp:
    expected = token.encode()

    def allowed(scope: Any) -> bool:
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        scheme, _, credentials = given.strip().partition(b" ")
        # Compared in full whatever the scheme, so the time says nothing of the token.
        same = hmac.compare_digest(credentials.strip(), expected)
        return same and scheme.lower() == b"bearer"

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket" and not allowed(scope):
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] == "http" and not allowed(scope):
            await send({
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"text/plain"),
                            (b"www-authenticate", b"Bearer")],
            })
            await send({"type": "http.response.body",
                        "body": b"a bearer token is needed (Authorization: Bearer ...)\n"})
            return
        await app(scope, receive, send)

    return guarded


def _refusal(text: str, details: Mapping[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content={"error": text, **details},
        is_error=True,
    )


def _keys(arguments: Mapping[str, Any], keys: Iterable[str]) -> None:
    """Keys given are text or numbers: a list, an object, null or a boolean
    cannot name an enactment (and a list or an object cannot even be looked up)."""
    for key in keys:
        value = arguments.get(key)
        if key in arguments and (
            isinstance(value, bool) or not isinstance(value, str | int | float)
            or (isinstance(value, float) and not math.isfinite(value))
        ):
            raise ToolError(
                f"{key} must be a key: text or an integer, not {compact(value, 60)}",
                rule="type", attribute=key,
            )


def _only(arguments: Mapping[str, Any], allowed: set[str], tool: str) -> None:
    unknown = sorted(set(arguments) - allowed)
    if unknown:
        raise ToolError(
            f"{tool} does not take {', '.join(unknown)} (it takes {', '.join(sorted(allowed))})"
        )


def _positive(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ToolError(f"{name} must be a positive integer")
    return value


__all__ = ["RoleServer", "ToolError"]
