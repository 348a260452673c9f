"""``strabo mcp``: a protocol role served as MCP tools, driven by the MCP SDK's own
client over stdio (a real subprocess) and streamable HTTP (uvicorn on a free
loopback port), against a real SyncServer with coded counterparts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter, SyncExecutor
from peach.llm import Hooks
from peach.mcp import RoleServer
from peach.mcp.cli import run_mcp
from strabo import serve
from strabo.cli import build_parser
from syncserver import SyncServer, create_app
from tests.conftest import PROTOCOLS, ROOT

PURCHASE = str(PROTOCOLS / "purchase.lsh")
BUYER_TOOLS = {"RFQ", "Accept", "Reject", "PreferDate", "Cancel", "Completed",
               "enactments", "history", "wait_event"}


def counterparts(url: str, mas: str, token: str) -> list[PeachAdapter]:
    """A Seller that quotes 4 for anything and ships what was bought from it, and
    a Shipper that delivers: coded agents, over HTTP."""
    protocol = LangshawProtocol.load(PURCHASE)
    seller = PeachAdapter("seller", protocol, "Seller",
                          SyncExecutor(url, token=token.format("seller"), mas=mas))
    shipper = PeachAdapter("shipper", protocol, "Shipper",
                           SyncExecutor(url, token=token.format("shipper"), mas=mas))

    @seller.on_enabled("Quote")
    async def quote(fa):
        if fa.new_keys:
            await seller.attempt([fa.bind(price=4)])

    @seller.on_enabled("Ship")
    async def ship(fa):
        await seller.attempt([fa.bind(delivery_date="monday")])

    @shipper.on_enabled("Deliver")
    async def deliver(fa):
        await shipper.attempt([fa.bind(outcome="delivered")])

    return [seller, shipper]


def answer(result: Any) -> dict[str, Any]:
    """A tool result's structured content, checked against its text."""
    assert result.structured_content is not None, result
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content  # type: ignore[no-any-return]


async def wait_for(session: Any, action: str, after: int) -> tuple[dict[str, Any], int]:
    """Call wait_event until ``action`` is finalized; returns its event and the
    sequence number to go on from."""
    while True:
        got = answer(await session.call_tool("wait_event", {"after": after, "timeout": 10}))
        assert not got["timed_out"], f"no {action} after #{after}"
        after = got["last"]
        for event in got["events"]:
            if event["kind"] == "action" and event["action"] == action:
                return event, after


@contextlib.asynccontextmanager
async def strabo_mcp_http(*options: str) -> AsyncIterator[dict[str, str]]:
    """``strabo mcp ... --transport http`` in this process; yields its URLs."""
    args = build_parser().parse_args(["mcp", *options, "--transport", "http"])
    ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_mcp(args, on_ready=ready.set_result, stop=stop))
    done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # it ended before serving: show why
    try:
        yield ready.result()
    finally:
        stop.set()
        assert await task == 0


