"""A tiny MCP server for docs/mcp.md's ``MCPTools`` example: one weather tool
that needs an API key, which the agent's before hook supplies.

``python -m samples.llm.weather_server`` serves it over stdio (what ``MCPTools``
starts); it accepts the key in ``WEATHER_KEY`` (``demo-key`` when unset). It is
built with the MCP SDK, as any third-party server would be.
"""

from __future__ import annotations

import os
from typing import Any

FORECASTS = {"Paris": "sunny", "Oslo": "snow", "Raleigh": "rain"}


def build() -> Any:
    """The server (built on demand: building one configures logging)."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("weather", log_level="WARNING")
    key = os.environ.get("WEATHER_KEY", "demo-key")

    @server.tool(description="The weather forecast for a city.")
    def forecast(city: str, api_key: str) -> dict[str, Any]:
        if api_key != key:
            raise ToolError("the API key is not valid")
        if city not in FORECASTS:
            raise ToolError(f"no forecast for {city} (cities: {', '.join(FORECASTS)})")
        return {"city": city, "forecast": FORECASTS[city]}

    return server


if __name__ == "__main__":
    build().run("stdio")
