"""``strabo inspect`` against servers that answer slowly, too much, or the wrong
thing, and ``GET /mas/{mas}/agents`` against clients that misbehave: the CLI
says what is wrong (no traceback, the deadline kept, nothing printed raw to
the terminal), and the SyncServer's connection table forgets every stream
however it ended."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

import syncserver.app
from strabo.cli import main
from syncserver import SyncServer, create_app
from syncserver._presence import Presence
from syncserver.config import build_config
from syncserver.serving import serve
from tests.conftest import load
from tests.processes import ROOT

SIMPLE = load("atomic-ucp.lsh")
AGENT = {"kind": "strabo.agent", "agent": "a"}

Send = Callable[[dict[str, Any]], Awaitable[None]]


async def _json(send: Send, data: Any, status: int = 200) -> None:
    await _body(send, json.dumps(data).encode(), status, b"application/json")


async def _body(send: Send, body: bytes, status: int = 200, kind: bytes = b"text/html") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind)]})
    await send({"type": "http.response.body", "body": body})


async def hostile(scope: dict[str, Any], receive: Any, send: Send) -> None:
    """One server, a misbehaviour per path prefix (/slow, /html, ...)."""
    if scope["type"] != "http":
        return
    kind, _, rest = scope["path"].strip("/").partition("/")
    if kind == "slow":  # a byte every 0.2 s, without end: only the client can stop it
        await receive()  # the request's (empty) body
        gone = asyncio.create_task(receive())  # then: the client left
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while not gone.done():
            await send({"type": "http.response.body", "body": b" ", "more_body": True})
            await asyncio.wait({gone}, timeout=0.2)  # the dribble is the behaviour tested
        await send({"type": "http.response.body", "body": b""})
    elif kind == "silent":  # takes the request, answers nothing until the client leaves
        await receive()
        await receive()
    elif kind == "html":
        await _body(send, b"<html><body>It works!</body></html>")
    elif kind == "huge":  # an agent that answers 9 MB
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'{"kind": "strabo.agent", "x": "',
                    "more_body": True})
        for _ in range(9 * 16):
            await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
        await send({"type": "http.response.body", "body": b'"}'})
    elif kind == "nested":
        await _body(send, b"[" * 200_000, kind=b"application/json")
    elif kind == "shapes":  # an agent, with fields of the wrong types
        shapes = {
            "roles-text": {**AGENT, "roles": "oops"},
            "rule-nameless": {**AGENT, "roles": [{"spec": {"responsibilities": [
                {"must_never": [{}]}]}}]},
            "count-text": {**AGENT, "roles": [{"enabled": {"count": "7", "actions": []}}]},
            "enabled-list": {**AGENT, "roles": [{"enabled": [1, 2]}]},
        }
        await _json(send, shapes.get(rest.removesuffix("/inspect"), {}))
    elif kind == "escape":
        await _json(send, {**AGENT, "agent": "\x1b[2J\x1b]0;owned\x07evil", "roles": [
            {"role": "R\x1b[31m", "pending": ["t\rx"], "counters": {"\x1b[5m": 1}}]})
    elif kind == "failing":  # an agent whose inspection fails
        await _json(send, {"error": {"code": "inspection-failed",
                                     "message": "LookupError: gone"}}, 500)
    elif kind == "server":  # a SyncServer whose listing has the wrong shape
        if rest == "health":
            await _json(send, {"status": "ok", "policy": "instant"})
        elif rest.startswith("mas/"):
            listing = {"agents": "nope"} if "text" in rest else [1, 2]
            await _json(send, listing)
        else:
            await _json(send, {"error": {"message": "no"}}, 404)
    else:
        await _json(send, {"error": {"message": "no"}}, 404)


async def inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, ["inspect", *args])
    out, err = capsys.readouterr()
    return code, out, err


async def test_a_slow_server_is_given_up_on_at_the_deadline() -> None:
    """The server dribbles a byte every 0.2 s and never ends the answer: the CLI
    ends only by keeping its deadline. How soon is not asserted (the child's
    start-up, seconds on a busy machine, is no part of it): the 60 s are a safety
    net for a CLI that would wait forever."""
    async with serve(hostile) as url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "strabo.cli", "inspect", f"{url}/slow", "--timeout", "1",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 1, err.decode()
    assert "did not answer in full within 1 s (--timeout)" in err.decode()
    assert "Traceback" not in err.decode() and out == b""


async def test_a_server_that_says_nothing_is_given_up_on_with_the_same_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The deadline running out inside a read (httpx's timeout) is the deadline too:
    the message names --timeout, as when it runs out between two chunks."""
    async with serve(hostile) as url:
        code, out, err = await inspect(capsys, f"{url}/silent", "--timeout", "1")
    assert code == 1 and out == "", err
    assert f"{url}/silent did not answer in full within 1 s (--timeout)" in err