async def test_an_mcp_client_enacts_purchase_over_streamable_http():
    async with asyncio.timeout(60), strabo_mcp_http(
        "--protocol", PURCHASE, "--role", "Buyer", "--embedded", "--mas", "shop",
    ) as urls:
        agents = counterparts(urls["syncserver"], "shop", "{}-secret")
        async with contextlib.AsyncExitStack() as stack:
            for agent in agents:
                await stack.enter_async_context(agent)
            read, write = await stack.enter_async_context(streamable_http_client(urls["mcp"]))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()

            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == BUYER_TOOLS
            rfq = tools["RFQ"].input_schema
            assert rfq["properties"]["budget"]["type"] == "number"  # typed from the protocol
            assert rfq["required"] == ["item", "budget"]
            assert tools["Accept"].input_schema["required"] == ["ID"]

            done = answer(await session.call_tool("RFQ", {"item": "pen", "budget": 10}))
            assert done["done"] == "RFQ"
            enactment = done["keys"]["ID"]
            quote, after = await wait_for(session, "Quote", done["seq"])
            assert quote["by"] == "seller" and quote["bindings"]["price"] == 4

            # What the Buyer may do now, with the schema an LLM agent would be offered.
            listed = answer(await session.call_tool("enactments", {}))
            [only] = listed["enactments"]
            offers = {o["tool"]: o for o in only["you_may"]}
            assert set(offers) == {"Accept", "Reject"}
            assert offers["Accept"]["keys"] == {"ID": enactment}
            assert offers["Accept"]["input_schema"]["required"] == ["chosen", "price", "address"]
            assert [o["tool"] for o in listed["new"]] == ["RFQ"]

            # A value that does not fit its type is refused at bind, with where and why.
            wrong = await session.call_tool(
                "Accept", {"ID": enactment, "chosen": quote["keys"]["qid"], "price": "four",
                           "address": "1 Main St"})
            assert wrong.is_error
            assert wrong.structured_content["rule"] == "type"
            assert "price" in wrong.content[0].text

            accepted = answer(await session.call_tool(
                "Accept", {"ID": enactment, "chosen": quote["keys"]["qid"], "price": 4,
                           "address": "1 Main St"}))
            assert accepted["bindings"]["address"] == "1 Main St"

            # Not enabled: a tool error naming the rule, and nothing enacted.
            refused = await session.call_tool("Reject", {"ID": enactment, "reason": "late"})
            assert refused.is_error
            assert refused.structured_content["rule"] == "nono"
            assert "(nono)" in refused.content[0].text
            assert "rule: nono" in refused.content[0].text

            await wait_for(session, "Deliver", after)
            completed = answer(await session.call_tool(
                "Completed", {"ID": enactment, "satisfaction": "good"}))
            assert completed["enactment"]["complete"] is True

            history = answer(await session.call_tool("history", {"ID": enactment}))
            assert [(h["action"], h["by"]) for h in history["history"]] == [
                ("RFQ", "buyer"), ("Quote", "seller"), ("Accept", "buyer"),
                ("Ship", "seller"), ("Deliver", "shipper"), ("Completed", "buyer"),
            ]
            assert history["complete"] is True
            assert "Completed" not in {o["tool"] for o in history["you_may"]}
            assert answer(await session.call_tool("enactments", {}))["enactments"] == []
            assert len(answer(await session.call_tool(
                "enactments", {"complete": True}))["enactments"]) == 1

            # The completion was an event too.
            got = answer(await session.call_tool(
                "wait_event", {"after": history["last_seq"] - 1, "timeout": 0}))
            assert {"kind": "complete", "keys": {"ID": enactment},
                    "seq": history["last_seq"]} in got["events"]

            nothing = answer(await session.call_tool("wait_event", {"timeout": 0.05}))
            assert nothing["timed_out"] and nothing["events"] == []

            invalid = await session.call_tool("Accept", {"ID": enactment, "colour": "red"})
            assert invalid.is_error and "does not take colour" in invalid.content[0].text
            missing = await session.call_tool("history", {"ID": "no-such"})
            assert missing.is_error and "no enactment" in missing.content[0].text
            with pytest.raises(MCPError, match="no tool 'Ship'"):
                await session.call_tool("Ship", {"ID": enactment})


async def test_strabo_mcp_over_stdio_joins_a_running_syncserver():
    """The subprocess a desktop assistant would start: MCP on its stdin and stdout,
    the agent on a SyncServer it joins with its token."""
    protocol = LangshawProtocol.load(PURCHASE)
    agents = {"buyer": ["Buyer"], "seller": ["Seller"], "shipper": ["Shipper"]}
    server = SyncServer.embedded([protocol], agents, tokens={a: f"{a}-token" for a in agents})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "strabo.cli", "mcp", "--protocol", PURCHASE, "--role", "Buyer"],
        cwd=str(ROOT),
    )
    async with asyncio.timeout(60), serve(create_app(server)) as url, \
            contextlib.AsyncExitStack() as stack:
        seller, shipper = counterparts(url, "default", "{}-token")
        await stack.enter_async_context(seller)
        await stack.enter_async_context(shipper)
        params.args += ["--syncserver", url, "--token", "buyer-token"]
        if True:  # the subprocess's stderr (its trace of actions) is the test's
            read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            init = await session.initialize()
            assert "Buyer" in (init.instructions or "")
            assert {t.name for t in (await session.list_tools()).tools} == BUYER_TOOLS

            early = await session.call_tool("Completed", {"ID": "x", "satisfaction": "?"})
            assert early.is_error and early.structured_content["rule"] == "dependency"

            done = answer(await session.call_tool("RFQ", {"item": "pen", "budget": 10}))
            quote, _ = await wait_for(session, "Quote", done["seq"])
            answer(await session.call_tool("Reject", {"ID": done["keys"]["ID"], "reason": "no"}))
            late = await session.call_tool(
                "Accept", {"ID": done["keys"]["ID"], "chosen": quote["keys"]["qid"],
                           "price": 4, "address": "1 Main St"})
            assert late.is_error and late.structured_content["rule"] == "nono"
            await seller.sync()
            assert [i.name for _, i, who in seller.history(done["keys"])] == [
                "RFQ", "Quote", "Reject"]


