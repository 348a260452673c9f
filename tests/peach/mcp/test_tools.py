"""MCP tools as agent actions: a real MCP server written with the MCP SDK
(tests/peach/mcp/tool_server.py, over stdio as a subprocess and over streamable HTTP on
a free loopback port), used by a coded agent and by an LLMAgent through before
and after hooks, with the API key a hook injects kept from the model, the
transcript and the logs."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from peach.llm import Hooks, LLMAgent
from peach.mcp import MCPResult, MCPToolError, MCPTools
from strabo import serve
from syncserver import SyncServer
from tests.conftest import PROTOCOLS
from tests.peach.llm.fake import FakeModel
from tests.peach.mcp import tool_server
from tests.peach.mcp.tool_server import KEY

SERVER = [sys.executable, str(Path(tool_server.__file__))]


def key_hooks(
    key: str = KEY, tool: str = "weather_forecast"
) -> tuple[Hooks, list[tuple[Any, str | None]]]:
    """Hooks injecting the API key into the forecast tool, and recording outcomes."""
    hooks = Hooks()
    outcomes: list[tuple[Any, str | None]] = []

    @hooks.before(tool, provides=["api_key"])
    def inject(arguments: dict[str, Any]) -> dict[str, Any]:
        return {**arguments, "api_key": key}

    @hooks.after(tool)
    def record(result: Any, error: str | None) -> None:
        outcomes.append((result, error))

    return hooks, outcomes


async def test_a_coded_agent_calls_a_stdio_mcp_tool_through_hooks():
    hooks, outcomes = key_hooks()
    async with asyncio.timeout(60), MCPTools("weather", SERVER, hooks=hooks) as weather:
        assert weather.names == ["weather_forecast", "weather_cities"]
        result = await weather.call("forecast", {"city": "Paris"})  # the server's name works
        assert isinstance(result, MCPResult)
        # Trusted code gets the real answer; the key reached the server (it checks it).
        assert result.value == {"city": "Paris", "forecast": "sunny", "billed_to": KEY}
        assert outcomes == [(result, None)]
        assert (await weather.call("weather_cities")).value == {"result": ["Oslo", "Paris"]}

        with pytest.raises(MCPToolError) as failed:
            await weather.call("weather_forecast", {"city": "Rome"})
        assert "no forecast for Rome" in str(failed.value)
        assert KEY not in str(failed.value)  # the server echoed it; the error does not
        assert outcomes[-1][0].is_error and "Rome" in outcomes[-1][1]

        with pytest.raises(MCPToolError, match="offers no tool 'rain'"):
            await weather.call("rain")


async def test_what_a_model_sees_of_an_mcp_tool_over_http(caplog):
    """The schema without what hooks provide; answers and errors with the key
    replaced, though the server echoes it; the SDK's own debug log scrubbed; and
    the server's HTTP token sent as a header."""
    caplog.set_level(logging.DEBUG)
    hooks, _ = key_hooks()
    async with asyncio.timeout(60), serve(tool_server.app(token="http-token")) as base:
        url = f"{base}/mcp"
        with pytest.raises(MCPToolError, match="cannot reach the MCP server weather"):
            await MCPTools("weather", url, hooks=hooks).connect()
        async with MCPTools("weather", url, hooks=hooks,
                            headers={"X-Api-Token": "http-token"}) as weather:
            [forecast, cities] = weather.tools()
            assert forecast.name == "weather_forecast" and forecast.runs_hooks
            assert forecast.input_schema["properties"] == {
                "city": {"title": "City", "type": "string"}}
            assert forecast.input_schema["required"] == ["city"]
            assert "MCP server weather" in forecast.description
            assert cities.input_schema["properties"] == {}

            assert await forecast.call({"city": "Oslo"}) == {
                "city": "Oslo", "forecast": "snow", "billed_to": "[secret]"}
            with pytest.raises(MCPToolError) as failed:
                await forecast.call({"city": "Rome"})
            assert "billed to [secret]" in str(failed.value)
            with pytest.raises(MCPToolError, match="api_key is supplied for you"):
                await forecast.call({"city": "Oslo", "api_key": "guess"})
    logged = agent_side(caplog)
    assert "[secret]" in logged  # the SDK logged the call's arguments, scrubbed
    assert KEY not in logged


