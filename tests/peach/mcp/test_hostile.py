"""MCP, both ways, against hostile and careless peers.

The role server (``strabo mcp``, ``RoleServer``) is driven over real transports
(streamable HTTP on a loopback port, stdio in a subprocess) by the MCP SDK's own
client and by raw HTTP where the SDK would not send what an attacker can (a
NaN), with bad arguments, conflicting concurrent calls, wrong tokens, clients
that go away, a SyncServer that goes away, and bad command lines. ``MCPTools``
is pointed at ``tests/peach/mcp/hostile_server.py``, a real MCP server that crashes,
hangs, echoes the injected key in every form, and lists tools no model API
takes. Each misbehaviour must get a precise error, leave the state as it was,
keep resources bounded, and never show a secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter, SyncExecutor
from peach.llm import Hooks
from peach.llm.cli import UsageError
from peach.mcp import MCPToolError, MCPTools, RoleServer
from peach.mcp._events import EventLog
from peach.mcp.cli import run_mcp
from strabo import serve
from strabo.cli import build_parser, main
from syncserver import SyncServer, create_app
from tests.conftest import ROOT
from tests.peach.mcp import hostile_server
from tests.peach.mcp.test_role_server import PURCHASE, answer

HOSTILE = [sys.executable, str(Path(hostile_server.__file__))]
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def waits_started(monkeypatch: Any) -> asyncio.Event:
    """An event set once a ``wait_event`` call has registered its wait (in any
    role server of the test)."""
    started = asyncio.Event()
    original = EventLog.wait

    async def wait(self: EventLog, after: int | None, seconds: float) -> dict[str, Any]:
        waiting = original(self, after, seconds)
        started.set()  # the test runs on only once this wait is suspended, registered
        return await waiting

    monkeypatch.setattr(EventLog, "wait", wait)
    return started


@contextlib.asynccontextmanager
async def purchase_role(
    *, seller: bool = False, token: str | None = None, **options: Any
) -> AsyncIterator[tuple[RoleServer, str, PeachAdapter]]:
    """The Buyer of Purchase as a RoleServer over streamable HTTP, on an embedded
    SyncServer; with ``seller``, a coded seller quotes 4 on every request."""
    protocol = LangshawProtocol.load(PURCHASE)
    server = SyncServer.embedded([protocol], {"buyer": ["Buyer"], "seller": ["Seller"]})
    executor = LocalExecutor(server)
    buyer = PeachAdapter("buyer", protocol, "Buyer", executor)
    quoter = PeachAdapter("seller", protocol, "Seller", executor)

    @quoter.on_enabled("Quote")
    async def quote(fa: Any) -> None:
        if seller and fa.new_keys:
            await quoter.attempt([fa.bind(price=4)])

    role = RoleServer(buyer, **options)
    async with asyncio.timeout(60), quoter, role, serve(role.http_app(token=token)) as base:
        yield role, f"{base}/mcp", quoter


@contextlib.asynccontextmanager
async def session(url: str, **headers: str) -> AsyncIterator[ClientSession]:
    http = httpx2.AsyncClient(headers=headers)
    async with http, streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as client:
        await client.initialize()
        yield client


async def raw_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """Initialize an MCP session by hand; the headers its requests must carry."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}
    response = await http.post(url, json=init, headers=ACCEPT)
    assert response.status_code == 200, response.text
    headers = {**ACCEPT, "mcp-session-id": response.headers["mcp-session-id"],
               "mcp-protocol-version": "2025-11-25"}
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                    headers=headers)
    return headers


def sse_result(text: str) -> dict[str, Any]:
    """The JSON-RPC message of an SSE answer."""
    [data] = [line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:]]
    message: dict[str, Any] = json.loads(data)
    return message


def refused(result: Any, says: str, rule: str | None = None) -> None:
    """A tool error whose text says ``says`` (and names ``rule``)."""
    assert result.is_error, result
    text = result.content[0].text
    assert says in text, text
    assert result.structured_content["error"] == text
    if rule is not None:
        assert result.structured_content["rule"] == rule, result.structured_content


# The role server -------------------------------------------------------------------------


