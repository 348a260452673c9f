"""The fast lane (syncserver/_fastlane.py) answers as the ASGI lane does.

Two SyncServers, alike but for the lane (on in one, off in the other), each
behind the guarded uvicorn protocol as ``strabo syncserver`` serves it, get the
same raw requests, in the same order, on loopback; their answers must be the
same bytes but for Date and Server. Each server's app counts the requests that
reach it as ASGI, so each case also says which lane carried it: a lane that
took nothing, or too much, fails here as well as one that answers differently.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from strabo.serving import serve
from syncserver import Limits, SyncServer, create_app, uvicorn_options
from syncserver.config import ConfigError, build_config
from tests.conftest import SIMPLE_CREATE, load

SIMPLE = load("atomic-ucp.lsh")
PURCHASE = load("purchase.lsh")
PATH = "/mas/default/protocols/SimpleUCP/attempts"
AGENTS = {
    "platform": ["SimpleUCP:Platform"],
    "business": ["SimpleUCP:Business"],
    "capped": ["SimpleUCP:Platform"],  # a mandate of one enactment
    "buyer": ["Purchase:Buyer"],  # plays no role in SimpleUCP
}
LIMITS = Limits(max_body=4096, body_timeout=0.5)
HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


class Counted:
    """The app as uvicorn runs it, noting each HTTP request that reaches it."""

    def __init__(self, app: Any) -> None:
        self.app = app  # the guard finds the lane's endpoint through this
        self.seen: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append(f"{scope['method']} {scope['path']}")
        await self.app(scope, receive, send)


@contextlib.asynccontextmanager
async def served(policy: str, lane: bool) -> AsyncIterator[tuple[str, Counted]]:
    server = SyncServer.embedded(
        [SIMPLE, PURCHASE],
        AGENTS,
        tokens={a: f"{a}-token" for a in AGENTS},
        mandates={"capped": {"enactments": 1}},
        policy=policy,
        batch_window_ms=2,
    )
    app = Counted(create_app(server, limits=LIMITS, fast_lane=lane))
    async with serve(app, **uvicorn_options(LIMITS)) as url:
        yield url, app


def create(cid: str, **extra: Any) -> bytes:
    return json.dumps(
        {"instances": [{"action": "Create", "bindings": {"cid": cid, **SIMPLE_CREATE}}], **extra}
    ).encode()


def post(
    body: bytes,
    agent: str | None = "platform",
    path: str = PATH,
    headers: str = "",
    method: str = "POST",
) -> bytes:
    auth = f"Authorization: Bearer {agent}-token\r\n" if agent else ""
    return (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n"
        f"{headers}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


@dataclass
class Case:
    name: str
    writes: list[bytes]  # written one after the other on one connection
    answers: int  # responses expected (a 100 Continue counts)
    lane: int  # how many of the requests the fast lane takes
    closes: bool = False  # the server closes the connection after the answers
    head: bool = False  # a HEAD request: no body follows its answer's head
    requests: int = field(default=0)  # requests that reach the app without the lane


CHUNKED = (
    f"POST {PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer platform-token\r\n"
    "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
).encode()


def chunked(body: bytes) -> bytes:
    return CHUNKED + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def cases() -> list[Case]:
    valid = post(create("c1"))
    split = post(create("c10"))
    trickled = post(create("c10b"))
    return [
        Case("a valid attempt", [valid], 1, lane=1),
        Case("a protocol violation (the same Create again)", [valid], 1, lane=1),
        Case(
            "a retried attempt_id",
            [post(create("c2", attempt_id="a-1")), post(create("c2", attempt_id="a-1"))],
            2,
            lane=2,
        ),
        Case("another role's action", [post(create("c3"), "business")], 1, lane=1),
        Case("within the mandate", [post(create("c4"), "capped")], 1, lane=1),
        Case("past the mandate", [post(create("c5"), "capped")], 1, lane=1),
        Case("bad JSON", [post(b'{"instances": [')], 1, lane=1),
        Case("a bad shape", [post(b'{"instances": []}')], 1, lane=1),
        Case("NaN", [post(create("c6").replace(b'"USD"', b"NaN"))], 1, lane=1),
        Case(
            "not labelled JSON",
            [post(create("c7")).replace(b"application/json", b"text/plain")],
            1,
            lane=1,
        ),
        Case("an oversized body", [post(b"[" + b" " * 5000 + b"]")], 1, lane=1),
        Case("an unknown token", [post(create("c8"), "nobody")], 1, lane=1),
        Case("no token", [post(create("c8"), None)], 1, lane=1),
        Case(
            "another scheme",
            [post(create("c8"), None, headers="Authorization: Basic eDp5\r\n")],
            1,
            lane=1,
        ),
        Case("an unknown MAS", [post(create("c8"), path=PATH.replace("default", "x"))], 1, lane=1),
        Case(
            "an unknown protocol",
            [post(create("c8"), path=PATH.replace("SimpleUCP", "Nope"))],
            1,
            lane=1,
        ),
        Case("no role in the protocol", [post(create("c8"), "buyer")], 1, lane=1),
        Case("GET on the path", [post(b"", method="GET")], 1, lane=0),
        Case("HEAD on the path", [post(b"", method="HEAD")], 1, lane=0, head=True),
        Case("a query string", [post(create("c9"), path=PATH + "?x=1")], 1, lane=1),
        Case("a percent-encoded path", [post(create("c9b"), path=PATH.replace("U", "%55"))], 1, 1),
        Case("in three pieces", [split[:20], split[20:150], split[150:]], 1, lane=1),
        Case(
            "byte by byte",
            [trickled[i : i + 1] for i in range(len(trickled))],
            1,
            lane=1,
        ),
        Case(
            "odd but valid headers",
            [post(create("c11"), None, headers="authorization:Bearer platform-token \t\r\n")],
            1,
            lane=1,
        ),
        Case(
            "Connection: keep-alive",
            [post(create("c12"), headers="Connection: Keep-Alive\r\n")],
            1,
            lane=1,
        ),
        Case(
            "pipelined, then another endpoint",
            [post(create("c13")) + post(create("c14")) + HEALTH],
            3,
            lane=2,
        ),
        Case("another endpoint, then pipelined", [HEALTH + post(create("c15"))], 2, lane=0),
        Case("a refusal pipelined", [post(b"{}", "nobody") + post(create("c16"))], 2, lane=2),
        Case("a chunked body", [chunked(create("c17"))], 1, lane=0),
        Case(
            "Expect: 100-continue",
            [post(create("c18"), headers="Expect: 100-continue\r\n")],
            2,
            lane=0,
        ),
        Case(
            "Connection: close",
            [post(create("c19"), headers="Connection: close\r\n")],
            1,
            lane=0,
            closes=True,
        ),
        Case(
            "HTTP/1.0",
            [post(create("c20")).replace(b"HTTP/1.1", b"HTTP/1.0", 1)],
            1,
            lane=0,
            closes=True,
        ),
        Case(
            "no Host",
            [post(create("c21")).replace(b"Host: x\r\n", b"")],
            1,
            lane=0,
            closes=True,
        ),
        Case(
            "a space before a colon",
            [post(create("c22")).replace(b"Host: x", b"Host : x")],
            1,
            lane=0,
            closes=True,
        ),
        Case(
            "two lengths",
            [post(create("c23"), headers=f"Content-Length: {len(create('c23'))}\r\n")],
            1,
            lane=0,
        ),
        Case(
            "no length",
            [post(b"").replace(b"Content-Length: 0\r\n", b"")],
            1,
            lane=0,
        ),
    ]


async def read_answer(reader: asyncio.StreamReader, head_only: bool) -> tuple[Any, ...]:
    """One response: its status line, its headers but Date and Server, its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].split(b"\r\n")
    fields = [tuple(line.split(b": ", 1)) for line in lines[1:]]
    status = int(lines[0].split(b" ")[1])
    length = dict(fields).get(b"content-length")  # type: ignore[arg-type,call-overload]
    if status < 200 or head_only:
        body = b""
    elif length is None:
        body = await reader.read()  # delimited by the connection's end
    else:
        body = await reader.readexactly(int(length))
    kept = [f for f in fields if f[0] not in (b"date", b"server")]
    return lines[0], kept, body


