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

import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError

from langshaw import json_equal
from peach.adapter import PeachAdapter
from peach.errors import ActionRejected, BindError, ExecutorError
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
    whose values are never shown; ``max_wait`` bounds one ``wait_event`` call.
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
        provided = {a for action in self.hooks.actions for a in self.hooks.provided(action)}
        self.redactor = Redactor({*secrets, *provided})
        self.events = EventLog(limit=max_events)
        self._completed: set[tuple[Any, ...]] = set()
        self._started = False

    # Life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the adapter (unless it runs) and listen to what it applies."""
        if not self.adapter._running:
            await self.adapter.start()
            self._started = True
        self.adapter.listeners.append(self._on_batch)
        seqs = [
            seq for root in self.adapter.enactments() for seq, _, _ in self.adapter.history(root)
        ]
        self.events.last = self.events.horizon = max(seqs, default=0)
        for root in self.adapter.enactments():
            for _, instance, _ in self.adapter.history(root):
                self._learn(instance.bindings)
            if self.adapter.is_complete(root):
                self._completed.add(root)

    async def stop(self) -> None:
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

    def _learn(self, bindings: Mapping[str, Any]) -> None:
        for attribute, value in bindings.items():
            if attribute in self.redactor.attributes:
                self.redactor.add_value(value)

    def _on_batch(self, batch: Any, newly: list[tuple[Any, ...]]) -> None:
        adapter = self.adapter
        events: list[dict[str, Any]] = []
        roots: dict[tuple[Any, ...], None] = {}
        for entry in batch.entries:
            self._learn(entry.instance.bindings)
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
        roots = [
            r for r in self.adapter.enactments()
            if arguments.get("complete") or not self.adapter.is_complete(r)
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
        if after is not None and (not isinstance(after, int) or isinstance(after, bool)):
            raise ToolError("after must be an integer (a sequence number)")
        timeout = arguments.get("timeout", 30)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0:
            raise ToolError("timeout must be a number of seconds, 0 or more")
        return await self.events.wait(after, min(float(timeout), self.max_wait))

    async def _perform(self, action: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Before hooks, ``build_action`` (which finds the enactment from the keys
        and says why an action is not enabled there), ``attempt``, after hooks."""
        adapter = self.adapter
        provided = self.hooks.provided(action)
        allowed = set(action_tool(adapter, adapter.protocol.actions[action], provided, False)
                      ["input_schema"]["properties"])
        unknown = sorted(set(arguments) - allowed)
        if unknown:
            hooked = sorted(set(unknown) & provided)
            if hooked:
                raise ToolError(f"{action}: {', '.join(hooked)} is supplied by the server")
            raise ToolError(
                f"{action} does not take {', '.join(unknown)} (it takes "
                f"{', '.join(sorted(allowed)) or 'nothing'})"
            )
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
                self.redactor.add_value(bindings[attribute])  # whatever a hook set is secret
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
        return {
            "done": action,
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
            try:
                answer = await self.call(params.name, params.arguments)
            except KeyError:
                known = ", ".join(t["name"] for t in self.tools())
                raise MCPError(
                    code=types.INVALID_PARAMS,
                    message=f"no tool {params.name!r} (tools: {known})",
                ) from None
            except ToolError as exc:
                text = str(exc)
                return types.CallToolResult(
                    content=[types.TextContent(text=text)],
                    structured_content={"error": text, **exc.details},
                    is_error=True,
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
        from mcp.server.stdio import stdio_server

        server = self.mcp_server()
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    def http_app(
        self, *, path: str = "/mcp", host: str = "127.0.0.1", token: str | None = None
    ) -> ASGIApp:
        """A streamable HTTP app (ASGI) serving the role at ``path``; with ``token``,
        every request must carry ``Authorization: Bearer <token>``. ``host`` is
        where it will listen: on loopback, requests naming another host are
        refused (DNS rebinding)."""
        app: ASGIApp = self.mcp_server().streamable_http_app(
            streamable_http_path=path, host=host
        )
        return _bearer(app, token) if token else app


def _bearer(app: ASGIApp, token: str) -> ASGIApp:
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
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
