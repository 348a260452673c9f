"""The event stream: resume from any point, survive drops, never lose or repeat."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import PeachAdapter
from tests.conftest import SIMPLE_CREATE, load
from tests.harness import Harness, until

SIMPLE = load("atomic-ucp.lsh")
AGENTS = {"platform": ["Platform"], "business": ["Business"]}
CREATE = SIMPLE_CREATE


async def read_events(client: Any, count: int, **request: Any) -> list[dict[str, Any]]:
    """Read ``count`` batches from the SSE endpoint, parsing the wire format by hand."""
    events: list[dict[str, Any]] = []
    async with client.stream("GET", "/mas/default/protocols/SimpleUCP/events", **request) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        frame: dict[str, str] = {}
        async for line in r.aiter_lines():
            if line == "":
                if "data" in frame:
                    events.append(
                        {
                            "id": int(frame["id"]),
                            "event": frame["event"],
                            **json.loads(frame["data"]),
                        }
                    )
                    if len(events) == count:
                        return events
                frame = {}
            elif not line.startswith(":"):
                field, _, value = line.partition(": ")
                frame[field] = value
    return events


async def create_many(h: Harness, n: int) -> None:
    agent = h.server.agent("default", "platform")
    for i in range(n):
        await h.server.attempt(
            "default",
            "SimpleUCP",
            agent,
            [ActionInstance(SIMPLE.action("Create"), {"cid": f"c{i}", **CREATE})],
        )


async def test_resume_from_a_sequence_number_or_last_event_id() -> None:
    async with Harness("http", [SIMPLE], AGENTS) as h:
        await create_many(h, 5)
        async with h.client("business") as client:
            everything = await read_events(client, 5)
            assert [e["id"] for e in everything] == [1, 2, 3, 4, 5]
            assert everything[0]["event"] == "batch"
            assert everything[0]["instances"][0]["bindings"]["cid"] == "c0"
            after = await read_events(client, 2, params={"after": 3})
            assert [e["seq"] for e in after] == [4, 5]
            header = await read_events(client, 1, headers={"Last-Event-ID": "4"})
            assert [e["seq"] for e in header] == [5]
            # Live events follow the backlog on the same connection.
            reader = asyncio.create_task(read_events(client, 3, params={"after": 4}))
            agent = h.server.agent("default", "platform")
            for cid in ("live1", "live2"):
                await h.server.attempt(
                    "default",
                    "SimpleUCP",
                    agent,
                    [ActionInstance(SIMPLE.action("Create"), {"cid": cid, **CREATE})],
                )
            live = await asyncio.wait_for(reader, 10)
            assert [e["seq"] for e in live] == [5, 6, 7]


@pytest.mark.parametrize("kind", ["local", "http"])
async def test_dropped_streams_resume_without_loss_or_duplicates(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        business = h.adapter("business", "Business")
        seen: list[str] = []
        changed = asyncio.Event()

        @business.observation("Create")
        async def observe(action: ActionInstance, performer: str) -> None:
            seen.append(action["cid"])
            changed.set()

        async with business:
            await create_many(h, 3)
            await until(lambda: len(seen) == 3, changed)
            h.server.close_streams()  # every live stream drops
            agent = h.server.agent("default", "platform")
            for i in range(3, 8):
                await h.server.attempt(
                    "default",
                    "SimpleUCP",
                    agent,
                    [ActionInstance(SIMPLE.action("Create"), {"cid": f"c{i}", **CREATE})],
                )
            await until(lambda: len(seen) == 8, changed, seconds=10)
            await business.drain()
        assert seen == [f"c{i}" for i in range(8)]


async def test_a_lagging_subscriber_is_cut_off_and_catches_up_from_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Harness("local", [SIMPLE], AGENTS, subscriber_backlog=2) as h:
        business = h.adapter("business", "Business")
        seen: list[str] = []
        changed = asyncio.Event()

        @business.observation("Create")
        async def observe(action: ActionInstance, performer: str) -> None:
            seen.append(action["cid"])
            changed.set()

        async with business:
            await create_many(h, 1)
            await until(lambda: len(seen) == 1, changed)  # the live stream is following
            # Ten commits without yielding to the subscriber: it overflows its backlog.
            agent = h.server.agent("default", "platform")
            for i in range(1, 11):
                await h.server.attempt(
                    "default",
                    "SimpleUCP",
                    agent,
                    [ActionInstance(SIMPLE.action("Create"), {"cid": f"c{i}", **CREATE})],
                )
            await until(lambda: len(seen) == 11, changed, seconds=10)
            await business.drain()
        assert seen == [f"c{i}" for i in range(11)]
        assert any("interrupted" in r.getMessage() for r in caplog.records)  # it was cut off


async def test_two_adapters_of_one_process_see_the_same_order() -> None:
    async with Harness(
        "http", [SIMPLE], {"watcher": ["Platform", "Business"], "platform": ["Platform"]}
    ) as h:
        a: PeachAdapter = h.adapter("watcher", "Platform")
        b: PeachAdapter = h.adapter("watcher", "Business")
        orders: dict[str, list[int]] = {"a": [], "b": []}
        changed = asyncio.Event()
        for label, adapter in (("a", a), ("b", b)):

            def make(label: str, adapter: PeachAdapter) -> None:
                @adapter.observation()
                async def observe(action: ActionInstance, performer: str) -> None:
                    orders[label].append(int(action["cid"][1:]))
                    changed.set()

            make(label, adapter)
        async with a, b:
            await create_many(h, 6)
            await until(lambda: len(orders["a"]) == len(orders["b"]) == 6, changed)
        assert orders["a"] == orders["b"] == list(range(6))


async def test_a_stream_is_written_straight_to_its_socket() -> None:
    """Served by strabo's guard, the stream owns its connection: the documented
    head (the body ends with the connection), a batch as it is committed, input
    after the request ignored, and the client's end of input ends the stream
    (and frees the agent's place)."""
    async with Harness("http", [SIMPLE], AGENTS) as h:
        assert h.url is not None
        host, port = h.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"GET /mas/default/protocols/SimpleUCP/events HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer business-token\r\n\r\nGET /health HTTP/1.1\r\n\r\n"
        )
        head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
        assert head.startswith("http/1.1 200 ok\r\n")
        assert "content-type: text/event-stream" in head and "connection: close" in head
        assert await reader.readuntil(b"\n\n") == b": connected\n\n"
        await create_many(h, 1)
        frame = (await reader.readuntil(b"\n\n")).decode()
        assert frame.startswith("id: 1\nevent: batch\ndata: ") and '"cid":"c0"' in frame
        async with h.client("business") as client:  # counted while it is open
            listed = (await client.get("/mas/default/agents")).json()
        assert any(a.get("streams") for a in listed["agents"] if a["name"] == "business")
        writer.write_eof()
        assert await reader.read() == b""  # closed, nothing more (the GET /health unanswered)
        writer.close()