async def test_bad_arguments_get_precise_tool_errors_and_change_nothing():
    async with purchase_role() as (role, url, _), session(url) as client:
        done = answer(await client.call_tool("RFQ", {"item": "pen", "budget": 10}))
        enactment = done["keys"]["ID"]
        before = answer(await client.call_tool("enactments", {"complete": True}))
        cases: list[tuple[str, dict[str, Any], str, str | None]] = [
            ("history", {"ID": ["x"]}, "ID must be a key: text or an integer, not", "type"),
            ("history", {"ID": {"a": 1}}, "ID must be a key", "type"),
            ("history", {"ID": None}, "ID must be a key", "type"),
            ("history", {}, "give the enactment's ID", None),
            ("history", {"ID": "no-such"}, "there is no enactment ID='no-such'", None),
            ("Accept", {"ID": True, "chosen": "q", "price": 4, "address": "a"},
             "ID must be a key", "type"),
            ("Accept", {"ID": [], "chosen": "q", "price": 4, "address": "a"},
             "ID must be a key", "type"),
            ("RFQ", {"ID": {"x": 1}, "item": "pen", "budget": 1}, "ID must be a key", "type"),
            ("RFQ", {"item": "pen"}, "RFQ needs 'budget' bound", None),
            ("RFQ", {"item": "pen", "budget": "ten"}, "budget", "type"),
            ("RFQ", {"item": "pen", "budget": 1, "colour": "red"}, "does not take colour", None),
            ("Accept", {"ID": enactment, "chosen": "q", "price": 4, "address": "a"},
             "Accept is not enabled for Buyer", "dependency"),
            ("Reject", {"ID": "no-such", "reason": "x"}, "Reject is not enabled", "dependency"),
            ("enactments", {"complete": "yes"}, "complete must be true or false", None),
            ("enactments", {"limit": 0}, "limit must be a positive integer", None),
            ("wait_event", {"after": -1}, "after -1 is no sequence number of this server", None),
            ("wait_event", {"after": 10**12}, "(the last is 1)", None),
            ("wait_event", {"after": True}, "after must be an integer", None),
            ("wait_event", {"timeout": -1}, "timeout must be a number of seconds", None),
            ("wait_event", {"timeout": "soon"}, "timeout must be a number of seconds", None),
            ("wait_event", {"soon": 1}, "wait_event does not take soon", None),
        ]
        for tool, arguments, says, rule in cases:
            refused(await client.call_tool(tool, arguments), says, rule)

        with pytest.raises(MCPError, match="no tool 'Ship'"):
            await client.call_tool("Ship", {"ID": enactment})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("x" * 100_000, {})
        assert len(str(unknown.value)) < 1000  # not the name sent back whole
        with pytest.raises(MCPError):  # beyond the SDK's request size: refused, not read
            await client.call_tool("RFQ", {"item": "x" * 5_000_000, "budget": 1})

        after = answer(await client.call_tool("enactments", {"complete": True}))
        assert after == before  # nothing changed
        assert [i.name for _, i, _ in role.adapter.history((enactment,))] == ["RFQ"]


async def test_a_nan_timeout_is_refused_at_once_and_infinity_is_the_most():
    """JSON parsers on the server accept NaN and 1e400 (infinity); a NaN wait
    would never end. The SDK's client cannot send them: raw HTTP does."""
    async with purchase_role(max_wait=0.2) as (_, url, _), httpx2.AsyncClient(timeout=10) as http:
        headers = await raw_session(http, url)
        for number, timeout in enumerate(["NaN", "-Infinity", "1e400"], 1):
            body = (f'{{"jsonrpc": "2.0", "id": {number}, "method": "tools/call", "params": '
                    f'{{"name": "wait_event", "arguments": {{"timeout": {timeout}}}}}}}')
            started = time.monotonic()
            response = await http.post(url, content=body, headers=headers)
            result = sse_result(response.text)["result"]
            if timeout == "1e400":  # clamped to the server's max_wait
                assert not result.get("isError") and result["structuredContent"]["timed_out"]
            else:
                assert result["isError"], result
                assert "timeout must be a number of seconds" in result["content"][0]["text"]
            assert time.monotonic() - started < 5


