"""Promises of docs/proxy.md that no other test held: each test here quotes the
sentence it keeps true, and fails if the promise breaks.

The service is a real HTTP server on a loopback port; the SyncServer runs in
process."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx
import pytest

from strabo import serve
from tests.proxy.test_policy import MAS, SIMPLE, create

# docs/proxy.md, "Failure policy": "`retry_budget` | no try starts later than
# this many seconds after the first" and "So a failure is known within
# `retry_budget` plus one `timeout`."

BUDGET = 0.5
TIMEOUT = 0.3


class Silent:
    """A service that reads each request and never answers it (until stopped)."""

    def __init__(self) -> None:
        self.started: list[float] = []
        self.never = asyncio.Event()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        self.started.append(time.monotonic())
        await self.never.wait()


async def test_a_silent_service_fails_within_the_budget_plus_one_timeout() -> None:
    service = Silent()
    async with serve(service, lifespan="off") as url:
        # Without the budget, 100 retries of 0.3 s each would take half a minute.
        mas = MAS(SIMPLE, url, retries=100, backoff=0.05, max_delay=0.05,
                  retry_budget=BUDGET, timeout=TIMEOUT)
        mas.proxy.route("Create->>Created", "POST-/c", failure="Failed")
        async with mas.server, mas.proxy, mas.platform:
            began = time.monotonic()
            await create(mas)
            failed = await mas.wait_for("Failed")
            known = time.monotonic() - began
        service.never.set()
    first, *_, last = service.started
    assert len(service.started) >= 2  # it did retry
    assert last - first <= BUDGET  # no try started past the budget
    assert failed["reason"]["code"] == "unreachable"
    # The last try may start just inside the budget and wait out its timeout;
    # the rest is slack for a loaded machine, far below a 101st try.
    assert known < BUDGET + TIMEOUT + 1.0, known


class Trickling:
    """A service that answers 503 with a body it sends one byte at a time, one
    every 0.1 s (5 s in all): each read gets something well within a timeout
    of 0.3 s, the whole answer does not. ``done`` ends it early (the test has
    what it measures: the server need not trickle on to its stop)."""

    def __init__(self) -> None:
        self.done = asyncio.Event()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-length", b"50")]})
        for _ in range(50):
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
            with contextlib.suppress(TimeoutError):  # the service's pace: 0.1 s a byte
                await asyncio.wait_for(self.done.wait(), 0.1)
            if self.done.is_set():
                return
        await send({"type": "http.response.body", "body": b""})


@pytest.mark.parametrize(
    "client",
    [
        "lean",
        "httpx",
    ],
)
async def test_a_trickled_answer_is_cut_at_the_timeout(client: str) -> None:
    """docs/proxy.md: "So a failure is known within `retry_budget` plus one
    `timeout`", whichever client carries the requests (docs/proxy.md names both)."""
    transport = httpx.AsyncHTTPTransport() if client == "httpx" else None
    service = Trickling()
    async with serve(service, lifespan="off") as url:
        mas = MAS(SIMPLE, url, retries=0, retry_budget=BUDGET, timeout=TIMEOUT,
                  transport=transport)
        mas.proxy.route("Create->>Created", "POST-/c", failure="Failed")
        async with mas.server, mas.proxy, mas.platform:
            began = time.monotonic()
            await create(mas)
            await mas.wait_for("Failed")
            known = time.monotonic() - began
        service.done.set()
    assert known < BUDGET + TIMEOUT + 1.0, known


async def test_a_burst_of_requests_each_fails_within_the_budget_plus_one_timeout() -> None:
    """docs/proxy.md: "So a failure is known within `retry_budget` plus one
    `timeout`", for each trigger, however many arrive at once."""
    service = Silent()
    async with serve(service, lifespan="off") as url:
        # 600 at once, 100 at a time: were the wait for a place not under the
        # timeout, the last would fail after six timeouts, 6 s.
        mas = MAS(SIMPLE, url, retries=0, retry_budget=0.1, timeout=1.0)
        mas.proxy.route("Create->>Created", "POST-/c", failure="Failed")
        async with mas.server, mas.proxy, mas.platform:
            began = time.monotonic()
            await asyncio.gather(*(create(mas) for _ in range(600)))
            await mas.wait_for("Failed", 600)
            known = time.monotonic() - began
        service.never.set()
    # The rest is slack for a loaded machine (600 Creates and Faileds to carry).
    assert known < 0.1 + 1.0 + 2.5, known