async def test_answers_of_the_wrong_kind_are_reported_not_crashed_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with serve(hostile) as url:
        html = await inspect(capsys, f"{url}/html")
        huge = await inspect(capsys, f"{url}/huge")
        nested = await inspect(capsys, f"{url}/nested")
        failing = await inspect(capsys, f"{url}/failing")
        shapes = [
            await inspect(capsys, f"{url}/shapes/{name}")
            for name in ("roles-text", "rule-nameless", "count-text", "enabled-list")
        ]
        server_text = await inspect(capsys, f"{url}/server", "--token", "t", "--mas", "text")
        server_list = await inspect(capsys, f"{url}/server", "--token", "t")
        as_json = await inspect(capsys, f"{url}/shapes/roles-text", "--json")
    assert html[0] == 1 and "neither a SyncServer" in html[2]
    assert huge[0] == 1 and "answered more than 8388608 bytes" in huge[2]
    assert nested[0] == 1 and "neither a SyncServer" in nested[2]
    assert failing[0] == 1 and "answered 500: LookupError: gone" in failing[2]
    for code, out, err in shapes:
        assert code == 1 and out == "", err
        assert "answered JSON of an unexpected shape" in err and "--json" in err
    assert server_text[0] == 1 and "unexpected shape" in server_text[2]
    assert server_list[0] == 1 and "without a JSON object" in server_list[2]
    assert as_json[0] == 0 and json.loads(as_json[1])["roles"] == "oops"  # as it came


async def test_terminal_escapes_from_the_server_are_shown_not_obeyed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with serve(hostile) as url:
        code, out, err = await inspect(capsys, f"{url}/escape")
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert out.splitlines()[0] == "agent \\x1b[2J\\x1b]0;owned\\x07evil"
    assert "role R\\x1b[31m" in out and "pending: t\\rx" in out


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf", "1e9"])
async def test_a_timeout_must_be_a_sensible_number(
    capsys: pytest.CaptureFixture[str], seconds: str
) -> None:
    code, _, err = await inspect(capsys, "http://127.0.0.1:9", "--timeout", seconds)
    assert code == 2 and "--timeout" in err


async def test_an_invalid_url_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = await inspect(capsys, "http://[::1")
    assert code == 2 and "not a valid URL (Invalid port: ':1')" in err
    async with serve(hostile) as url:
        code, _, err = await inspect(capsys, f"{url}/server", "--token", "t", "--mas", "m" * 70000)
    assert code == 2 and "not a valid URL (URL too long): check URL and --mas" in err


# The SyncServer's side ---------------------------------------------------------------


class Watched(Presence):
    """The server's connection table, telling the test when a stream closes."""

    changed: asyncio.Event
    closes = 0

    def closed(self, mas: str, agent: str, protocol: str) -> None:
        super().closed(mas, agent, protocol)
        Watched.closes += 1
        Watched.changed.set()


async def test_streams_are_forgotten_however_the_client_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Watched.changed, Watched.closes = asyncio.Event(), 0
    tables: list[Presence] = []

    def make() -> Presence:
        tables.append(Watched())
        return tables[-1]

    monkeypatch.setattr(syncserver.app, "Presence", make)
    config = build_config({"mas": {
        "one": {"protocols": [SIMPLE], "agents": {"a": {"roles": ["Platform"], "token": "ta"}}},
        "two": {"protocols": [SIMPLE], "agents": {"b": {"roles": ["Business"], "token": "tb"}}},
    }})
    server = SyncServer(config)
    async with serve(create_app(server)) as url:
        host, port = url.removeprefix("http://").split(":")
        request = (b"GET /mas/one/protocols/SimpleUCP/events HTTP/1.1\r\nHost: x\r\n"
                   b"Authorization: Bearer ta\r\n\r\n")
        for round_ in range(20):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(request)
            await writer.drain()
            if round_ % 2:  # read the first bytes: the stream is counted by then
                assert (await reader.readuntil(b": connected\n\n")).startswith(b"HTTP/1.1 200")
            writer.close()  # odd rounds leave mid-stream; even ones before the first byte
            await writer.wait_closed()
        (table,) = tables

        async def all_closed() -> None:  # every stream reached the app, and ended
            while Watched.closes < 20:
                Watched.changed.clear()
                if Watched.closes < 20:
                    await Watched.changed.wait()

        await asyncio.wait_for(all_closed(), 10)
        assert table.total == 0
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            listing = (await client.get("/mas/one/agents", headers={"Authorization": "Bearer ta"}))
            other = await client.get("/mas/one/agents", headers={"Authorization": "Bearer tb"})
            health = (await client.get("/health")).json()
    assert listing.json()["agents"][0]["connected"] is False
    assert listing.json()["agents"][0]["streams"] == {}
    assert other.status_code == 401  # a token of another MAS lists nothing here
    assert health["streams"] == 0
    assert table._table == {}  # nothing left behind


def test_an_inspection_port_out_of_range_is_a_usage_error() -> None:
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-test"}
    done = subprocess.run(
        [sys.executable, "-m", "strabo.cli", "agent", "--protocol", "purchase", "--role",
         "Buyer", "--goal", "x", "--embedded", "--inspect-port", "70000"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "argument --inspect-port: 70000: a port is 0 (any free one) to 65535" in done.stderr
    assert "Traceback" not in done.stderr
