"""Slow, silent and greedy clients cost bounded time and memory.

Regression: uvicorn kept connections that never finished their headers or body,
and event streams whose reader stopped reading, forever; each such stream kept
every batch published since, so memory grew with the traffic.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from langshaw import ActionInstance
from syncserver import Limits
from tests.hostile._support import SIMPLE, closed_by_server, create, guarded, raw

AGENTS = {"p1": ["Platform"], "b1": ["Business"]}
PATH = "/mas/default/protocols/SimpleUCP"
AUTH = "Authorization: Bearer p1-token\r\n"
FAST = Limits(header_timeout=0.5, body_timeout=0.5, keep_alive_timeout=0.5, write_timeout=0.5)


def head(body: int = 0) -> bytes:
    return (
        f"POST {PATH}/attempts HTTP/1.1\r\nHost: x\r\n{AUTH}"
        f"Content-Type: application/json\r\nContent-Length: {body}\r\n\r\n"
    ).encode()


def error_of(response: bytes) -> dict[str, Any]:
    status, _, rest = response.partition(b"\r\n")
    body = rest.partition(b"\r\n\r\n")[2]
    return {"status": int(status.split()[1]), **json.loads(body)["error"]}


async def trickle(writer: asyncio.StreamWriter, data: bytes, every: float) -> None:
    """Send ``data`` a byte at a time (a slowloris client), until the server hangs up."""
    for byte in data:
        if writer.is_closing():
            return
        writer.write(bytes([byte]))
        try:
            await writer.drain()
        except ConnectionError:
            return
        await asyncio.sleep(every)  # the client's slowness is what is under test


async def test_a_silent_connection_is_closed() -> None:
    async with guarded([SIMPLE], AGENTS, FAST) as (_, url):
        reader, writer = await raw(url)
        assert await closed_by_server(reader, 5) == b""
        writer.close()


async def test_trickled_headers_get_408_and_the_connection_closes() -> None:
    async with guarded([SIMPLE], AGENTS, FAST) as (_, url):
        reader, writer = await raw(url)
        sender = asyncio.create_task(trickle(writer, head(), 0.1))
        response = await closed_by_server(reader, 5)
        sender.cancel()
        writer.close()
    assert error_of(response) == {
        "status": 408,
        "code": "header-timeout",
        "message": "the request headers were not complete within 0.5 s",
    }


async def test_a_trickled_body_gets_408_and_the_connection_closes() -> None:
    body = json.dumps({"instances": [create("c1")]}).encode()
    async with guarded([SIMPLE], AGENTS, FAST) as (server, url):
        reader, writer = await raw(url)
        writer.write(head(len(body)))
        sender = asyncio.create_task(trickle(writer, body, 0.1))
        response = await closed_by_server(reader, 5)
        sender.cancel()
        writer.close()
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == 0
    assert error_of(response)["status"] == 408
    assert error_of(response)["code"] == "body-timeout"


async def test_many_slowloris_connections_are_all_closed() -> None:
    async with guarded([SIMPLE], AGENTS, FAST) as (_, url):
        request, pairs = head(), []
        for _ in range(200):
            # The first byte goes out at once: opening 200 connections on a slow
            # machine can take longer than the timeout, and a connection that
            # has sent nothing is closed silently, not answered.
            reader, writer = await raw(url)
            writer.write(request[:1])
            pairs.append((reader, writer))
        senders = [asyncio.create_task(trickle(w, request[1:], 0.2)) for _, w in pairs]
        answers = await asyncio.gather(*(closed_by_server(r, 10) for r, _ in pairs))
        for sender in senders:
            sender.cancel()
        for _, writer in pairs:
            writer.close()
    assert {error_of(a)["code"] for a in answers} == {"header-timeout"}


async def test_past_max_connections_a_request_gets_503() -> None:
    limits = Limits(max_connections=5)
    async with guarded([SIMPLE], AGENTS, limits) as (_, url):
        held = [await raw(url) for _ in range(5)]
        reader, writer = await raw(url)
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = error_of(await closed_by_server(reader, 5))
        assert answer["status"] == 503 and answer["code"] == "overloaded"
        for _, w in held:
            w.close()
        writer.close()


# Event streams ---------------------------------------------------------------------


class Watched(set):
    """The ledger's subscriber set, waking a waiter whenever one leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    def discard(self, item: Any) -> None:
        super().discard(item)
        self.changed.set()

    async def empty(self, seconds: float) -> None:
        async def wait() -> None:
            while self:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), seconds)


