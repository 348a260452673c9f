"""UCP checkout over MCP, as the Business proxies send it (``transport="mcp"``).

A merchant serving UCP 2026-04-08 may serve checkout over MCP beside REST
(checkout-mcp.md): five tools at an endpoint its profile lists in
``services["dev.ucp.shopping"]`` (``transport: "mcp"``). The proxies' routes stay
REST-shaped (a method and a path); only the sending changes. :class:`McpCheckout`
is a client with the proxy's request interface (``syncserver.client.Client``)
that sends each checkout request as the tool call it stands for and gives back
the answer REST would have given, so that the proxy's idempotency keys,
retries, failure policies and field mapping work unchanged:

- ``POST /checkout-sessions`` is ``create_checkout``, ``GET`` and ``PUT
  /checkout-sessions/{id}`` are ``get_checkout`` and ``update_checkout``, ``POST
  .../complete`` and ``.../cancel`` are ``complete_checkout`` and
  ``cancel_checkout``; ``UCP-Agent``'s profile and ``Idempotency-Key`` go in
  ``meta``, the path's id in ``id``, the body (without its ``id``) in ``checkout``;
- a result's ``structuredContent`` is a 200 answer; a JSON-RPC error is the
  status REST gives: ``-32000`` the ``status`` in its data, ``-32001`` the
  negotiation failure's (400, 422 or 424, by ``data.code``), ``-32602`` 400,
  ``-32603`` 500; no answer (refused, timed out, a broken session) is
  :class:`~syncserver.client.NoAnswer`, which the proxy retries;
- any other request (discovery, orders) goes over REST.

The first call agrees on MCP's stateless revision with the server
(``server/discover``); where the server speaks it in plain JSON, each call is
one POST through the proxy's lean HTTP client (:mod:`strabo.ucp._mcp_lean`:
the SDK's client costs several times its CPU per call). Anything else, and
``client="sdk"``, goes through the SDK's ``mcp.Client`` over streamable HTTP:
a session opened on the first call and held by a task of its own, since the
SDK's context must be left in the task that entered it; calls come from any
task. A call that gets no answer drops what was agreed (the session, or the
discovery), and the next try starts anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from strabo.ucp._mcp_lean import Fallback, LeanMcp
from strabo.ucp._routed import TOOLS, Routed, tool_of
from syncserver.client import Client, NoAnswer

log = logging.getLogger("strabo.ucp")

TRANSPORTS = ("rest", "mcp", "a2a")
"""The transports a Business proxy can speak checkout over."""

_NO_CHECKOUT = {"get_checkout", "cancel_checkout"}
_NEGOTIATION_STATUS = {"invalid_profile_url": 400, "profile_unreachable": 424,
                       "profile_malformed": 422, "version_unsupported": 422}
"""The REST status of each negotiation failure (the merchant's ``_negotiation``)."""


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def rebased(url: str, read_from: str) -> str:
    """``url`` (an endpoint a profile or an agent card names) with the origin
    of ``read_from`` (where it was read) when it names ``localhost`` and that is
    another loopback origin: a hard-coded development default (Google's sample
    agent's ``http://localhost:10999``), true only on its default port. One
    naming an address is taken at its word, and one urllib cannot read is left
    for the transport to refuse (as "not an http(s) URL")."""
    try:
        named, there = urlsplit(url), urlsplit(read_from)
    except ValueError:  # "http://[::1/": urllib refuses it
        return url
    if named.hostname == "localhost" and there.hostname in _LOOPBACK and (
            named.netloc != there.netloc):
        return named._replace(scheme=there.scheme, netloc=there.netloc).geturl()
    return url


def mcp_endpoint(profile: Any, read_from: str | None = None) -> str | None:
    """The MCP endpoint a discovery profile lists for shopping, or None; with
    ``read_from`` (where the profile was read), :func:`rebased` onto it, as an
    A2A agent card's URL is (strabo.ucp.a2a_transport.a2a_endpoint)."""
    found = _listed_endpoint(profile)
    return found if found is None or read_from is None else rebased(found, read_from)


def _listed_endpoint(profile: Any) -> str | None:
    ucp = profile.get("ucp") if isinstance(profile, dict) else None
    services = ucp.get("services") if isinstance(ucp, dict) else None
    entries = services.get("dev.ucp.shopping") if isinstance(services, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("transport") == "mcp" and isinstance(
                entry.get("endpoint"), str):
            return str(entry["endpoint"])
    return None


def arguments_of(tool: str, checkout: str | None, body: Any,
                 headers: Mapping[str, str]) -> dict[str, Any]:
    """The tool's arguments for a REST request: ``meta`` from its headers,
    ``id`` from its path, ``checkout`` from its body."""
    lower = {k.lower(): v for k, v in headers.items()}
    meta: dict[str, Any] = {}
    match = re.search(r'profile\s*=\s*"([^"]*)"', lower.get("ucp-agent", ""))
    if match:
        meta["ucp-agent"] = {"profile": match.group(1)}
    if "idempotency-key" in lower:
        meta["idempotency-key"] = lower["idempotency-key"]
    arguments: dict[str, Any] = {"meta": meta}
    if checkout is not None:
        arguments["id"] = checkout
    if tool not in _NO_CHECKOUT:
        given = body if isinstance(body, dict) else {}
        arguments["checkout"] = {k: v for k, v in given.items()
                                 if k != "id" or checkout is None}
    return arguments


@dataclass(frozen=True)
class McpAnswer:
    """A tool call's outcome read as the REST answer it stands for
    (``syncserver.client.Answer``)."""

    status_code: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def reason_phrase(self) -> str:
        return "OK" if self.status_code < 400 else "MCP error"

    @property
    def content(self) -> bytes:
        return b"" if self.body is None else json.dumps(self.body).encode()

    @property
    def text(self) -> str:
        return self.content.decode()

    def json(self) -> Any:
        return self.body


def answer_of_result(result: Any) -> McpAnswer:
    """A tool result: its ``structuredContent`` (or JSON text) as a 200; a
    result flagged ``isError`` as a 500 with its text."""
    texts = [getattr(c, "text", "") for c in (getattr(result, "content", None) or [])]
    if getattr(result, "is_error", False):
        return McpAnswer(500, {"code": "tool_error", "content": " ".join(texts)[:500]})
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        return McpAnswer(200, structured)
    try:
        return McpAnswer(200, json.loads(texts[0]) if texts else {})
    except ValueError:
        return McpAnswer(502, {"code": "malformed_answer",
                               "content": "the tool's result is not JSON"})


def answer_of_error(code: int, message: str, data: Any) -> McpAnswer:
    """A JSON-RPC error as the REST answer the merchant gives for it."""
    body: dict[str, Any] = dict(data) if isinstance(data, dict) else {}
    headers: dict[str, str] = {}
    if code == -32000:
        status = body.pop("status", 500)
        retry = body.pop("retry_after", None)
        if retry is not None:
            headers["retry-after"] = str(retry)
        status = status if isinstance(status, int) and 400 <= status < 600 else 500
    elif code == -32001:
        status = _NEGOTIATION_STATUS.get(str(body.get("code")), 422)
    elif code == -32602:
        status = 400
    else:
        status = 500
    body.setdefault("code", "invalid" if status == 400 else "error")
    body.setdefault("content", message)
    return McpAnswer(status, body, headers)


class _Session:
    """One MCP session, held open by a task of its own until :meth:`close`."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        self.endpoint, self.timeout = endpoint, timeout
        self.client: Any = None
        self._ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task = asyncio.create_task(self._hold(), name=f"mcp session {endpoint}")

    async def _hold(self) -> None:
        from mcp import Client as McpClient

        try:
            async with McpClient(self.endpoint, read_timeout_seconds=self.timeout) as client:
                self._ready.set_result(client)
                await self._closing.wait()
        except BaseException as exc:
            if not self._ready.done():  # closed while opening: no cancellation of the callers'
                self._ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError(
                    "the session was closed while it opened"))
            elif not isinstance(exc, asyncio.CancelledError):
                log.info("MCP session to %s ended: %r", self.endpoint, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def opened(self) -> Any:
        async with asyncio.timeout(self.timeout):
            self.client = await asyncio.shield(self._ready)
        return self.client

    async def close(self) -> None:
        self._closing.set()
        if not self._ready.done():  # still opening (a probe the server never answers):
            self._task.cancel()  # nothing to leave cleanly, and no second timeout to wait
        try:
            async with asyncio.timeout(self.timeout):
                await asyncio.shield(self._task)
        except BaseException:  # a session that will not end is cancelled
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


CLIENTS = ("auto", "sdk")
"""What :class:`McpCheckout`'s ``client`` takes: ``"auto"``, the lean client
where the server speaks MCP's stateless revision in plain JSON and the SDK's
elsewhere; ``"sdk"``, the SDK's always."""


class McpCheckout:
    """Checkout over MCP at ``endpoint``; other requests through a REST client
    (:meth:`over`). :meth:`aclose` ends the session."""

    def __init__(self, endpoint: str, timeout: float = 10.0, client: str = "auto") -> None:
        if client not in CLIENTS:
            raise ValueError(f"client must be one of {', '.join(CLIENTS)}, not {client!r}")
        self.endpoint, self.timeout = endpoint, timeout
        self.client = client
        self._session: _Session | None = None
        self._lean: LeanMcp | None = None  # agreed with the server (discover)
        self._retired: list[LeanMcp] = []
        self._opening = asyncio.Lock()
        self._closings = 0  # aclose()s so far: what a call opens after one is not kept
        self.calls = 0

    def over(self, rest: Client) -> Client:
        """A client that sends checkout requests here and others to ``rest``."""
        return Routed(lambda tool, checkout, body, headers: self.call(
            tool, arguments_of(tool, checkout, body, headers)), rest)

    async def call(self, tool: str, arguments: dict[str, Any]) -> McpAnswer:
        """Call ``tool``; raise NoAnswer when there is none (and drop the session)."""
        closings = self._closings
        if self.client == "auto":
            lean = self._lean if self._lean is not None else await self._discover(closings)
            if lean is not None:
                try:
                    result = await lean.call_tool(tool, arguments)
                except Fallback as why:
                    log.info("MCP at %s: the SDK's client from now on (%s)", self.endpoint, why)
                    self.client = "sdk"
                    self._retire(lean)
                    if self._closings != closings:  # aclose() meanwhile: open nothing
                        raise NoAnswer(f"{tool} over MCP: the client was closed") from None
                except BaseException as exc:
                    return await self._failed(exc, tool, lambda: self._forget(lean))
                else:
                    self.calls += 1
                    return answer_of_result(result)
        session = await self._open()
        try:
            result = await session.client.call_tool(tool, arguments)
        except BaseException as exc:
            return await self._failed(exc, tool, lambda: self._drop(session))
        self.calls += 1
        return answer_of_result(result)

    async def _failed(self, exc: BaseException, tool: str,
                      forget: Callable[[], Awaitable[None]]) -> McpAnswer:
        """A call's error as its answer, or NoAnswer (after ``forget``, which
        drops the session or discovery that the call went through)."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        if isinstance(exc, MCPError):
            # The SDK's own -32000 (connection closed) and -32001 (timed out)
            # carry no data and are no answer; UCP's use of those codes
            # (a protocol error, a failed negotiation) carries an object.
            if exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT) and not isinstance(
                    exc.data, dict):
                await forget()
                raise NoAnswer(f"{tool} over MCP: {exc.message}"[:300]) from None
            return answer_of_error(exc.code, exc.message, exc.data)
        if not isinstance(exc, Exception):  # cancelled: let it go
            raise exc
        await forget()
        if isinstance(exc, NoAnswer):
            raise NoAnswer(f"{tool} over MCP: {exc}"[:300]) from None
        raise NoAnswer(f"{tool} over MCP: {type(exc).__name__}: {exc}"[:300]) from None

    async def _discover(self, closings: int) -> LeanMcp | None:
        """The lean client once the server has agreed to its revision; None if
        it wants the SDK's (then :attr:`client` is ``"sdk"``)."""
        async with self._opening:
            if self._lean is not None or self.client != "auto":
                return self._lean
            try:  # a profile's endpoint may be any string: "ftp://…" is no answer
                lean = LeanMcp(self.endpoint, self.timeout)
            except ValueError as exc:  # as the SDK's client says of it
                raise NoAnswer(f"cannot open an MCP session at {self.endpoint}: "
                               f"{exc}"[:300]) from None
            try:
                async with asyncio.timeout(self.timeout):
                    agreed = await lean.discover()
            except BaseException as exc:
                await lean.aclose()
                if not isinstance(exc, Exception):
                    raise
                raise NoAnswer(f"cannot open an MCP session at {self.endpoint}: "
                               f"{type(exc).__name__}: {exc}"[:300]) from None
            if not agreed:
                await lean.aclose()
                log.info("MCP at %s: no stateless revision in JSON; the SDK's client",
                         self.endpoint)
                self.client = "sdk"
                return None
            if self._closings != closings:  # aclose() meanwhile: keep nothing open
                await lean.aclose()
                raise NoAnswer(f"cannot open an MCP session at {self.endpoint}: closed")
            self._lean = lean
            return lean

    def _retire(self, lean: LeanMcp) -> None:
        """Leave ``lean`` for the SDK's client; closed by :meth:`aclose`, as
        other calls may still be on it."""
        if self._lean is lean:
            self._lean = None
        if lean not in self._retired:  # concurrent calls fall back together
            self._retired.append(lean)

    async def _forget(self, lean: LeanMcp) -> None:
        if self._lean is lean:
            self._lean = None
        await lean.aclose()

    async def _open(self) -> _Session:
        session = self._session
        if session is not None and session.client is not None:
            return session  # open already: every call but the first (no lock, no timer)
        async with self._opening:
            if self._session is None:
                self._session = _Session(self.endpoint, self.timeout)
            session = self._session
        try:
            await session.opened()
        except BaseException as exc:
            await self._drop(session)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise NoAnswer(f"cannot open an MCP session at {self.endpoint}: "
                           f"{type(exc).__name__}: {exc}"[:300]) from None
        return session

    async def _drop(self, session: _Session) -> None:
        if self._session is session:
            self._session = None
        await session.close()

    async def aclose(self) -> None:
        self._closings += 1
        session, self._session = self._session, None
        leans, self._lean, self._retired = [self._lean, *self._retired], None, []
        for lean in leans:
            if lean is not None:
                await lean.aclose()
        if session is not None:
            await session.close()


__all__ = ["CLIENTS", "TOOLS", "TRANSPORTS", "LeanMcp", "McpAnswer", "McpCheckout", "arguments_of",
           "mcp_endpoint", "rebased", "tool_of"]