async def test_hooks_supply_secrets_the_client_never_sees_and_a_token_guards_http():
    """The SDK's high-level Client (2026-07-28, negotiated) against a RoleServer
    with a before hook: the Buyer's address comes from the hook, never from the
    client, and is shown to it as [secret]; the Seller gets the real one."""
    protocol = LangshawProtocol.load(PURCHASE)
    agents = {"buyer": ["Buyer"], "seller": ["Seller"], "shipper": ["Shipper"]}
    server = SyncServer.embedded([protocol], agents)
    address = "12 Hidden Lane, Flat 7"
    hooks = Hooks()
    seen: list[Any] = []

    @hooks.before("Accept", provides=["address"])
    def home(bindings: dict[str, Any]) -> dict[str, Any]:
        return {**bindings, "address": address}

    @hooks.after("Accept")
    def audit(instance: Any, error: str | None) -> None:
        seen.append((instance, error))

    executor = LocalExecutor(server)
    buyer = PeachAdapter("buyer", protocol, "Buyer", executor)
    seller = PeachAdapter("seller", protocol, "Seller", executor)
    shipped = asyncio.get_running_loop().create_future()

    @seller.on_enabled("Quote")
    async def quote(fa):
        if fa.new_keys:
            await seller.attempt([fa.bind(price=4)])

    @seller.on_enabled("Ship")
    async def ship(fa):
        shipped.set_result(fa.fixed["address"])

    with pytest.raises(ValueError, match="does not perform"):
        RoleServer(buyer, hooks=_hook_on("Ship"))
    role = RoleServer(buyer, hooks=hooks)
    async with asyncio.timeout(60), seller, role, serve(
        role.http_app(token="mcp-token")
    ) as base:
        url = f"{base}/mcp"
        async with httpx2.AsyncClient() as anonymous:
            assert (await anonymous.post(url, json={})).status_code == 401
        http = httpx2.AsyncClient(headers={"Authorization": "Bearer mcp-token"})
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            assert client.protocol_version == "2026-07-28"
            tools = {t.name: t for t in await _tools(client)}
            assert "address" not in tools["Accept"].input_schema["properties"]

            done = answer(await client.call_tool("RFQ", {"item": "pen", "budget": 10}))
            enactment = done["keys"]["ID"]
            quote, _ = await wait_for(client, "Quote", done["seq"])
            [offer] = [o for o in answer(await client.call_tool("history", {"ID": enactment}))
                       ["you_may"] if o["tool"] == "Accept"]
            assert offer["input_schema"]["required"] == ["chosen", "price"]

            given = await client.call_tool("Accept", {"ID": enactment, "chosen": "x",
                                                      "price": 4, "address": "mine"})
            assert given.is_error and "address is supplied by the server" in given.content[0].text
            accepted = answer(await client.call_tool(
                "Accept", {"ID": enactment, "chosen": quote["keys"]["qid"], "price": 4}))
            assert accepted["bindings"]["address"] == "[secret]"
            history = await client.call_tool("history", {"ID": enactment})
            assert address not in json.dumps(history.structured_content)
            assert address not in history.content[0].text
            assert "Hidden" not in history.content[0].text
        assert await shipped == address  # the protocol carries the real one
        assert seen[0][1] is None and seen[0][0].bindings["address"] == address


def _hook_on(action: str) -> Hooks:
    hooks = Hooks()
    hooks.before(action)(lambda b: b)
    return hooks


async def _tools(client: Client) -> list[Any]:
    return list((await client.list_tools()).tools)


def strabo_mcp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strabo.cli", "mcp", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60, stdin=subprocess.DEVNULL,
    )


def test_help_shows_a_desktop_config_and_streamable_http():
    result = strabo_mcp("--help")
    assert result.returncode == 0
    for text in ('"mcpServers"', "--transport http", "--embedded", "--syncserver URL",
                 "docs/mcp.md", "wait_event", "naming the rule"):
        assert text in result.stdout, text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--protocol", PURCHASE, "--role", "Buyer"], "say where the social state lives"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--protocol", PURCHASE, "--role",
          "Seller", "--embedded"], "serves one role"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--embedded", "--port", "9"],
         "--port and --auth-token go with --transport http"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--embedded", "--transport", "http",
          "--host", "0.0.0.0"], "give --auth-token T too"),
        (["--protocol", PURCHASE, "--role", "Byer", "--embedded"], "has no role 'Byer'"),
    ],
)
def test_usage_errors_are_explained(args, message):
    result = strabo_mcp(*args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("strabo mcp: ")
    assert message in result.stderr
