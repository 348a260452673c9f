"""A client that sends checkout requests over another transport and the rest over REST.

Both the MCP and the A2A transports stand in for REST for the checkout
requests only (``tool_of`` says which those are); discovery and orders stay on
REST. What sends a checkout request is the transport's own ``send``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from strabo.ucp.versions import OPERATIONS
from syncserver.client import Client

TOOLS = tuple(
    (verb, pattern, f"{name}_checkout")
    for verb, pattern, name in OPERATIONS
    if name in ("create", "get", "update", "complete", "cancel")
)
"""Method and path -> the checkout operation (the tool of the 2026-04-08 MCP
binding, mcp.openrpc.json, and the action of strabo's A2A messages)."""


def tool_of(method: str, path: str) -> tuple[str, str | None] | None:
    """The tool a REST request is and the checkout id in its path, or None."""
    path = path.split("?", 1)[0]
    for verb, pattern, tool in TOOLS:
        match = pattern.match(path)
        if method.upper() == verb and match:
            return tool, (match.group(1) if match.groups() else None)
    return None


Send = Callable[[str, str | None, Any, Mapping[str, str]], Awaitable[Any]]
"""(tool, checkout id or None, body, headers) -> the answer REST would have given."""


class Routed:
    """``syncserver.client.Client``: checkout requests through ``send``, the rest
    through ``rest``."""

    def __init__(self, send: Send, rest: Client) -> None:
        self.send, self.rest, self.base_url = send, rest, rest.base_url

    async def request(self, method: str, path: str, body: Any = None,
                      headers: Mapping[str, str] | None = None, *,
                      content: bytes | None = None,
                      params: Mapping[str, Any] | None = None) -> Any:
        found = tool_of(method, path) if content is None and not params else None
        if found is None:
            return await self.rest.request(method, path, body, headers, content=content,
                                           params=params)
        tool, checkout = found
        return await self.send(tool, checkout, body, headers or {})

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        return self.rest.stream(*args, **kwargs)

    async def aclose(self) -> None:
        await self.rest.aclose()
