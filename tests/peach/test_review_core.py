"""Review of the session's core changes (6236d54..): each test here failed
before the fix it pins."""

from __future__ import annotations

import asyncio
import math

import pytest

from langshaw import ActionInstance
from peach.errors import ExecutorError
from peach.http import SyncExecutor
from tests.harness import Harness
from tests.peach.test_adapter import AGENTS, CREATE, SIMPLE


async def test_a_value_json_cannot_carry_is_bad_json_on_a_channel_too() -> None:
    """A SyncExecutor sends its attempts on the protocol's channel once its
    stream is open (the usual case against strabo's server): there the body is
    encoded by the channel, whose ValueError came out of ``attempt()`` raw,
    where docs/peach.md promises ``ExecutorError`` with ``code == "bad-json"``
    (as over a plain POST)."""
    async with Harness("http", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            executor = h.executor("platform")
            assert isinstance(executor, SyncExecutor)
            await asyncio.wait_for(executor._feeds[SIMPLE.name].connected.wait(), 10)
            assert SIMPLE.name in executor._lines, "the channel is open"
            for value in (math.nan, math.inf):
                forged = ActionInstance(
                    SIMPLE.action("Create"), {**CREATE, "cid": "c1", "line_items": [value]}
                )
                with pytest.raises(ExecutorError) as caught:
                    await platform.attempt([forged])
                assert caught.value.code == "bad-json", caught.value
                assert caught.value.status == 400
                assert "instances[0].bindings.line_items[0] is " in str(caught.value)
            assert platform.enactments() == []