def agent_side(caplog: Any) -> str:
    """What the agent's process logged: the MCP server, in this process for the
    HTTP tests, knows the key and logs what it likes."""
    return "\n".join(
        r.getMessage() + (r.exc_text or "")
        for r in caplog.records
        if not r.name.startswith(("mcp.server", "uvicorn"))
    )


async def test_a_wrong_key_from_a_hook_is_hidden_too():
    hooks, _ = key_hooks("wx-wrong-0042", tool="forecast")  # unprefixed: named as served
    async with asyncio.timeout(60), serve(tool_server.app()) as base, MCPTools(
        "weather", f"{base}/mcp", hooks=hooks, prefix=False, only=["forecast"]
    ) as weather:
        assert weather.names == ["forecast"]
        [forecast] = weather.tools()
        with pytest.raises(MCPToolError) as failed:
            await forecast.call({"city": "Paris"})
    assert "is not valid" in str(failed.value) and "wx-wrong-0042" not in str(failed.value)


async def test_only_names_tools_the_server_has():
    async with asyncio.timeout(60), serve(tool_server.app()) as base:
        with pytest.raises(MCPToolError, match=r"has no tool rain \(it has forecast, cities\)"):
            await MCPTools("weather", f"{base}/mcp", only=["rain"]).connect()


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="neither an http"):
        MCPTools("weather", "weather.example")
    with pytest.raises(ValueError, match="letters, digits"):
        MCPTools("the weather", SERVER)
    with pytest.raises(ValueError, match="command line is empty"):
        MCPTools("weather", [])


ANSWERS = [
    {"when": {"has": ["weather_forecast"], "prompt_lacks": ["sunny"]},
     "content": [{"type": "tool_use", "name": "weather_forecast", "input": {"city": "Paris"}}]},
    {"when": {"prompt_has": ["sunny"]},
     "content": [{"type": "tool_use", "name": "done",
                  "input": {"summary": "it will be sunny in Paris"}}]},
]


async def test_an_llm_agent_uses_an_mcp_tool_without_seeing_its_key(tmp_path, caplog):
    """The LLMAgent offers the MCP tool to its model as a local tool; the hook on
    it is accepted by name; the model gets the forecast, never the key, and
    neither do the transcript and the log."""
    caplog.set_level(logging.DEBUG)
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    server = SyncServer.embedded([protocol], {"buyer": ["Buyer"], "seller": ["Seller"]})
    buyer = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
    hooks, outcomes = key_hooks()
    transcript = tmp_path / "transcript.json"
    fake = FakeModel(ANSWERS)
    async with asyncio.timeout(60), fake.serving(), MCPTools(
        "weather", SERVER, hooks=hooks
    ) as weather:
        with pytest.raises(ValueError, match="weather_forecast"):
            LLMAgent([buyer], "Find the weather", client=fake.client(), hooks=hooks)
        agent = LLMAgent([buyer], "Find the weather in Paris, then stop.",
                         client=fake.client(), tools=weather.tools(), hooks=hooks,
                         transcript=transcript)
        report = await agent.run()
    assert report.status == "done", (report, fake.unanswered)
    assert outcomes[0][1] is None and outcomes[0][0].value["billed_to"] == KEY

    first = fake.requests[0]
    [offered] = [t for t in first["tools"] if t["name"] == "weather_forecast"]
    assert "api_key" not in json.dumps(offered)
    [result] = fake.requests[1]["results"]
    assert "sunny" in result["content"] and "[secret]" in result["content"]
    assert not result["error"]
    for raw in fake.raw:
        assert KEY.encode() not in raw
    assert KEY not in transcript.read_text()
    assert KEY not in agent_side(caplog)
