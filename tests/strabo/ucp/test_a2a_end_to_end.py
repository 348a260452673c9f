"""The Business proxies over A2A (``transport="a2a"``) against the bundled
merchant, which serves checkout over A2A at ``/ucp/a2a`` in both versions.

The routes are the REST ones; only the sending changes. So a checkout must end
as it does over REST, the merchant must have been sent A2A messages and no REST
checkout request (its recorder counts requests by path: the messages reach its
REST side in process, past the recorder), each naming the UCP extension of the
version the proxy speaks; a failed create must be the protocol's ``Failed`` with
the same reason as over REST; and ``strabo demo --transport a2a`` must complete
with each protocol and executor, its trace naming the A2A actions.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from peach import LocalExecutor
from strabo.demo import demo
from strabo.ucp import versions
from strabo.ucp.a2a_transport import EXTENSIONS
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.incremental_platform import incremental_platform
from strabo.ucp.incremental_proxy import incremental_proxy
from strabo.ucp.platform_agent import platform_agent
from syncserver import SyncServer
from tests.conftest import load

from .test_version_merchant import ROLES, Shop, history, paths, shop

A2A = "/ucp/a2a"


def assert_over_a2a(s: Shop, proxy: Any, version: str) -> None:
    seen = paths(s)
    assert "checkout" not in seen, seen  # no REST checkout request
    messages = [(h, body) for method, path, h, body in s.sent if path == A2A]
    assert proxy._mcp is not None and len(messages) == proxy._mcp.calls >= 2, seen
    for headers, body in messages:
        assert body["method"] == "message/send", body
        assert headers["x-a2a-extensions"] == EXTENSIONS[version], headers
        assert "profile=" in headers["ucp-agent"], headers
        assert body["params"]["message"]["messageId"], body
    contexts = {body["params"]["message"]["contextId"] for _, body in messages}
    assert len(contexts) == 1, contexts  # one checkout, one context


async def simple(s: Shop, transport: str, version: str | None = None) -> tuple[list[Any], Any]:
    executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
    proxy = business_proxy(executor, s.url, transport=transport, ucp_version=version)
    platform, done = platform_agent(executor)
    async with proxy, platform:
        await asyncio.wait_for(done.wait(), 20)
        await platform.drain()
    return history(platform), proxy


async def test_simple_ucp_completes_a_checkout_over_a2a() -> None:
    async with shop() as s:
        seen, proxy = await simple(s, "a2a")
        assert [i.name for i in seen] == ["Create", "Created", "Complete", "Completed"]
        [order] = s.merchant.orders()
        assert seen[-1]["order"]["id"] == order.id
        assert proxy.ucp_version == versions.NEW
        assert_over_a2a(s, proxy, versions.NEW)


async def test_incremental_ucp_completes_a_checkout_over_a2a_in_2026_01_11() -> None:
    async with shop() as s:  # a 2026-04-08 merchant, a proxy told to speak 2026-01-11
        executor = LocalExecutor(SyncServer.embedded([load("incremental-ucp.lsh")], ROLES))
        proxy = incremental_proxy(executor, s.url, transport="a2a", ucp_version=versions.OLD)
        platform, done = incremental_platform(executor)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 20)
            await platform.drain()
        assert [i.name for i in history(platform)] == [
            "Create", "Created", "ApplyDiscounts", "DiscountsApplied",
            *["SetFulfillment", "FulfillmentSet"] * 3, "Complete", "Completed"]
        [session] = s.merchant.checkouts()
        assert session.status == "completed" and session.discounts.codes == ["10OFF"]
        assert_over_a2a(s, proxy, versions.OLD)
        assert proxy._mcp.calls >= 6


async def test_a_failed_create_is_failed_over_a2a_as_over_rest() -> None:
    reasons = {}
    for transport in ("rest", "a2a"):
        async with shop() as s:
            s.merchant.set_stock("bouquet_roses", 0)
            seen, proxy = await simple(s, transport)
            assert [i.name for i in seen] == ["Create", "Failed"], transport
            reasons[transport] = seen[-1]["reason"]
            assert s.merchant.orders() == [] and not proxy.escalations
            if transport == "a2a":
                assert "checkout" not in paths(s) and proxy._mcp.calls == 1
            else:
                assert A2A not in paths(s) and proxy._mcp is None
    assert reasons["a2a"] == reasons["rest"]
    assert reasons["a2a"]["code"] == "out_of_stock", reasons


@pytest.mark.parametrize(("protocol", "executor", "version"), [
    ("atomic", "syncserver", versions.NEW), ("atomic", "peer", versions.OLD),
    ("incremental", "syncserver", versions.OLD), ("incremental", "peer", versions.NEW)])
async def test_the_demo_over_a2a(protocol: str, executor: str, version: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    status = await demo(protocol, None, None, 30, executor=executor, ucp_version=version,
                        transport="a2a")
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "checkout over A2A" in out and "Summary" in out, out
    assert "A2A  create_checkout" in out and "A2A  complete_checkout " in out, out
    assert "HTTP POST  /checkout-sessions" not in out, out  # the trace says A2A
    assert "HTTP GET   /.well-known/ucp" in out, out  # discovery stays on REST