async def test_concurrent_conflicting_actions_exactly_one_wins():
    """Accept and Reject, both enabled when each is bound (before hooks hold each
    until both have arrived), attempted at once: one is finalized, the other is
    refused naming the nono, and the enactment shows one of them."""
    arrived = {"Accept": asyncio.Event(), "Reject": asyncio.Event()}
    hooks = Hooks()

    def hold(action: str) -> Any:
        async def before(bindings: dict[str, Any]) -> dict[str, Any]:
            arrived[action].set()
            other = arrived["Reject" if action == "Accept" else "Accept"]
            await asyncio.wait_for(other.wait(), 10)
            return bindings
        return before

    hooks.before("Accept")(hold("Accept"))
    hooks.before("Reject")(hold("Reject"))
    async with purchase_role(seller=True, hooks=hooks) as (role, url, _), \
            session(url) as client:
        done = answer(await client.call_tool("RFQ", {"item": "pen", "budget": 10}))
        enactment = done["keys"]["ID"]
        got = answer(await client.call_tool(
            "wait_event", {"after": done["seq"], "timeout": 10}))
        [quote] = [e for e in got["events"] if e.get("action") == "Quote"]
        accept, reject = await asyncio.gather(
            client.call_tool("Accept", {"ID": enactment, "chosen": quote["keys"]["qid"],
                                        "price": 4, "address": "1 Main St"}),
            client.call_tool("Reject", {"ID": enactment, "reason": "changed my mind"}),
        )
        outcomes = {"Accept": accept, "Reject": reject}
        winners = [a for a, r in outcomes.items() if not r.is_error]
        assert len(winners) == 1, outcomes
        [loser] = [r for r in outcomes.values() if r.is_error]
        assert loser.structured_content["rule"] == "nono"
        assert "nono" in loser.content[0].text
        names = [i.name for _, i, _ in role.adapter.history((enactment,))]
        assert names == ["RFQ", "Quote", winners[0]]


async def test_the_http_transport_wants_the_bearer_token():
    async with purchase_role(token="tok-3141") as (_, url, _):
        async with httpx2.AsyncClient() as http:
            for given in ({}, {"Authorization": "Bearer wrong"},
                          {"Authorization": "Basic tok-3141"}, {"Authorization": "tok-3141"},
                          {"Authorization": "Bearer"}):
                response = await http.post(url, json={}, headers={**ACCEPT, **given})
                assert response.status_code == 401, given
                assert response.headers["www-authenticate"] == "Bearer"
                assert "tok-3141" not in response.text
        async with session(url, Authorization="bearer tok-3141") as client:  # any case
            assert (await client.list_tools()).tools
    protocol = LangshawProtocol.load(PURCHASE)
    server = SyncServer.embedded([protocol], {"buyer": ["Buyer"]})
    role = RoleServer(PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server)))
    with pytest.raises(ValueError, match="empty token"):
        role.http_app(token=" ")
    with pytest.raises(ValueError, match="secrets name attributes Purchase does not have: adress"):
        RoleServer(role.adapter, secrets=["adress"])


async def test_a_client_gone_mid_wait_does_not_hold_its_place(monkeypatch):
    """A client that disconnects during wait_event is not noticed by the server:
    its wait would run to its timeout. Past max_waits, the oldest wait ends."""
    started = waits_started(monkeypatch)
    async with purchase_role(max_waits=1) as (role, url, _):
        async with httpx2.AsyncClient(timeout=10) as http:
            headers = await raw_session(http, url)
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "wait_event", "arguments": {"timeout": 60}}}
            async with http.stream("POST", url, json=call, headers=headers):
                await asyncio.wait_for(started.wait(), 10)
                assert role.events.waiting == 1
        assert role.events.waiting == 1  # gone, but still waiting
        async with session(url) as client:
            got = answer(await client.call_tool("wait_event", {"timeout": 0.05}))
            assert got["timed_out"]
        assert role.events.waiting == 0  # the zombie was ended, not left for 60 s


