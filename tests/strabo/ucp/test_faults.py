"""A merchant that completes an order and loses the answer: the proxy retries under
the same idempotency key (even after a restart) and exactly one order exists."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import LocalExecutor
from strabo import serve
from strabo.merchant import create_app, merchant_of
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.platform_agent import platform_agent
from syncserver import SyncServer
from tests.conftest import load
from tests.harness import until

ASGI = Callable[..., Awaitable[None]]


class LosesFirstAnswer:
    """Processes the first ``/complete`` request fully, then loses its answer:
    either nothing comes back (the client's timeout ends it) or a 500 does."""

    def __init__(self, app: ASGI, how: str) -> None:
        self.app = app
        self.how = how
        self.lost = 0
        self.processed = asyncio.Event()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/complete") or self.lost:
            await self.app(scope, receive, send)
            return
        self.lost += 1

        async def swallow(message: dict) -> None:
            pass  # the merchant's answer never leaves

        await self.app(scope, receive, swallow)
        self.processed.set()
        if self.how == "500":
            await send({"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": b"Internal Server Error"})
            return
        while (await receive())["type"] != "http.disconnect":
            pass  # silent until the client gives up


@pytest.mark.parametrize("how", ["silence", "500"])
async def test_a_lost_answer_is_retried_and_one_order_exists(how: str) -> None:
    merchant = create_app()
    faulty = LosesFirstAnswer(merchant, how)
    server = SyncServer.embedded(
        [load("atomic-ucp.lsh")], {"platform": ["Platform"], "business": ["Business"]}
    )
    executor = LocalExecutor(server)
    async with serve(faulty) as url:
        proxy = business_proxy(executor, url)
        proxy.timeout = 0.5 if how == "silence" else 10.0
        proxy.backoff = 0.01
        platform, done = platform_agent(executor)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 20)
            history = [i for r in platform.enactments() for _, i, _ in platform.history(r)]
    orders = merchant_of(merchant).orders()
    assert faulty.lost == 1 and len(orders) == 1
    completed = next(i for i in history if i.name == "Completed")
    assert completed["order"]["id"] == orders[0].id


async def test_a_restarted_proxy_finishes_the_job_without_a_second_order() -> None:
    merchant = create_app()
    faulty = LosesFirstAnswer(merchant, "silence")
    server = SyncServer.embedded(
        [load("atomic-ucp.lsh")], {"platform": ["Platform"], "business": ["Business"]}
    )
    executor = LocalExecutor(server)
    async with serve(faulty) as url:
        first = business_proxy(executor, url)
        first.timeout = 60.0  # it would wait a long time: it is stopped before that
        platform, _ = platform_agent(executor)
        seen: list[str] = []
        changed = asyncio.Event()

        @platform.observation()
        async def observe(action: ActionInstance, performer: str) -> None:
            seen.append(action.name)
            changed.set()

        async with platform:
            await first.start()
            await asyncio.wait_for(faulty.processed.wait(), 20)  # the order exists now
            await first.stop(grace=0)  # the proxy dies waiting for the answer
            assert "Completed" not in seen
            second = business_proxy(executor, url)  # a new process would do the same
            async with second:  # resumes Complete, whose answer is still due
                await until(lambda: "Completed" in seen, changed, seconds=20)
    assert len(merchant_of(merchant).orders()) == 1
