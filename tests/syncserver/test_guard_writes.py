"""Behind strabo's guard a response leaves in one write to the socket (its head
and body joined): uvicorn writes them apart, and each write is a send, and on
a VM a wake-up of the reader. Counted on the real transport of a real server."""

from __future__ import annotations

import asyncio
from asyncio import selector_events
from typing import Any

import pytest

from tests.conftest import load
from tests.harness import Harness

SIMPLE = load("atomic-ucp.lsh")


async def test_a_response_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    original = selector_events._SelectorSocketTransport.write

    def counted(self: Any, data: Any) -> None:
        writes.append(bytes(data))
        original(self, data)

    monkeypatch.setattr(selector_events._SelectorSocketTransport, "write", counted)
    async with Harness("http", [SIMPLE], {"platform": ["Platform"]}) as h:
        assert h.url is not None
        host, port = h.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        body = (
            b'{"instances":[{"action":"Create","bindings":{"cid":"c1","line_items":[],'
            b'"currency":"USD","payment_pref":{}}}]}'
        )
        writes.clear()
        writer.write(
            b"POST /mas/default/protocols/SimpleUCP/attempts HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer platform-token\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        answer = await reader.readexactly(int(head.split(b"content-length: ")[1].split(b"\r\n")[0]))
        writer.close()
    responses = [w for w in writes if w.startswith(b"HTTP/1.1")]
    assert len(responses) == 1 and responses[0].endswith(answer), writes


async def test_other_agents_hear_of_a_batch_before_its_attempter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stream's frame is written during the commit, before the answer (and
    the answer takes no extra loop step for it: nothing was left queued)."""
    writes: list[bytes] = []
    original = selector_events._SelectorSocketTransport.write

    def counted(self: Any, data: Any) -> None:
        writes.append(bytes(data))
        original(self, data)

    monkeypatch.setattr(selector_events._SelectorSocketTransport, "write", counted)
    agents = {"platform": ["Platform"], "business": ["Business"]}
    async with Harness("http", [SIMPLE], agents) as h:
        assert h.url is not None
        host, port = h.url.removeprefix("http://").split(":")
        stream_reader, stream_writer = await asyncio.open_connection(host, int(port))
        stream_writer.write(
            b"GET /mas/default/protocols/SimpleUCP/events HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer business-token\r\n\r\n"
        )
        await stream_reader.readuntil(b": connected\n\n")
        async with h.client("platform") as client:
            writes.clear()
            answer = await client.post(
                "/mas/default/protocols/SimpleUCP/attempts",
                json={
                    "instances": [
                        {
                            "action": "Create",
                            "bindings": {
                                "cid": "c1", "line_items": [], "currency": "USD",
                                "payment_pref": {},
                            },
                        }
                    ]
                },
            )  # fmt: skip
        assert answer.status_code == 200
        frame = next(i for i, w in enumerate(writes) if w.startswith(b"id: 1\nevent: batch"))
        reply = next(i for i, w in enumerate(writes) if w.startswith(b"HTTP/1.1 200"))
        assert frame < reply, writes
        stream_writer.close()