async def test_the_role_server_when_the_syncserver_goes_away():
    protocol = LangshawProtocol.load(PURCHASE)
    agents = {"buyer": ["Buyer"], "seller": ["Seller"]}
    server = SyncServer.embedded([protocol], agents, tokens={a: f"{a}-t" for a in agents})
    async with asyncio.timeout(60), contextlib.AsyncExitStack() as stack:
        syncserver = serve(create_app(server), timeout_graceful_shutdown=0.2)
        sync_url = await syncserver.__aenter__()
        buyer = PeachAdapter("buyer", protocol, "Buyer", SyncExecutor(sync_url, token="buyer-t"))
        role = await stack.enter_async_context(RoleServer(buyer))
        base = await stack.enter_async_context(serve(role.http_app()))
        client = await stack.enter_async_context(session(f"{base}/mcp"))
        first = answer(await client.call_tool("RFQ", {"item": "pen", "budget": 10}))
        server.close_streams()
        await syncserver.__aexit__(None, None, None)

        async with asyncio.timeout(20):  # an error, not a hang
            lost = await client.call_tool("RFQ", {"item": "ink", "budget": 3})
        refused(lost, f"RFQ could not be attempted: no answer from the SyncServer at {sync_url}")
        listed = answer(await client.call_tool("enactments", {}))
        assert [e["keys"] for e in listed["enactments"]] == [first["keys"]]
        assert answer(await client.call_tool("wait_event", {"timeout": 0.05}))["timed_out"]


async def test_stopping_strabo_mcp_lets_waiting_and_idle_clients_go(caplog, monkeypatch):
    """Ctrl-C with a client connected (its stream open) and another in a long
    wait_event: the command ends at once, without uvicorn's tracebacks."""
    args = build_parser().parse_args([
        "mcp", "--protocol", PURCHASE, "--role", "Buyer", "--embedded", "--transport", "http"])
    ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    started = waits_started(monkeypatch)
    task = asyncio.create_task(run_mcp(args, on_ready=ready.set_result, stop=stop))
    async with asyncio.timeout(60):
        urls = await ready
        idle = session(urls["mcp"])
        waiting = session(urls["mcp"])
        await idle.__aenter__()
        client = await waiting.__aenter__()
        pending = asyncio.create_task(client.call_tool("wait_event", {"timeout": 60}))
        await started.wait()
        started = time.monotonic()
        stop.set()
        assert await task == 0
        assert time.monotonic() - started < 3
        with contextlib.suppress(Exception):
            await pending
        for opened in (waiting, idle):
            with contextlib.suppress(BaseException):
                await opened.__aexit__(None, None, None)
    assert not [r for r in caplog.records if r.name.startswith("uvicorn") and
                r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--syncserver", "notaurl", "--token", "t"], "is not an http(s) URL"),
        (["--syncserver", "ftp://host", "--token", "t"], "is not an http(s) URL"),
        (["--embedded", "--peer", "x=Nope"], "no protocol has a role 'Nope'"),
        (["--embedded", "--secret", "adress"], "--secret adress: Purchase has no such"),
        (["--embedded", "--transport", "http", "--auth-token", ""], "--auth-token is empty"),
    ],
)
async def test_bad_options_of_strabo_mcp_are_usage_errors(options, says):
    """Refused before anything is served (a UsageError is exit status 2 with its
    one line; anything else would be a traceback)."""
    args = build_parser().parse_args(["mcp", "--protocol", PURCHASE, "--role", "Buyer", *options])
    with pytest.raises(UsageError) as refused:
        async with asyncio.timeout(10):  # an option let through would serve until stopped
            await run_mcp(args)
    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--transport", "http", "--port", "70000"], "argument --port: 70000: a port is 0 "
         "(any free one) to 65535"),
        (["--transport", "http", "--port", "-1"], "argument --port: -1: a port is"),
        (["--syncserver-port", "70000"], "argument --syncserver-port: 70000: a port is"),
    ],
)
def test_a_usage_error_is_exit_status_2_with_one_line(capsys, options, says):
    # The command quiets the SDKs' loggers for the process: not for later tests.
    levels = {n: logging.getLogger(n).level for n in ("httpx", "httpx2", "mcp", "uvicorn.error")}
    try:
        # argparse refuses it: nothing runs
        status = main(["mcp", "--protocol", PURCHASE, "--role", "Buyer", "--embedded", *options])
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith(f"strabo mcp: {says}") and err.endswith(
        " (see 'strabo mcp --help')\n"
    )
    assert err.count("\n") == 1


