"""UCP checkout over MCP, beside REST (checkout-mcp.md and mcp.openrpc.json, 2026-04-08).

A merchant serving 2026-04-08 serves the five checkout tools of the binding
(``create_checkout``, ``get_checkout``, ``update_checkout``, ``complete_checkout``,
``cancel_checkout``) over streamable HTTP at :data:`_discovery.MCP_PATH`, and
lists that endpoint in its profile's ``services``.

Each tool call is turned into the REST request it stands for (``meta["ucp-agent"]``
as ``UCP-Agent``, ``meta["idempotency-key"]`` as ``Idempotency-Key``, ``id`` as the
path, ``checkout`` as the body) and sent to the merchant's own app, in process.
So a checkout over MCP is the same checkout as over REST: the same version
negotiation and translation (``_versioning``), the same rules, idempotency,
webhooks and AP2 signatures, and the same bodies, which come back as the tool's
``structuredContent`` (and as JSON text in ``content``, for older clients).
Nothing about checkout is decided here but how its answers map onto JSON-RPC:

- a checkout, or a business outcome (``ucp.status: "error"`` with ``messages``),
  is a result (checkout-mcp.md, *Business Outcomes*);
- a platform profile that cannot be used or a version not served is error
  ``-32001`` with ``{"code", "content", "continue_url"}`` as ``data``
  (overview.md, *Negotiation Errors*);
- arguments that do not fit the binding's schema are ``-32602``, before any
  request is made, as is a body the REST side refuses as invalid (400);
- other protocol errors (409 on an idempotency key reused or a finished
  checkout, 401, 403, 429, 503) are ``-32000`` with the REST body as ``data``;
  an unexpected failure is ``-32603``.

The binding requires ``idempotency-key`` for complete and cancel only; create
and update without one get a fresh key each (the REST side needs one), so a
retry of those is a new operation, as the binding implies.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ._inprocess import call

log = logging.getLogger("strabo.merchant")

DISCOVERY_ERROR = -32001
"""JSON-RPC code of a negotiation failure (overview.md, *Negotiation Errors*)."""
PROTOCOL_ERROR = -32000
"""JSON-RPC code of the other protocol errors (overview.md, *Protocol Errors*)."""

_NEGOTIATION = {"invalid_profile_url": "UCP discovery failed",
                "profile_unreachable": "UCP discovery failed",
                "profile_malformed": "UCP discovery failed",
                "version_unsupported": "Protocol version not supported"}
_SCHEMA = "https://ucp.dev/2026-04-08/schemas/shopping/checkout.json"


@dataclass(frozen=True)
class Operation:
    """One tool of the binding and the REST call it is."""

    method: str
    path: str  # with {id} where the checkout id goes
    summary: str
    takes_checkout: bool
    needs_key: bool  # meta["idempotency-key"] required

    @property
    def takes_id(self) -> bool:
        return "{id}" in self.path


OPERATIONS: dict[str, Operation] = {
    "create_checkout": Operation("POST", "/checkout-sessions", "Create a checkout session.",
                                 takes_checkout=True, needs_key=False),
    "get_checkout": Operation("GET", "/checkout-sessions/{id}", "Get a checkout session.",
                              takes_checkout=False, needs_key=False),
    "update_checkout": Operation("PUT", "/checkout-sessions/{id}",
                                 "Update a checkout session.",
                                 takes_checkout=True, needs_key=False),
    "complete_checkout": Operation("POST", "/checkout-sessions/{id}/complete",
                                   "Place the order.", takes_checkout=True, needs_key=True),
    "cancel_checkout": Operation("POST", "/checkout-sessions/{id}/cancel",
                                 "Cancel a checkout session.",
                                 takes_checkout=False, needs_key=True),
}
"""The checkout methods of mcp.openrpc.json, in its order."""


def _meta_schema(needs_key: bool) -> dict[str, Any]:
    """``#/components/schemas/meta`` of mcp.openrpc.json; complete and cancel
    also require ``idempotency-key`` (their ``allOf``, flattened)."""
    return {
        "type": "object",
        "description": "Request metadata.",
        "required": ["ucp-agent", "idempotency-key"] if needs_key else ["ucp-agent"],
        "additionalProperties": True,
        "properties": {
            "ucp-agent": {
                "type": "object",
                "description": "Platform agent identification. Maps to HTTP UCP-Agent header.",
                "required": ["profile"],
                "properties": {"profile": {
                    "type": "string", "format": "uri",
                    "description": "URL to the platform's UCP profile document."}},
            },
            "idempotency-key": {
                "type": "string", "format": "uuid",
                "description": "Unique key for retry safety. Maps to HTTP Idempotency-Key header.",
            },
        },
    }


def input_schema(operation: Operation) -> dict[str, Any]:
    """The tool's input schema: the method's params (``meta``, ``id``, ``checkout``)."""
    properties: dict[str, Any] = {"meta": _meta_schema(operation.needs_key)}
    if operation.takes_id:
        properties["id"] = {"type": "string", "description": "The ID of the checkout session."}
    if operation.takes_checkout:
        properties["checkout"] = {
            "type": "object",
            "description": f"The checkout ({_SCHEMA}), without its id; the same body as REST.",
        }
    return {"type": "object", "properties": properties, "required": list(properties)}


def tools() -> list[types.Tool]:
    """The five checkout tools."""
    return [types.Tool(name=name, description=op.summary, input_schema=input_schema(op),
                       output_schema={"type": "object", "description":
                                      "checkout.json, or types/error_response.json"})
            for name, op in OPERATIONS.items()]


class CheckoutMcp:
    """The MCP endpoint (an ASGI app) of one merchant app, which it calls back.

    :meth:`bind` gives it that app; :meth:`running` must wrap the app's
    lifespan (the SDK's session manager lives there). A request that comes
    while it is not running is answered 503, not with a traceback."""

    def __init__(self) -> None:
        self._app: ASGIApp | None = None
        self._manager: StreamableHTTPSessionManager | None = None

    def bind(self, app: ASGIApp) -> None:
        """The merchant app that REST requests go to."""
        self._app = app

    def server(self) -> Server[Any]:
        """A low-level MCP server with the checkout tools."""

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=tools())

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return await self.call(params.name, params.arguments, getattr(ctx, "request", None))

        return Server("strabo-merchant", on_list_tools=list_tools, on_call_tool=call_tool)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve MCP while inside: a new session manager each time (the SDK runs
        one only once), stateless, since no tool calls the client back."""
        manager = StreamableHTTPSessionManager(app=self.server(), stateless=True)
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._manager is None:
            answer = JSONResponse({"code": "unavailable",
                                   "content": "MCP is served only while the app's lifespan runs"},
                                  status_code=503)
            await answer(scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)

    # ------------------------------------------------------------ one tool call

    async def call(self, name: str, arguments: Mapping[str, Any] | None,
                   origin: Any = None) -> types.CallToolResult:
        """Tool ``name`` called with ``arguments``; ``origin`` is the HTTP request
        that carried the call (its host makes the merchant's links)."""
        operation = OPERATIONS.get(name)
        if operation is None:
            raise MCPError(types.INVALID_PARAMS,
                           f"no tool {name[:80]!r} (tools: {', '.join(OPERATIONS)})")
        path, headers, body = _request(name, operation, dict(arguments or {}))
        try:
            status, answer, retry_after = await self._send(
                operation.method, path, headers, body, getattr(origin, "scope", None))
        except Exception as exc:  # a bug of ours: said as such, never a hung client
            log.exception("MCP %s failed", name)
            raise MCPError(types.INTERNAL_ERROR,
                           f"{name} failed inside the merchant ({type(exc).__name__})") from exc
        return _outcome(status, answer, retry_after)

    async def _send(self, method: str, path: str, headers: dict[str, str], body: Any,
                    origin: Mapping[str, Any] | None) -> tuple[int, Any, str | None]:
        """The REST request, through the merchant app itself: status, JSON body
        (or text), and any Retry-After."""
        if self._app is None:
            raise RuntimeError("CheckoutMcp is not bound to a merchant app")
        origin = dict(origin or {})
        host = dict(origin.get("headers") or ()).get(b"host")
        if host is not None:
            origin["host"] = host.decode("latin-1")
        answer = await call(self._app, method, path, headers, body, origin)
        return answer.status, answer.body, answer.headers.get("retry-after")


def _invalid(message: str) -> MCPError:
    return MCPError(types.INVALID_PARAMS, message)


def _header_value(value: Any, what: str, limit: int = 255) -> str:
    """A text that can go in an HTTP header as it is (printable ASCII)."""
    if not isinstance(value, str) or not value:
        raise _invalid(f"{what} must be a non-empty string")
    if len(value) > limit or not all(" " <= c <= "~" for c in value):
        raise _invalid(f"{what} must be printable ASCII, at most {limit} characters")
    return value


def _request(name: str, operation: Operation,
             arguments: dict[str, Any]) -> tuple[str, dict[str, str], Any]:
    """The REST path, headers and body of a tool call, its arguments checked
    against the binding's input schema first (``-32602`` on any misfit)."""
    allowed = set(input_schema(operation)["properties"])
    unknown = sorted(set(arguments) - allowed)
    if unknown:
        raise _invalid(f"{name} does not take {', '.join(unknown)} "
                       f"(it takes {', '.join(sorted(allowed))})")
    missing = [key for key in allowed if key not in arguments]
    if missing:
        raise _invalid(f"{name} needs {', '.join(missing)}")
    meta = arguments["meta"]
    agent = meta.get("ucp-agent") if isinstance(meta, dict) else None
    if not isinstance(agent, dict) or "profile" not in agent:
        raise _invalid('meta must be an object with "ucp-agent": {"profile": URL}')
    profile = _header_value(agent["profile"], 'meta["ucp-agent"].profile', limit=2048)
    if '"' in profile or "\\" in profile or " " in profile:
        raise MCPError(DISCOVERY_ERROR, "UCP discovery failed", {
            "code": "invalid_profile_url", "content": "the profile URL is malformed"})
    key = meta.get("idempotency-key")
    if key is None and operation.needs_key:
        raise _invalid(f'{name} needs meta["idempotency-key"] (for retry safety)')
    headers = {
        "ucp-agent": f'profile="{profile}"',
        "request-id": str(uuid.uuid4()),
        "idempotency-key": (_header_value(key, 'meta["idempotency-key"]')
                            if key is not None else str(uuid.uuid4())),
    }
    path = operation.path
    if operation.takes_id:
        checkout_id = _header_value(arguments["id"], "id")
        if "/" in checkout_id or "?" in checkout_id or "#" in checkout_id:
            raise _invalid("id is not a checkout id (it has '/', '?' or '#')")
        path = path.replace("{id}", checkout_id)
    body = None
    if operation.takes_checkout:
        body = arguments["checkout"]
        if not isinstance(body, dict):
            raise _invalid("checkout must be an object")
        if operation.takes_id and "id" in body:
            raise _invalid("checkout must not contain id: the checkout is named by the "
                           "top-level id argument")
    return path, headers, body


def _outcome(status: int, answer: Any, retry_after: str | None) -> types.CallToolResult:
    """The REST answer as the binding's tool result or JSON-RPC error."""
    business = isinstance(answer, dict) and isinstance(answer.get("ucp"), dict)
    if (200 <= status < 300 and isinstance(answer, dict)) or business:
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer))],
                                    structured_content=answer)
    code = answer.get("code") if isinstance(answer, dict) else None
    content = answer.get("content") if isinstance(answer, dict) else None
    message = str(content or answer or f"HTTP {status}")[:500]
    if isinstance(code, str) and code in _NEGOTIATION:
        raise MCPError(DISCOVERY_ERROR, _NEGOTIATION[code], answer)
    if status in (400, 422):
        raise MCPError(types.INVALID_PARAMS, message, answer)
    if status >= 500 and status != 503:
        raise MCPError(types.INTERNAL_ERROR, message, answer)
    data: dict[str, Any] = {"status": status}
    if isinstance(answer, dict):
        data.update(answer)
    if retry_after is not None:
        data["retry_after"] = int(retry_after) if retry_after.isdigit() else retry_after
    raise MCPError(PROTOCOL_ERROR, message, data)


__all__ = ["OPERATIONS", "CheckoutMcp", "input_schema", "tools"]
