"""Whole checkouts through strabo's proxies against the bundled merchant serving
UCP 2026-04-08.

test_version_proxy.py plays a 2026-04-08 merchant from its traces; here the
merchant is the bundled one, ``create_app(ucp_version="2026-04-08")``, which
computes its answers in 2026-01-11 and translates at its edge. So each request
crosses both translations: the proxy's out to 2026-04-08, the merchant's back to
2026-01-11; each answer the other way round. Each checkout must end as it does
against the 2026-01-11 merchant, with the proxy having negotiated 2026-04-08,
and every request on the wire must have been a 2026-04-08 one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from langshaw import ActionInstance
from peach import LocalExecutor
from strabo import serve
from strabo.merchant import create_app, merchant_of
from strabo.merchant.merchant import Merchant
from strabo.ucp import versions
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.incremental_platform import incremental_platform
from strabo.ucp.incremental_proxy import incremental_proxy
from strabo.ucp.platform_agent import platform_agent
from strabo.ucp.resilient_platform import ResilientPlatform
from strabo.ucp.resilient_proxy import resilient_proxy
from syncserver import SyncServer
from tests.conftest import load

ROLES = {"platform": ["Platform"], "business": ["Business"]}


@dataclass
class Shop:
    """The bundled merchant serving 2026-04-08, and the requests it was sent."""

    url: str
    merchant: Merchant
    sent: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)

    async def testing(self, path: str, body: Any = None) -> httpx.Response:
        headers = {"Simulation-Secret": self.merchant.simulation_secret}
        async with httpx.AsyncClient(base_url=self.url) as client:
            return await client.post(f"/testing/{path}", json=body, headers=headers)

    def checkout_calls(self) -> list[tuple[str, str, dict[str, str], Any]]:
        return [call for call in self.sent if call[1].startswith(("/checkout-sessions",
                                                                   "/orders"))]


class Recorder:
    """An ASGI wrapper keeping each HTTP request's method, path, headers and
    body as the merchant received them (the proxy's listeners see no headers)."""

    def __init__(self, app: Any, sent: list[tuple[str, str, dict[str, str], Any]]) -> None:
        self.app, self.sent = app, sent

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def reading() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    raw = b"".join(chunks)
                    headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                    self.sent.append((scope["method"], scope["path"], headers,
                                      json.loads(raw) if raw else None))
            return message

        await self.app(scope, reading, send)


@asynccontextmanager
async def shop(version: str = versions.NEW) -> AsyncIterator[Shop]:
    """The bundled merchant serving ``version``, every request to it recorded."""
    app = create_app(ucp_version=version)
    sent: list[tuple[str, str, dict[str, str], Any]] = []
    async with serve(Recorder(app, sent)) as url:
        yield Shop(url, merchant_of(app), sent)


def paths(s: Shop) -> dict[str, int]:
    """How many requests went to each path (the checkout requests as one)."""
    counts: dict[str, int] = {}
    for _, path, _, _ in s.sent:
        key = "checkout" if path.startswith("/checkout-sessions") else path
        counts[key] = counts.get(key, 0) + 1
    return counts


def history(agent: Any) -> list[ActionInstance]:
    return [i for root in agent.enactments() for _, i, _ in agent.history(root)]


def assert_spoken_in_new(proxy: Any, s: Shop) -> None:
    """The proxy chose 2026-04-08 and the merchant was sent 2026-04-08 requests."""
    assert proxy.ucp_version == versions.NEW
    calls = s.checkout_calls()
    assert calls, "no checkout request was sent"
    for method, path, headers, body in calls:
        assert "request-signature" not in headers, (method, path)
        assert "version=" not in headers["ucp-agent"], (method, path)
        if isinstance(body, dict):
            assert "currency" not in body and "payment_data" not in body, (method, path, body)


async def test_simple_ucp_completes_a_checkout() -> None:
    async with shop() as s:
        executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
        proxy = business_proxy(executor, s.url)
        platform, done = platform_agent(executor)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 20)
            await platform.drain()
        seen = history(platform)
        assert [i.name for i in seen] == ["Create", "Created", "Complete", "Completed"]
        assert_spoken_in_new(proxy, s)
        [order] = s.merchant.orders()
        completed = seen[-1]
        assert completed["order"]["id"] == order.id
        assert completed["order"]["permalink_url"].startswith(s.url)
        # 2026-01-11 shapes came back: handlers under payment, totals unsigned.
        created = seen[1]
        assert created["id"] == order.checkout_id
        assert {h["id"] for h in created["payment"]["handlers"]} >= {"mock_payment_handler"}
        assert all(t["amount"] >= 0 for t in created["totals"])


async def test_incremental_ucp_completes_a_checkout_with_discount_and_shipping() -> None:
    async with shop() as s:
        executor = LocalExecutor(SyncServer.embedded([load("incremental-ucp.lsh")], ROLES))
        proxy = incremental_proxy(executor, s.url)
        platform, done = incremental_platform(executor)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 20)
            await platform.drain()
        assert [i.name for i in history(platform)] == [
            "Create", "Created", "ApplyDiscounts", "DiscountsApplied",
            *["SetFulfillment", "FulfillmentSet"] * 3, "Complete", "Completed"]
        assert_spoken_in_new(proxy, s)
        [session] = s.merchant.checkouts()
        assert session.status == "completed"
        assert session.discounts.codes == ["10OFF"]
        totals = {t.type: t.amount for t in session.totals}
        assert totals["discount"] > 0 and totals["total"] < totals["subtotal"]
        [order] = s.merchant.orders()
        assert order.checkout_id == session.id
        # The discount reached the Platform positive again, as 2026-01-11 has it.
        applied = next(i for i in history(platform) if i.name == "DiscountsApplied")
        [discount] = applied["discounts_applied"]
        assert discount["code"] == "10OFF" and discount["amount"] == totals["discount"]


async def resilient_checkout(s: Shop, **platform: Any) -> tuple[ResilientPlatform, Any]:
    executor = LocalExecutor(SyncServer.embedded([load("resilient-ucp.lsh")], ROLES))
    proxy = resilient_proxy(executor, s.url)
    proxy.backoff = 0.01
    agent = ResilientPlatform(executor, **platform)
    async with proxy, agent:
        await asyncio.wait_for(agent.done.wait(), 20)
        await agent.drain()
    return agent, proxy


async def test_resilient_ucp_completes_a_checkout() -> None:
    async with shop() as s:
        agent, proxy = await resilient_checkout(s)
        assert [i.name for i in history(agent)] == ["Create", "Created", "Complete", "Completed"]
        assert agent.outcome is not None and agent.outcome.name == "Completed"
        [order] = s.merchant.orders()
        assert agent.outcome["order"]["id"] == order.id and not proxy.escalations
        assert_spoken_in_new(proxy, s)


async def test_resilient_ucp_a_declined_payment_is_declined() -> None:
    async with shop() as s:

        async def decline(latest: ActionInstance) -> bool:
            checkout = s.merchant.checkouts()[-1].id
            answer = await s.testing(f"checkout-sessions/{checkout}/decline")
            assert answer.status_code == 200, answer.text
            return True

        agent, proxy = await resilient_checkout(s, confirm=decline)
        assert [i.name for i in history(agent)][-2:] == ["Complete", "Declined"]
        assert agent.outcome is not None
        [message] = agent.outcome["messages"]
        assert message["type"] == "error" and message["severity"] == "recoverable"
        assert "insufficient_funds" in json.dumps(message).lower()
        assert s.merchant.orders() == []
        assert s.merchant.checkouts()[-1].status == "ready_for_complete"  # left open
        assert_spoken_in_new(proxy, s)
