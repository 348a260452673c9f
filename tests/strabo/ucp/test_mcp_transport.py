"""The Business proxies over MCP (``transport="mcp"``) against the bundled
merchant serving UCP 2026-04-08, which serves checkout at ``/ucp/mcp``.

The routes are the REST ones; only the sending changes. So a checkout must end
as it does over REST, the merchant must have been sent MCP calls and no REST
checkout request (its recorder counts requests by path: the tool calls reach
its REST side in process, past the recorder), and a failed create must be the
protocol's ``Failed`` with the same reason as over REST.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from peach import LocalExecutor
from strabo.ucp import versions
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.incremental_platform import incremental_platform
from strabo.ucp.incremental_proxy import incremental_proxy
from strabo.ucp.mcp_transport import McpCheckout, answer_of_error, arguments_of, tool_of
from strabo.ucp.platform_agent import platform_agent
from syncserver import SyncServer
from tests.conftest import load

from .test_version_merchant import ROLES, Shop, history, paths, shop

ROOT = Path(__file__).resolve().parents[3]


def assert_over_mcp(s: Shop, proxy: Any, calls: int) -> None:
    seen = paths(s)
    assert "checkout" not in seen, seen  # no REST checkout request
    assert seen.get("/ucp/mcp", 0) >= calls, seen
    assert proxy._mcp is not None and proxy._mcp.calls == calls


async def simple(s: Shop, transport: str, mcp_client: str = "auto") -> tuple[list[Any], Any]:
    executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
    proxy = business_proxy(executor, s.url, transport=transport)
    proxy.mcp_client = mcp_client
    platform, done = platform_agent(executor)
    async with proxy, platform:
        await asyncio.wait_for(done.wait(), 20)
        await platform.drain()
        mcp = proxy._mcp
        if isinstance(mcp, McpCheckout):  # which client carried the calls, before closing
            proxy.mcp_held = (mcp._lean is not None, mcp._session is not None)
    return history(platform), proxy


@pytest.mark.parametrize("mcp_client", ["auto", "sdk"])
async def test_simple_ucp_completes_a_checkout_over_mcp(mcp_client: str) -> None:
    async with shop() as s:
        seen, proxy = await simple(s, "mcp", mcp_client)
        # the lean client (the merchant speaks MCP's stateless revision), or the SDK's
        assert proxy.mcp_held == ((True, False) if mcp_client == "auto" else (False, True))
        assert [i.name for i in seen] == ["Create", "Created", "Complete", "Completed"]
        [order] = s.merchant.orders()
        assert seen[-1]["order"]["id"] == order.id
        assert proxy.ucp_version == versions.NEW
        # create, then one update per shipping step, then complete
        assert_over_mcp(s, proxy, calls=proxy._mcp.calls)
        assert proxy._mcp.calls >= 2


async def test_incremental_ucp_completes_a_checkout_over_mcp() -> None:
    async with shop() as s:
        executor = LocalExecutor(SyncServer.embedded([load("incremental-ucp.lsh")], ROLES))
        proxy = incremental_proxy(executor, s.url, transport="mcp")
        platform, done = incremental_platform(executor)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 20)
            await platform.drain()
        assert [i.name for i in history(platform)] == [
            "Create", "Created", "ApplyDiscounts", "DiscountsApplied",
            *["SetFulfillment", "FulfillmentSet"] * 3, "Complete", "Completed"]
        [session] = s.merchant.checkouts()
        assert session.status == "completed" and session.discounts.codes == ["10OFF"]
        assert_over_mcp(s, proxy, calls=proxy._mcp.calls)
        assert proxy._mcp.calls >= 6


async def test_a_failed_create_is_failed_over_mcp_as_over_rest() -> None:
    reasons = {}
    for transport in ("rest", "mcp"):
        async with shop() as s:
            s.merchant.set_stock("bouquet_roses", 0)
            seen, proxy = await simple(s, transport)
            assert [i.name for i in seen] == ["Create", "Failed"], transport
            reasons[transport] = seen[-1]["reason"]
            assert s.merchant.orders() == [] and not proxy.escalations
            if transport == "mcp":
                assert "checkout" not in paths(s) and proxy._mcp.calls == 1
            else:
                assert "/ucp/mcp" not in paths(s) and proxy._mcp is None
    assert reasons["mcp"] == reasons["rest"]
    assert reasons["mcp"]["code"] == "out_of_stock", reasons


async def test_a_merchant_without_mcp_fails_the_create_with_the_reason() -> None:
    async with shop(versions.OLD) as s:  # 2026-01-11: no MCP endpoint
        seen, _ = await simple(s, "mcp")
        assert [i.name for i in seen] == ["Create", "Failed"]
        assert "MCP" in seen[-1]["reason"]["message"]
        assert "checkout" not in paths(s)


def test_requests_map_to_tools_and_errors_to_statuses() -> None:
    assert tool_of("POST", "/checkout-sessions") == ("create_checkout", None)
    assert tool_of("GET", "/checkout-sessions/c1") == ("get_checkout", "c1")
    assert tool_of("PUT", "/checkout-sessions/c1") == ("update_checkout", "c1")
    assert tool_of("POST", "/checkout-sessions/c1/complete") == ("complete_checkout", "c1")
    assert tool_of("POST", "/checkout-sessions/c1/cancel") == ("cancel_checkout", "c1")
    assert tool_of("GET", "/orders/o1") is None
    headers = {"UCP-Agent": 'profile="http://p/x.json"', "Idempotency-Key": "k1"}
    assert arguments_of("update_checkout", "c1", {"id": "c1", "buyer": {}}, headers) == {
        "meta": {"ucp-agent": {"profile": "http://p/x.json"}, "idempotency-key": "k1"},
        "id": "c1", "checkout": {"buyer": {}}}
    assert "checkout" not in arguments_of("cancel_checkout", "c1", None, headers)
    conflict = answer_of_error(-32000, "reused", {"status": 409, "code": "idempotency_conflict",
                                                  "retry_after": 2})
    assert (conflict.status_code, conflict.json()["code"]) == (409, "idempotency_conflict")
    assert conflict.headers["retry-after"] == "2"
    assert answer_of_error(-32602, "bad", None).status_code == 400
    assert answer_of_error(-32001, "no", {"code": "profile_unreachable"}).status_code == 424
    assert answer_of_error(-32603, "boom", None).status_code == 500


def test_the_demo_command_over_mcp() -> None:
    command = [sys.executable, "-m", "strabo.cli", "demo", "--transport", "mcp"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MCP" in result.stdout, result.stdout
