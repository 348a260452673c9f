"""MCPTools: the tools of an MCP server, as actions of an agent, through hooks.

The hybrid role-based architecture types an agent's actions as local code, web
service, LLM, or MCP tool, each run through before and after hooks; a before
hook injects what the model must never see (an API key, a token). strabo has
local tools (:class:`peach.llm.Tool`) and hooks (:class:`peach.llm.Hooks`); this
module adds MCP tools on the same terms:

- an :class:`~peach.llm.LLMAgent` offers them to its model like local tools
  (``LLMAgent(..., tools=weather.tools(), hooks=hooks)``), with the attributes a
  before hook ``provides`` removed from the schema the model sees;
- a coded agent calls them with ``await weather.call("forecast", {...})``, through
  the same hooks.

Hooks are keyed by the tool's name as the agent knows it (``weather_forecast``:
the server's name, then the tool's). Whatever a before hook sets is a secret
from then on: it is replaced by ``[secret]`` in what goes back to the model (a
server echoing the key in its answer or an error does not leak it) and in what
this module and the MCP SDK log. The after hooks see the real result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langshaw import json_equal
from peach.llm._messages import hide
from peach.llm._model import safe_url
from peach.llm._redact import LogScrubber
from peach.llm.prompting import Redactor, compact
from peach.llm.tools import Hooks, Tool

log = logging.getLogger("strabo.mcp")

# Loggers of the MCP SDK that may write message contents (the streamable HTTP
# client logs each server-sent message at DEBUG): their records are scrubbed.
_SDK_LOGGERS = (
    "mcp.client.streamable_http",
    "mcp.client.session",
    "mcp.client.stdio",
    "mcp.shared.jsonrpc_dispatcher",
)

MAX_PAGES = 100  # of a tool listing


class MCPToolError(Exception):
    """An MCP tool call that failed: the tool said so, or the server could not be
    reached or answered with an error. The message has secrets replaced."""


@dataclass
class MCPResult:
    """What a tool returned: ``value`` is its structured content if it gave one,
    else its text; ``raw`` the SDK's ``CallToolResult``."""

    tool: str
    value: Any
    text: str
    is_error: bool = False
    raw: Any = field(default=None, repr=False)


