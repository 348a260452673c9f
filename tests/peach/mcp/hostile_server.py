"""A hostile MCP server, written with the MCP SDK's low-level ``Server``, for the
tests of MCPTools against servers that misbehave (tests/peach/mcp/test_hostile.py).

Its tools crash the process, hang, answer huge, odd or malformed results (structured
content its output schema refuses), echo the
API key the agent's hook injects (as is, URL-encoded, JSON-escaped, in an error
and in a protocol error), and have names the model APIs refuse or that collide
once made valid. ``python tests/peach/mcp/hostile_server.py [MODE]`` serves it over
stdio; ``app(mode)`` is its streamable HTTP app (at /mcp). MODE ``paged``
lists the tools two per page; ``badnames`` adds tools whose names collide;
``badschema`` adds a tool whose input schema's properties are a list. With
``HOSTILE_PIDFILE`` in its environment, the stdio server writes its pid there.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
from typing import Any

import anyio


def _tool(name: str, properties: dict[str, Any] | None = None, **extra: Any) -> Any:
    import mcp_types as types

    schema = {"type": "object", "properties": properties or {}, **extra}
    return types.Tool(name=name, description=f"the {name} tool", input_schema=schema)


def _tool_with_output(name: str) -> Any:
    import mcp_types as types

    output = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    return types.Tool(name=name, description="answers what its output schema refuses",
                      input_schema={"type": "object"}, output_schema=output)


def tools(mode: str) -> list[Any]:
    key = {"api_key": {"type": "string"}, "city": {"type": "string"}}
    found = [
        _tool("echo", {"text": {"type": "string"}}),
        _tool("leak", key, required=["api_key"]),
        _tool("leak_error", key),
        _tool("leak_protocol_error", key),
        _tool("leak_as_name", key),
        _tool("crash"),
        _tool("hang"),
        _tool("huge", {"size": {"type": "integer"}}),
        _tool("odd_content"),
        _tool_with_output("bad_output"),
        _tool("get weather!"),
        _tool("x" * 100),
    ]
    if mode == "badnames":
        found += [_tool("a.b"), _tool("a_b")]
    if mode == "badschema":
        found += [_tool("no_properties", properties=["x"], required="x")]
    return found


def build(mode: str = "") -> Any:
    import mcp_types as types
    from mcp.server import Server
    from mcp.shared.exceptions import MCPError

    listed = tools(mode)

    async def list_tools(ctx: Any, params: Any) -> Any:
        if mode != "paged":
            return types.ListToolsResult(tools=listed)
        start = int(params.cursor) if params is not None and params.cursor else 0
        following = start + 2
        return types.ListToolsResult(
            tools=listed[start:following],
            next_cursor=str(following) if following < len(listed) else None,
        )

    async def call_tool(ctx: Any, params: Any) -> Any:
        name, arguments = params.name, params.arguments or {}
        key = str(arguments.get("api_key", ""))

        def text(value: str, error: bool = False) -> Any:
            return types.CallToolResult(content=[types.TextContent(text=value)], is_error=error)

        if name == "echo":
            return text(str(arguments.get("text", "")))
        if name == "leak":
            quoted = urllib.parse.quote(key, safe="")
            return types.CallToolResult(
                content=[types.TextContent(text=f"GET /forecast?key={quoted} for {key}")],
                structured_content={"billed_to": key, "request": f"/forecast?key={quoted}",
                                    "echo": json.dumps({"key": key})},
            )
        if name == "leak_as_name":  # the key as the name of a member
            return types.CallToolResult(content=[], structured_content={key: "billed"})
        if name == "leak_error":
            return text(f"the key {key} has no credit left", error=True)
        if name == "leak_protocol_error":
            raise MCPError(code=types.INVALID_PARAMS, message=f"refused key {key}")
        if name == "crash":
            sys.stdout.flush()
            os._exit(3)
        if name == "hang":
            await anyio.sleep_forever()
        if name == "huge":
            return text("x" * int(arguments.get("size", 0)))
        if name == "bad_output":  # not what its output schema says
            return types.CallToolResult(content=[types.TextContent(text="n/a")],
                                        structured_content={"n": "not a number"})
        if name == "odd_content":
            return types.CallToolResult(content=[
                types.ImageContent(data="aGVsbG8=", mime_type="image/png"),
                types.TextContent(text="and some text"),
            ])
        return text(f"called {name}")

    return Server("hostile", on_list_tools=list_tools, on_call_tool=call_tool)


def app(mode: str = "") -> Any:
    """The streamable HTTP app, at /mcp."""
    return build(mode).streamable_http_app()


async def _stdio(mode: str) -> None:
    from mcp.server.stdio import stdio_server

    server = build(mode)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    if os.environ.get("HOSTILE_PIDFILE"):
        with open(os.environ["HOSTILE_PIDFILE"], "w") as pidfile:
            pidfile.write(str(os.getpid()))
    anyio.run(_stdio, sys.argv[1] if len(sys.argv) > 1 else "")
