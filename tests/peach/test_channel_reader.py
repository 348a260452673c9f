"""The SyncExecutor's reader of a channel: an attempt's answer carries its batch
(the server leaves it out of the stream), and the reader applies it in its
place, before the batches that follow it on the wire."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from langshaw import ActionInstance
from peach import PeachAdapter, SyncExecutor
from peach._channel import Line
from peach.http import _finalized
from tests.hostile._support import SIMPLE, create


class Wire:
    """A connection that records what the line sends, and says when."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.sending = asyncio.Event()

    async def send(self, data: bytes) -> None:
        self.sent.append(data)
        self.sending.set()

    def usable(self) -> bool:
        return True


def attempting(
    build: Any = None,
) -> tuple[SyncExecutor, PeachAdapter, Wire, Line, ActionInstance, asyncio.Task[Any]]:
    """An executor's line with one attempt (id ``a1``, a Create of ``c1``) on the
    wire; ``build`` makes its batch (by default, as the executor does)."""
    executor = SyncExecutor("http://127.0.0.1:9", "p1-token")
    adapter = PeachAdapter("p1", SIMPLE, "Platform", executor)
    wire = Wire()
    line = Line(wire)  # type: ignore[arg-type]
    mine = ActionInstance(SIMPLE.action("Create"), create("c1")["bindings"])
    if build is None:
        build = lambda data: _finalized(adapter, [mine], data)  # noqa: E731
    attempt = asyncio.create_task(line.attempt({"instances": [], "attempt_id": "a1"}, build))
    return executor, adapter, wire, line, mine, attempt


def frame(event: str, data: dict[str, Any], ident: int | None = None) -> bytes:
    head = b"" if ident is None else b"id: %d\n" % ident
    return head + f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def test_an_answered_batch_is_given_before_the_next_one_in_the_same_chunk() -> None:
    executor, adapter, wire, line, mine, attempt = attempting()
    other = {"action": "Create", "bindings": create("c2")["bindings"], "performer": "p2"}

    async def chunks() -> AsyncIterator[bytes]:
        await wire.sending.wait()  # the attempt is on the wire: its answer may come
        answer = {"id": "a1", "status": 200, "seq": 1, "attempt": [0], "others": []}
        yield frame("answer", answer) + frame(
            "batch", {"seq": 2, "protocol": "SimpleUCP", "instances": [other]}, 2
        )

    given = [batch async for batch in executor._batches(adapter, chunks(), line)]
    assert [b.seq for b in given] == [1, 2]
    assert given[0].entries[0].instance is mine and given[0].entries[0].performer == "p1"
    data, batch = await attempt
    assert data["seq"] == 1 and batch is given[0]


async def test_a_refused_or_unknown_answer_gives_no_batch() -> None:
    executor, adapter, wire, line, _, attempt = attempting(lambda data: 1 / 0)

    async def chunks() -> AsyncIterator[bytes]:
        await wire.sending.wait()
        yield frame("answer", {"id": "zz", "status": 200, "seq": 5, "attempt": [0]})
        yield frame("answer", {"id": "a1", "status": 422, "error": {"rule": "missing"}})

    assert [batch async for batch in executor._batches(adapter, chunks(), line)] == []
    data, batch = await attempt
    assert data["status"] == 422 and batch is None


async def test_a_malformed_answer_fails_its_attempt_and_the_reader_goes_on() -> None:
    executor, adapter, wire, line, _, attempt = attempting()

    async def chunks() -> AsyncIterator[bytes]:
        await wire.sending.wait()
        yield frame("answer", {"id": "a1", "status": 200, "seq": 1, "attempt": [0, 1]})

    assert [batch async for batch in executor._batches(adapter, chunks(), line)] == []
    try:
        await attempt
    except (KeyError, ValueError) as exc:
        assert exc is not None
    else:
        raise AssertionError("a malformed answer finalized the attempt")