async def exchange(url: str, case: Case) -> list[tuple[Any, ...]]:
    """The case's answers on a new connection; then /health, to show that the
    connection is still usable and in step (or the end of it, if it closes)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        answers = []
        for piece in case.writes:
            writer.write(piece)
            await writer.drain()
        for _ in range(case.answers):
            answers.append(await asyncio.wait_for(read_answer(reader, case.head), 10))
        if case.closes:
            assert await asyncio.wait_for(reader.read(), 10) == b""
        else:
            writer.write(HEALTH)
            health = await asyncio.wait_for(read_answer(reader, False), 10)
            assert health[0] == b"HTTP/1.1 200 OK", health
        return answers
    finally:
        writer.close()


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_both_lanes_answer_the_same_bytes(policy: str) -> None:
    async with served(policy, True) as (fast, on), served(policy, False) as (slow, off):
        for case in cases():
            before_on, before_off = len(on.seen), len(off.seen)
            got = await exchange(fast, case)
            expected = await exchange(slow, case)
            assert got == expected, case.name
            # Each request but the closing /health reached the app without the lane.
            asgi = len(off.seen) - before_off - (not case.closes)
            through = len(on.seen) - before_on - (not case.closes)
            assert through == asgi - case.lane, (case.name, on.seen[before_on:])


async def test_the_cases_cover_answers_of_every_kind() -> None:
    """The comparison above means something only if the answers differ:
    successes, violations and refusals of each kind among them."""
    async with served("instant", True) as (fast, _):
        statuses = set()
        for case in cases():
            for status_line, _, _ in await exchange(fast, case):
                statuses.add(int(status_line.split(b" ")[1]))
    assert statuses >= {100, 200, 400, 401, 403, 404, 405, 409, 413, 415}, statuses


@pytest.mark.parametrize("lane", [True, False])
async def test_a_refused_head_whose_body_never_comes_is_closed_after_its_answer(
    lane: bool,
) -> None:
    """Answered on its head (401), the request still owes its body: the guard's
    body timer closes the connection when it does not come, with no 408 (the
    answer went already), in either lane."""
    async with served("instant", lane) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(post(create("c1"), "nobody")[:-10])  # ten bytes short
        status, _, body = await asyncio.wait_for(read_answer(reader, False), 10)
        assert status == b"HTTP/1.1 401 Unauthorized", body
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing more
        writer.close()


@pytest.mark.parametrize("after", [False, True], ids=["first", "after-an-answer"])
@pytest.mark.parametrize("partial", [b"POST /mas/default/pro", b"GET /health HTTP/1.1\r\n"])
async def test_a_partial_head_gets_408(partial: bytes, after: bool) -> None:
    """A partial head counts against header_timeout, whether the lane holds it
    or h11, on a new connection or after an answer of the lane's."""
    limits = Limits(header_timeout=0.3)
    server = SyncServer.embedded([SIMPLE], {"platform": ["Platform"]}, tokens={"platform": "p"})
    async with serve(create_app(server, limits=limits), **uvicorn_options(limits)) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        if after:
            writer.write(post(create("c1")).replace(b"platform-token", b"p"))
            status, _, body = await asyncio.wait_for(read_answer(reader, False), 10)
            assert status == b"HTTP/1.1 200 OK", body
        writer.write(partial)
        answer = await asyncio.wait_for(reader.read(), 10)
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout"), answer
        assert b"header-timeout" in answer
        writer.close()