async def test_strabo_mcp_over_stdio_survives_garbage_and_ends_with_its_stdin():
    """A real subprocess: a line that is not JSON, a NaN timeout, an unknown tool,
    then stdin closed while a wait is in progress."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "strabo.cli", "mcp", "--protocol", PURCHASE, "--role", "Buyer",
        "--embedded", cwd=ROOT, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None

    def send(line: str) -> None:
        assert process.stdin is not None
        process.stdin.write(line.encode() + b"\n")

    async def receive() -> dict[str, Any]:
        assert process.stdout is not None
        message: dict[str, Any] = json.loads(await process.stdout.readline())
        return message

    try:
        async with asyncio.timeout(30):
            send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}))
            assert (await receive())["id"] == 1
            send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
            send("this is not JSON")
            send('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": '
                 '{"name": "wait_event", "arguments": {"timeout": NaN}}}')
            garbage = await receive()  # answered: JSON-RPC's parse error, id null
            assert garbage["id"] is None and garbage["error"]["code"] == -32700
            nan = await receive()
            assert nan["id"] == 2 and nan["result"]["isError"]
            send('{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": '
                 '{"name": "Ship", "arguments": {}}}')
            unknown = await receive()
            assert "no tool 'Ship'" in unknown["error"]["message"]
            send('{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": '
                 '{"name": "wait_event", "arguments": {"timeout": 300}}}')
            await process.stdin.drain()
            process.stdin.close()
            assert await process.wait() == 0
            err = (await process.stderr.read()).decode()
            assert "Traceback" not in err, err
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


# MCPTools against a hostile server ---------------------------------------------------------

KEY = "hk/9+Zq=s3cret"  # a token with the characters URLs and JSON escape
KEY_FORMS = [KEY, urllib.parse.quote(KEY, safe=""), urllib.parse.quote_plus(KEY)]


def key_hooks(prefix: str = "h") -> tuple[Hooks, list[tuple[Any, str | None]]]:
    hooks = Hooks()
    outcomes: list[tuple[Any, str | None]] = []
    for tool in ("leak", "leak_error", "leak_protocol_error", "leak_as_name", "crash", "hang"):
        hooks.before(f"{prefix}_{tool}", provides=["api_key"])(
            lambda arguments: {**arguments, "api_key": KEY})
        hooks.after(f"{prefix}_{tool}")(lambda result, error: outcomes.append((result, error)))
    return hooks, outcomes


def no_key(text: str) -> None:
    for form in KEY_FORMS:
        assert form not in text, (form, text)


async def test_echoed_secrets_are_hidden_in_every_form(caplog):
    """The server echoes the key as is, URL-encoded, JSON-escaped, as the name of
    a member, in a tool error and in a protocol error: the model sees none of
    them, the log neither; the coded agent gets the real answer."""
    caplog.set_level(logging.DEBUG)
    hooks, outcomes = key_hooks()
    async with asyncio.timeout(60), serve(hostile_server.app()) as base, MCPTools(
        "h", f"{base}/mcp", hooks=hooks
    ) as tools:
        offered = {t.name: t for t in tools.tools()}
        shown = await offered["h_leak"].call({})
        assert shown["billed_to"] == "[secret]" and shown["request"] == "/forecast?key=[secret]"
        no_key(json.dumps(shown))
        named = await offered["h_leak_as_name"].call({})
        assert named == {"[secret]": "billed"}
        for failing in ("h_leak_error", "h_leak_protocol_error"):
            with pytest.raises(MCPToolError) as failed:
                await offered[failing].call({})
            assert "[secret]" in str(failed.value)
            no_key(str(failed.value))
        real = await tools.call("leak")
        assert real.value["billed_to"] == KEY  # trusted code gets what the server said
        assert outcomes[0][1] is None and outcomes[0][0].value["billed_to"] == KEY
    no_key("\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records
                     if not r.name.startswith(("mcp.server", "uvicorn"))))


async def test_a_server_that_hangs_or_crashes_mid_call():
    """Over stdio: a hanging tool honours the timeout and the connection stays
    usable; a crash is an error at once, and so is every later call."""
    hooks, outcomes = key_hooks()
    async with asyncio.timeout(60), MCPTools("h", HOSTILE, hooks=hooks, timeout=0.5) as tools:
        started = time.monotonic()
        with pytest.raises(MCPToolError, match=r"h_hang: the MCP server h failed: .*timed out"):
            await tools.call("hang")
        assert time.monotonic() - started < 5
        assert (await tools.call("echo", {"text": "still here"})).value == "still here"
        with pytest.raises(MCPToolError, match="h_crash: the MCP server h failed"):
            await tools.call("crash")
        with pytest.raises(MCPToolError, match="h_echo: the MCP server h failed"):
            await tools.call("echo", {"text": "anyone?"})
        assert [error is not None for _, error in outcomes] == [True, True]
        for _, error in outcomes:
            no_key(error or "")


async def test_a_server_that_never_answers_at_start_is_given_up():
    started = time.monotonic()
    asleep = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # reads, never answers
    with pytest.raises(MCPToolError, match=r"cannot reach the MCP server h .*no answer within 1 s"):
        async with asyncio.timeout(30), MCPTools("h", asleep, connect_timeout=1):
            pass
    assert time.monotonic() - started < 10  # the timeout, and the process stopped


async def test_a_key_in_the_server_url_is_not_shown():
    async with asyncio.timeout(30), serve(hostile_server.app()) as base:
        url = f"http://user:pa55word@{base.removeprefix('http://')}/nowhere?key=K3Y-in-url"
        with pytest.raises(MCPToolError) as failed:
            await MCPTools("h", url, timeout=5).connect()
    message = str(failed.value)
    assert "cannot reach the MCP server h (http://127.0.0.1:" in message
    assert "K3Y-in-url" not in message and "pa55word" not in message


async def test_listings_the_model_apis_would_refuse_are_made_usable():
    """Every page of a paged listing; names made valid (and no longer than 64);
    a schema whose properties are not an object; huge and non-text results."""
    async with asyncio.timeout(60), serve(hostile_server.app("paged")) as paged, MCPTools(
        "h", f"{paged}/mcp"
    ) as tools:
        assert len(tools.names) == len(hostile_server.tools("paged"))
        assert "h_get_weather_" in tools.names
        assert all(len(name) <= 64 for name in tools.names)
        assert len((await tools.call("huge", {"size": 2_000_000})).text) == 2_000_000
        odd = await tools.call("odd_content")
        assert odd.text == "[image content]\nand some text"
        with pytest.raises(MCPToolError) as malformed:
            await tools.call("bad_output")
        assert "Invalid structured content returned by tool bad_output" in str(malformed.value)
        assert "\n" not in str(malformed.value)  # one line, not the validator's report
    async with asyncio.timeout(60), serve(hostile_server.app("badschema")) as bad, MCPTools(
        "h", f"{bad}/mcp"
    ) as tools:
        [tool] = [t for t in tools.tools() if t.name == "h_no_properties"]
        assert tool.input_schema["properties"] == {} and "required" not in tool.input_schema


async def test_colliding_names_are_refused_and_the_server_stopped(tmp_path):
    pidfile = tmp_path / "pid"
    session_logger = logging.getLogger("mcp.client.session")
    filters = list(session_logger.filters)
    with pytest.raises(MCPToolError, match=r"tools 'a\.b' and 'a_b' both become 'h_a_b'"):
        async with asyncio.timeout(30), MCPTools(
            "h", [*HOSTILE, "badnames"], env={"HOSTILE_PIDFILE": str(pidfile)}
        ):
            pass
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        alive = False  # the server process was stopped (and reaped)
    else:
        alive = True
        os.kill(pid, signal.SIGKILL)  # left running: the test fails, and ends
    assert not alive
    assert session_logger.filters == filters  # and the log filters removed
