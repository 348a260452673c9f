"""MCP tool calls in the plain case, without the SDK's session machinery.

Why: on the proxy benchmark's machine the MCP SDK's client (``mcp.Client``
over streamable HTTP, anyio memory streams and tasks per request, pydantic
models both ways) costs 2 to 4 ms of CPU per tool call; the same call as
one POST through the proxy's lean HTTP client costs 0.5 to 1.1 ms
(``bench/proxy.py --transport mcp``, its "direct lean MCP client" against the
SDK's ``ClientSession``; docs/proxy.md). A checkout makes four calls.

The plain case is MCP's stateless revision (:data:`VERSIONS`, 2026-07-28): a
``server/discover`` once, then each ``tools/call`` is one POST whose answer is
one JSON-RPC response in ``application/json``. Whatever else a server does
(an older revision's ``initialize`` handshake, an answer as a server-sent event
stream, a result asking for input, a header mismatch, a redirect, a 202) is
the SDK's to speak: :class:`Fallback` says so, and the caller hands that call
and the later ones to the SDK. Resending the call then is safe for UCP's
tools, whose ``meta`` carries the request's idempotency key (a resend is a
replay, as the proxy's own retries are).

What the lean path reads is what the SDK would give the caller for the same
bytes: the body is read by the SDK's own ``jsonrpc_message_adapter`` (the
same checks, the same words), a result is checked as the SDK's
``ClientSession`` checks it (``validate_server_result``, then
``CallToolResult``); a JSON-RPC error (at any status) is the SDK's
:class:`mcp.MCPError` with its code, message and data; an HTTP error without
one is the SDK's stand-in (``-32601`` for a 404, else ``-32603``); a 200 body
that is not one JSON-RPC message is ``-32700``; a response to another id, or
none, is :class:`~syncserver.client.NoAnswer` (at once: the SDK waits out its
timeout for it). tests/strabo/ucp/test_mcp_lean_hostile.py holds the odd cases.
Not checked here: a result against the tool's ``outputSchema`` (the SDK lists
the tools for it, and refuses a result that misses it).
"""

from __future__ import annotations

import itertools
from typing import Any
from urllib.parse import urlsplit

from syncserver.client import Answer, NoAnswer, open_client

ACCEPT = "application/json, text/event-stream"


class Fallback(Exception):
    """The server answered in a way only the SDK's client speaks."""


class Unanswered(NoAnswer):
    """An answer that is not the response to the request (the SDK waits on)."""


def _our_version() -> str:
    """strabo's version, as installed (clientInfo names it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("strabo")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"


def _versions() -> tuple[str, ...]:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return tuple(MODERN_PROTOCOL_VERSIONS)


class LeanMcp:
    """Tool calls to the MCP endpoint ``endpoint`` over its stateless revision;
    :meth:`discover` first (False: speak to it with the SDK)."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        parts = urlsplit(endpoint)
        self.path = parts.path or "/"
        if parts.query:
            self.path += "?" + parts.query
        self.client = open_client(f"{parts.scheme}://{parts.netloc}", timeout)
        self.version: str | None = None
        self._ids = itertools.count(1)
        self._client_info = {"name": "strabo", "version": _our_version()}

    async def discover(self) -> bool:
        """Agree on a stateless revision with ``server/discover``: True if the
        server speaks one of :func:`_versions` in plain JSON, False if it wants
        the SDK (an older revision, another answer shape). Raises NoAnswer when
        the server cannot be reached."""
        from mcp import MCPError
        from mcp_types import DiscoverResult
        from mcp_types.jsonrpc import UNSUPPORTED_PROTOCOL_VERSION
        from pydantic import ValidationError

        ours = _versions()
        proposed = ours[-1]
        for _ in range(2):
            try:
                raw = await self._request("server/discover", {}, proposed)
            except MCPError as exc:
                data = exc.data if isinstance(exc.data, dict) else {}
                supported = data.get("supported")
                mutual = [v for v in ours if isinstance(supported, list) and v in supported]
                if exc.code != UNSUPPORTED_PROTOCOL_VERSION or not mutual or (
                        mutual[-1] == proposed):
                    return False
                proposed = mutual[-1]
                continue
            except (Fallback, Unanswered):  # not the plain case: the SDK's to read
                return False
            _floor_ttl(raw)  # as the SDK's send_discover (else the SDK's handshake)
            try:
                result = DiscoverResult.model_validate(raw)
            except ValidationError:
                return False
            mutual = [v for v in ours if v in result.supported_versions]
            if not mutual:
                return False
            self.version = mutual[-1]
            return True
        return False

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """The tool's result, as the SDK's ``CallToolResult``. Raises MCPError
        for a JSON-RPC error, Fallback for what the SDK must speak, NoAnswer (or
        pydantic's ValidationError, for a result that is not one) otherwise."""
        from mcp import MCPError
        from mcp_types import CallToolResult
        from mcp_types.jsonrpc import HEADER_MISMATCH
        from mcp_types.methods import validate_server_result

        assert self.version is not None, "discover() first"
        try:
            raw = await self._request("tools/call", {"name": name, "arguments": arguments},
                                      self.version, {"mcp-name": name})
        except MCPError as exc:
            if exc.code == HEADER_MISMATCH:  # the SDK re-lists the tools and resends
                raise Fallback(f"{name}: header mismatch") from None
            raise
        if "resultType" not in raw:
            # 2026-07-28 requires it (the SDK refuses a result without it too)
            raise NoAnswer(f"{name}: a result without resultType")
        if raw["resultType"] != "complete":  # input asked for: the SDK's rounds
            raise Fallback(f"{name}: a {raw['resultType']!r} result")
        # As the SDK's ClientSession.send_request: a negative ttlMs floored, then
        # the revision's own shape checked before the model (ValidationError).
        _floor_ttl(raw)
        validate_server_result("tools/call", self.version, raw)
        return CallToolResult.model_validate(raw, by_name=False)

    async def _request(self, method: str, params: dict[str, Any], version: str,
                       headers: dict[str, str] | None = None) -> Any:
        """One JSON-RPC request; its result (raises MCPError for its error)."""
        ident = next(self._ids)
        meta = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientInfo": self._client_info,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        message = {"jsonrpc": "2.0", "id": ident, "method": method,
                   "params": {**params, "_meta": meta}}
        answer = await self.client.request("POST", self.path, message, {
            "accept": ACCEPT, "mcp-protocol-version": version, "mcp-method": method,
            **(headers or {})})
        return _result_of(answer, ident)

    async def aclose(self) -> None:
        await self.client.aclose()


