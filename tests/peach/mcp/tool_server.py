"""A real MCP server, written with the MCP SDK, for the tests of MCP tools as
agent actions: a weather service whose tools need an API key.

It is careless on purpose: it echoes the key in its answers and its errors, as
a real service might, so the tests can check that the agent hides it anyway.

``python tests/peach/mcp/tool_server.py`` serves it over stdio; ``app()`` is its
streamable HTTP app (with ``token``, requests must carry ``X-Api-Token``). The
server is built on demand: building an ``MCPServer`` configures logging, which
a test process must not have done to it at import.
"""

from __future__ import annotations

from typing import Any

KEY = "wx-7f3a9c2e51"  # the one key the service accepts
FORECASTS = {"Paris": "sunny", "Oslo": "snow"}


def build() -> Any:
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("weather", log_level="WARNING")

    @server.tool(description="The weather forecast for a city.")
    def forecast(city: str, api_key: str) -> dict[str, Any]:
        if api_key != KEY:
            raise ToolError(f"the key {api_key} is not valid")
        if city not in FORECASTS:
            raise ToolError(f"no forecast for {city} (billed to {api_key})")
        return {"city": city, "forecast": FORECASTS[city], "billed_to": api_key}

    @server.tool(description="The cities with a forecast.")
    def cities() -> list[str]:
        return sorted(FORECASTS)

    return server


def app(token: str | None = None) -> Any:
    """The streamable HTTP app, at /mcp."""
    inner = build().streamable_http_app()
    if token is None:
        return inner

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or ())
        if scope["type"] == "http" and headers.get(b"x-api-token") != token.encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no token"})
            return
        await inner(scope, receive, send)

    return guarded


if __name__ == "__main__":
    build().run("stdio")