class MCPTools:
    """One MCP server's tools, for an agent.

    ``server`` is a streamable HTTP URL (``http://host:port/mcp``; ``headers``
    are sent with each request) or a command line starting the server over
    stdio (``["python", "server.py"]``; ``env`` is added to its environment,
    ``cwd`` is where it runs). ``hooks`` run around every call. Tools are named
    ``<name>_<tool>`` (just ``<tool>`` with ``prefix=False``); ``only`` keeps
    some of them (by the server's names). ``timeout`` bounds each call, in
    seconds, and ``connect_timeout`` starting or reaching the server and listing
    its tools (default: ``timeout``, at least 30). Use it as ``async with
    MCPTools(...) as weather:``.
    """

    def __init__(
        self,
        name: str,
        server: str | Sequence[str],
        *,
        hooks: Hooks | None = None,
        headers: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        prefix: bool = True,
        only: Iterable[str] | None = None,
        timeout: float = 60.0,
        connect_timeout: float | None = None,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", name):
            raise ValueError(f"MCP server name {name!r}: letters, digits, '_' and '-', 40 at most")
        if isinstance(server, str):
            if not server.startswith(("http://", "https://")):
                raise ValueError(
                    f"MCP server {name}: {server!r} is neither an http(s) URL nor a command "
                    "line (give a command as a list: ['python', 'server.py'])"
                )
        elif not server or not all(isinstance(part, str) for part in server):
            raise ValueError(f"MCP server {name}: the command line is empty")
        self.name = name
        self.server = server if isinstance(server, str) else list(server)
        self.hooks = hooks or Hooks()
        self.headers = dict(headers or {})
        self.env = dict(env or {})
        self.cwd = cwd
        self.prefix = prefix
        self.only = set(only) if only is not None else None
        self.timeout = timeout
        # Starting a server (a Python or npx one, say) may take longer than a call.
        self.connect_timeout = connect_timeout if connect_timeout is not None else max(
            timeout, 30.0
        )
        provided = {a for tool in self.hooks.actions for a in self.hooks.provided(tool)}
        self.redactor = Redactor(provided)
        self._client: Any = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._listed: dict[str, Any] = {}  # agent-side name -> the SDK's Tool
        self._filter = LogScrubber(self.redactor)
        self._filtered: list[logging.Logger] = []

    # Connection -------------------------------------------------------------------------

    async def connect(self) -> None:
        """Start or reach the server, and list its tools."""
        from mcp import Client, StdioServerParameters
        from mcp.client.streamable_http import streamable_http_client

        if self._client is not None:
            return
        self._filtered = [
            logging.getLogger(name)
            for name in {*_SDK_LOGGERS, *logging.root.manager.loggerDict}
            if name.startswith(("mcp.client", "mcp.shared"))
        ]
        for logger in self._filtered:
            logger.addFilter(self._filter)
        stack = contextlib.AsyncExitStack()
        doing = "cannot reach"
        try:
            # One bound for it all: a server that never answers (or a command that
            # is no MCP server) must not hold the agent; the SDK's read timeout
            # alone bounds each request, and it makes several at start.
            async with asyncio.timeout(self.connect_timeout):
                target: Any
                if isinstance(self.server, str):
                    import httpx2

                    http = await stack.enter_async_context(httpx2.AsyncClient(
                        headers=self.headers, timeout=httpx2.Timeout(30.0, read=self.timeout)
                    ))
                    target = streamable_http_client(self.server, http_client=http)
                else:
                    target = StdioServerParameters(
                        command=self.server[0], args=self.server[1:], env=self.env or None,
                        cwd=self.cwd,
                    )
                client = Client(target, read_timeout_seconds=self.timeout)
                await stack.enter_async_context(client)
                doing = "cannot list the tools of"
                listed = await _all_tools(client)
            tools = self._choose(listed)
        except BaseException as exc:
            await stack.aclose()
            self._unfilter()
            if isinstance(exc, MCPToolError):
                raise
            if isinstance(exc, TimeoutError):
                raise MCPToolError(
                    f"{doing} the MCP server {self.name} ({self._where()}): no answer "
                    f"within {self.connect_timeout:g} s (connect_timeout)"
                ) from None
            if isinstance(exc, Exception):
                raise MCPToolError(
                    f"{doing} the MCP server {self.name} ({self._where()}): "
                    f"{self.redactor.text(_describe(exc))}"
                ) from None
            raise
        self._client, self._stack = client, stack
        self._listed = tools
        log.info("%s: %d MCP tools from %s", self.name, len(tools), self._where())

    def _choose(self, listed: list[Any]) -> dict[str, Any]:
        """The tools to offer, by their names here: those ``only`` keeps, whose
        schema a model API takes (others are left out, with a warning)."""
        tools: dict[str, Any] = {}
        for tool in listed:
            if self.only is not None and tool.name not in self.only:
                continue
            local = self._local_name(tool.name)
            problem = _unusable(tool, local)
            if problem and self.only is None:
                log.warning("%s: tool %s left out: %s", self.name, compact(tool.name, 80), problem)
                continue
            if problem:
                raise MCPToolError(f"MCP server {self.name}: tool {tool.name!r} {problem}")
            if local in tools:
                raise MCPToolError(
                    f"MCP server {self.name}: tools {tools[local].name!r} and {tool.name!r} "
                    f"both become {local!r} (keep one with only=[...])"
                )
            tools[local] = tool
        if self.only is not None:
            missing = self.only - {t.name for t in tools.values()}
            if missing:
                names = ", ".join(t.name[:80] for t in listed[:50]) or "none"
                raise MCPToolError(
                    f"MCP server {self.name} has no tool {', '.join(sorted(missing))} "
                    f"(it has {names})"
                )
        return tools

    async def close(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        try:
            if stack is not None:
                await stack.aclose()
        finally:
            self._unfilter()

    async def __aenter__(self) -> MCPTools:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _unfilter(self) -> None:
        for logger in self._filtered:
            logger.removeFilter(self._filter)
        self._filtered = []

    def _where(self) -> str:
        """The server, for messages and logs: a URL without its user, password or
        query (which may hold a key), a command by its first two words."""
        if isinstance(self.server, str):
            return safe_url(self.server)
        return " ".join(self.server[:2])

    def _local_name(self, remote: str) -> str:
        name = f"{self.name}_{remote}" if self.prefix else remote
        return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64]

    # What the agent sees -----------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The tools' names as the agent knows them (and as hooks name them)."""
        return list(self._listed)

    def schema(self, name: str) -> dict[str, Any]:
        """The input schema the model is shown: the server's, less what before
        hooks provide."""
        tool = self._tool(name)[1]
        provided = self.hooks.provided(self._resolve(name))
        schema = dict(tool.input_schema)
        given = schema.get("properties")
        schema["properties"] = {
            k: v for k, v in (given if isinstance(given, dict) else {}).items()
            if k not in provided
        }
        required = schema.pop("required", None)
        if isinstance(required, list):
            schema["required"] = [
                r for r in required if isinstance(r, str) and r not in provided
            ]
        schema["type"] = "object"
        return schema

    def tools(self) -> list[Tool]:
        """The tools, for ``LLMAgent(tools=...)``: each runs the hooks named after it
        and answers the model with secrets replaced."""
        if self._client is None:
            raise RuntimeError(f"MCP server {self.name}: connect first (async with MCPTools(...))")
        made = []
        for local, tool in self._listed.items():
            description = (tool.description or tool.title or tool.name).strip()
            made.append(Tool(
                local,
                f"{description} (tool {tool.name} of the MCP server {self.name})"[:1024],
                self.schema(local),
                _for_model(self, local),
                runs_hooks=True,
            ))
        return made

    # Calling ----------------------------------------------------------------------------

    def _resolve(self, name: str) -> str:
        if name in self._listed:
            return name
        for local, tool in self._listed.items():
            if tool.name == name:
                return local
        known = ", ".join(self._listed) or "none"
        raise MCPToolError(f"MCP server {self.name} offers no tool {name!r} (tools: {known})")

    def _tool(self, name: str) -> tuple[str, Any]:
        local = self._resolve(name)
        return local, self._listed[local]

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> MCPResult:
        """Call a tool (by its name here or on the server) for a coded agent: the
        before hooks, the call, the after hooks. Raises :class:`MCPToolError` when
        the tool fails; the result is the tool's real answer (this is trusted
        code: secrets are only hidden from models and logs)."""
        if self._client is None:
            raise MCPToolError(f"MCP server {self.name}: not connected")
        local, spec = self._tool(tool)
        given = dict(arguments or {})
        try:
            bindings = await self.hooks.run_before(local, given)
        except Exception as exc:  # its message may hold what it was fetching: not shown
            log.warning("%s: a before hook for %s failed (%s)", self.name, local,
                        type(exc).__name__)
            raise MCPToolError(
                f"{local} was not called: a before hook failed ({type(exc).__name__})"
            ) from None
        provided = self.hooks.provided(local)
        changed = sorted(
            k for k in bindings if k not in given or not json_equal(given[k], bindings[k])
        )
        for attribute in {*changed, *provided}:
            if attribute in bindings:  # whatever a hook set is a secret
                hide(self.redactor, bindings[attribute])
        if local in self.hooks.actions:
            log.info("%s: hooks set %s for %s (values not shown)", self.name,
                     ", ".join(changed) or "nothing", local)
        try:
            raw = await self._client.call_tool(spec.name, bindings)
        except Exception as exc:
            message = f"{local}: the MCP server {self.name} failed: {_describe(exc)}"
            await self._after(local, None, message)
            raise MCPToolError(self.redactor.text(message)) from None
        result = _result(local, raw)
        if result.is_error:
            message = f"{local} failed: {result.text or 'the tool reported an error'}"
            await self._after(local, result, message)
            raise MCPToolError(self.redactor.text(message))
        await self._after(local, result, None)
        return result

    async def _after(self, tool: str, result: MCPResult | None, error: str | None) -> None:
        try:
            await self.hooks.run_after(tool, result, error)
        except Exception as exc:  # reported, never mistaken for the call's own outcome
            log.warning("%s: after hook for %s failed: %s", self.name, tool,
                        self.redactor.text(f"{type(exc).__name__}: {exc}"))

    async def call_for_model(self, tool: str, arguments: Mapping[str, Any]) -> Any:
        """A call a model asked for: it may not give what hooks provide, and its
        answer has secrets replaced."""
        local = self._resolve(tool)
        supplied = sorted(set(arguments) & self.hooks.provided(local))
        if supplied:
            raise MCPToolError(f"{local}: {', '.join(supplied)} is supplied for you; leave it out")
        result = await self.call(local, arguments)
        return _scrubbed(self.redactor, result.value)


def _for_model(tools: MCPTools, local: str) -> Any:
    async def call(**arguments: Any) -> Any:
        return await tools.call_for_model(local, arguments)

    call.__qualname__ = f"mcp:{local}"
    return call


async def _all_tools(client: Any) -> list[Any]:
    """Every tool the server lists, page after page (at most ``MAX_PAGES``)."""
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise MCPToolError(f"the server lists its tools in more than {MAX_PAGES} pages")


def _unusable(tool: Any, local: str) -> str:
    """Why a model API would refuse the tool, or ""."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", local):
        return f"has no name a model API takes ({local!r})"
    schema = tool.input_schema
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return "takes no JSON object as its input (its input schema is not of type object)"
    return ""


def _scrubbed(redactor: Redactor, value: Any) -> Any:
    """``value`` with secrets replaced, in the names of an object's members too
    (a server may key its answer by what it was given)."""
    if isinstance(value, dict):
        return {redactor.text(str(k)): _scrubbed(redactor, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(redactor, v) for v in value]
    return redactor.scrub(value)


def _result(tool: str, raw: Any) -> MCPResult:
    texts = []
    for block in raw.content or ():
        kind = getattr(block, "type", "")
        texts.append(block.text if kind == "text" else f"[{kind} content]")
    text = "\n".join(texts)
    value = raw.structured_content if raw.structured_content is not None else text
    return MCPResult(tool, value, text, bool(raw.is_error), raw)


def _describe(exc: BaseException) -> str:
    """An exception as one line (its first; 300 characters at most); an exception
    group by its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = next(iter(str(exc).strip().splitlines()), "")[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["MCPResult", "MCPToolError", "MCPTools"]