def _floor_ttl(raw: dict[str, Any]) -> None:
    """A negative ``ttlMs`` is 0, as the SDK's ``_clamp_inbound_ttl`` has it."""
    ttl = raw.get("ttlMs")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl < 0:
        raw["ttlMs"] = 0


def _result_of(answer: Answer, ident: int) -> Any:
    """The result in ``answer`` to request ``ident``, read as the SDK reads it:
    the envelope validated by the SDK's own ``jsonrpc_message_adapter`` (so a
    code that is not an int, a missing message, a batch, a ``jsonrpc`` other
    than "2.0", a body nested too deep are what they are to the SDK), and the
    id matched as its dispatcher matches it (``"1"`` is 1)."""
    from mcp import MCPError
    from mcp.shared.dispatcher import coerce_request_id
    from mcp_types import JSONRPCError, JSONRPCResponse, jsonrpc_message_adapter
    from mcp_types.jsonrpc import INTERNAL_ERROR, METHOD_NOT_FOUND, PARSE_ERROR
    from pydantic import ValidationError

    status = answer.status_code
    kind = answer.headers.get("content-type", "").lower()
    json_body = kind.startswith("application/json")
    if status < 400 and (status != 200 or not json_body):
        raise Fallback(f"HTTP {status} {kind or 'without a content type'}")
    message: Any = None
    if json_body:
        try:
            message = jsonrpc_message_adapter.validate_json(answer.content, by_name=False)
        except ValidationError as exc:
            if status < 400:  # the SDK's words for it
                raise MCPError(PARSE_ERROR, f"Failed to parse JSON response: {exc}") from None
    if status >= 400:
        if isinstance(message, JSONRPCError):  # its id is the request's, whatever it says
            raise MCPError(message.error.code, message.error.message, message.error.data)
        if status == 404:  # the SDK's stand-ins for an HTTP error without JSON-RPC
            raise MCPError(METHOD_NOT_FOUND, "Not Found")
        raise MCPError(INTERNAL_ERROR, "Server returned an error response")
    if isinstance(message, JSONRPCResponse | JSONRPCError) and (
            message.id is not None and coerce_request_id(message.id) == ident):
        if isinstance(message, JSONRPCError):
            raise MCPError(message.error.code, message.error.message, message.error.data)
        return message.result
    # A request, a notification, a response to another id: the SDK waits for the
    # response with the request's id until it times out; no answer, at once.
    raise Unanswered("the answer is not the JSON-RPC response to the request")


__all__ = ["ACCEPT", "Fallback", "LeanMcp"]