def test_the_configuration_turns_the_lane_off() -> None:
    data: dict[str, Any] = {
        "mas": {
            "m": {"protocols": [SIMPLE], "agents": {"a": {"roles": ["Platform"], "token": "t"}}}
        },
    }
    assert build_config(data).fast_lane is True
    data["server"] = {"fast_lane": False}
    config = build_config(data)
    assert config.fast_lane is False
    server = SyncServer(config)
    assert create_app(server).state.fast_lane is None
    assert create_app(server, fast_lane=True).state.fast_lane is not None
    data["server"] = {"fast_lane": "no"}
    with pytest.raises(ConfigError, match=r"server\.fast_lane: must be true or false"):
        build_config(data)


async def test_an_attempt_in_flight_at_shutdown_is_answered_then_closed() -> None:
    """uvicorn's graceful shutdown closes idle connections at once; one whose
    attempt the lane is finalizing gets its answer first, then the close."""
    server = SyncServer.embedded(
        [SIMPLE], {"platform": ["Platform"]}, tokens={"platform": "p"},
        policy="batched", batch_window_ms=500,  # in flight past uvicorn's 0.1 s tick
    )
    app = create_app(server, limits=LIMITS)
    endpoint = app.state.fast_lane
    admitted = asyncio.Event()
    endpoint.on_attempt = lambda mas, agent: admitted.set()
    stack = contextlib.AsyncExitStack()
    url = await stack.enter_async_context(serve(app, **uvicorn_options(LIMITS)))
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(post(create("c1")).replace(b"platform-token", b"p"))
        await asyncio.wait_for(admitted.wait(), 10)
        stopping = asyncio.create_task(stack.aclose())  # the server shuts down
        status, _, body = await asyncio.wait_for(read_answer(reader, False), 10)
        assert status == b"HTTP/1.1 200 OK", body
        assert await asyncio.wait_for(reader.read(), 10) == b""
        await asyncio.wait_for(stopping, 10)
    finally:
        writer.close()
        await stack.aclose()