def big_create(cid: str, size: int = 40_000) -> ActionInstance:
    bindings = create(cid)["bindings"]
    bindings["line_items"] = [{"item": {"id": "x" * size, "title": "big"}, "quantity": 1}]
    return ActionInstance(SIMPLE.action("Create"), bindings)


async def open_stream(url: str, rcvbuf: int = 4096, token: str = "p1-token") -> Any:
    reader, writer = await raw(url, rcvbuf=rcvbuf)
    writer.write(
        f"GET {PATH}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    await writer.drain()
    await asyncio.wait_for(reader.readuntil(b": connected\n\n"), 5)
    return reader, writer


async def test_streams_that_do_not_read_are_dropped_and_free_everything() -> None:
    # A stream that lags ends its response; the server then closes the connection
    # once it has been idle for keep_alive_timeout (5 s by default): short here.
    limits = Limits(write_timeout=0.5, stream_backlog_bytes=200_000, keep_alive_timeout=0.2)
    async with guarded([SIMPLE], AGENTS, limits) as (server, url):
        ledger = server.ledgers[("default", "SimpleUCP")]
        ledger.subscribers = watched = Watched()
        streams = [await open_stream(url) for _ in range(30)]
        assert len(watched) == 30
        agent = server.agent("default", "p1")
        for i in range(100):  # 4 MB each stream would have to hold
            await server.attempt("default", "SimpleUCP", agent, [big_create(f"c{i}")])
        await watched.empty(10)
        for reader, writer in streams:
            received = await closed_by_server(reader, 10)
            assert len(received) < 100 * 40_000
            writer.close()
        # The agent may open streams again: nothing of the dropped ones is counted.
        again = [await open_stream(url) for _ in range(limits.max_streams_per_agent)]
        for _, writer in again:
            writer.close()


async def test_a_stream_that_falls_behind_is_told_where_to_resume() -> None:
    # The response ends with the lagging error; the connection, idle, then closes.
    limits = Limits(write_timeout=30, stream_backlog_bytes=200_000, keep_alive_timeout=0.2)
    async with guarded([SIMPLE], AGENTS, limits) as (server, url):
        reader, writer = await open_stream(url)
        agent = server.agent("default", "p1")
        for i in range(100):
            await server.attempt("default", "SimpleUCP", agent, [big_create(f"c{i}")])
        text = (await closed_by_server(reader, 10)).decode()
        writer.close()
    ids = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]
    assert ids == list(range(1, len(ids) + 1)) and len(ids) < 100
    error = next(line for line in text.splitlines() if line.startswith("data: {\"error\""))
    assert json.loads(error[6:])["error"]["code"] == "lagging"
    assert json.loads(error[6:])["error"]["after"] == (ids[-1] if ids else 0)


async def test_an_agent_holds_a_bounded_number_of_streams() -> None:
    limits = Limits(max_streams_per_agent=3)
    async with guarded([SIMPLE], AGENTS, limits) as (_, url):
        held = [await open_stream(url) for _ in range(3)]
        reader, writer = await raw(url)
        writer.write(
            f"GET {PATH}/events HTTP/1.1\r\nHost: x\r\n{AUTH}Connection: close\r\n\r\n".encode()
        )
        answer = error_of(await closed_by_server(reader, 5))
        assert answer["status"] == 429 and answer["code"] == "too-many-streams"
        other = await open_stream(url, token="b1-token")  # another agent is not affected
        for _, w in [*held, other]:
            w.close()
        writer.close()


@pytest.mark.parametrize("field", ["header_timeout", "max_connections"])
def test_limits_in_the_config_file_are_checked(tmp_path, field) -> None:
    from syncserver import ConfigError, load_config
    from tests.conftest import PROTOCOLS

    config = tmp_path / "mas.toml"
    config.write_text(
        f"[server]\n{field} = -1\n[mas.m]\nprotocols = [\"{PROTOCOLS / 'atomic-ucp.lsh'}\"]\n"
        "[mas.m.agents.a]\nroles = [\"Platform\"]\ntoken = \"t\"\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert f"server.{field}: must be a positive" in str(info.value)
