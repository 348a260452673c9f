"""Whole UCP checkouts over real HTTP: SyncServer, bundled merchant, proxy, platform."""

from __future__ import annotations

import asyncio
import os
import re

import pytest

from langshaw import ActionInstance
from peach import SyncExecutor
from strabo import demo, serve
from strabo.merchant import create_app, merchant_of
from strabo.proxy import ProxyError, Route
from strabo.ucp import platform_agent as platform_module
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.platform_agent import platform_agent
from syncserver import SyncServer
from syncserver import create_app as syncserver_app
from tests.conftest import load


@pytest.mark.parametrize("policy", ["instant", "batched"])
@pytest.mark.parametrize("protocol", ["atomic", "incremental"])
async def test_the_demo_completes_a_checkout(
    protocol: str, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await demo.demo(protocol, policy, None, 30.0)
    out = capsys.readouterr().out
    assert code == 0, out
    actions = re.findall(r"#\d+\s+(\w+)\s+by (\w+)", out)
    if protocol == "atomic":
        assert actions == [
            ("Create", "platform"),
            ("Created", "business"),
            ("Complete", "platform"),
            ("Completed", "business"),
        ]
    else:
        assert [a for a, _ in actions] == [
            "Create",
            "Created",
            "ApplyDiscounts",
            "DiscountsApplied",
            "SetFulfillment",
            "FulfillmentSet",
            "Complete",
            "Completed",
        ]
    calls = re.findall(r"HTTP (\w+)\s+(\S+)\s+(\d+)", out)
    assert calls[0][:1] == ("POST",) and calls[0][2] == "201"
    assert calls[-1][0] == "POST" and calls[-1][1].endswith("/complete") and calls[-1][2] == "200"
    assert re.search(r"checkout  \S+ \(completed\)", out)
    assert re.search(r"order     [0-9a-f-]{36}", out)
    # 38.00 for the roses, 10% off, free standard shipping with roses.
    assert "subtotal 38.00, fulfillment 0.00, discount -3.80, total 34.20 USD" in out


async def shop(payment: dict | None = None, items: list | None = None):
    """A checkout with the given payment and items; returns (history, proxy errors, orders)."""
    server = SyncServer.embedded(
        [load("atomic-ucp.lsh")], {"platform": ["Platform"], "business": ["Business"]}
    )
    merchant = create_app()
    errors: list[tuple[int | None, str]] = []
    old = platform_module.SAMPLE_PAYMENT_DATA, platform_module.SAMPLE_LINE_ITEMS
    if payment is not None:
        platform_module.SAMPLE_PAYMENT_DATA = payment
    if items is not None:
        platform_module.SAMPLE_LINE_ITEMS = items
    try:
        async with serve(syncserver_app(server)) as sync_url, serve(merchant) as merchant_url:
            proxy = business_proxy(SyncExecutor(sync_url, "business"), merchant_url)
            platform, done = platform_agent(SyncExecutor(sync_url, "platform"))

            @proxy.on_error
            async def heard(
                error: ProxyError, route: Route, trigger: ActionInstance | None
            ) -> None:
                errors.append((getattr(error, "status", None), error.message))
                done.set()

            async with proxy, platform:
                await asyncio.wait_for(done.wait(), 20)
                await proxy.drain()
                history = [i for r in platform.enactments() for _, i, _ in platform.history(r)]
    finally:
        platform_module.SAMPLE_PAYMENT_DATA, platform_module.SAMPLE_LINE_ITEMS = old
    return history, errors, merchant_of(merchant).orders()


async def test_a_declined_payment_is_reported_and_no_order_is_made() -> None:
    declined = {
        **platform_module.SAMPLE_PAYMENT_DATA,
        "credential": {"type": "token", "token": "fail_token"},
    }
    history, errors, orders = await shop(payment=declined)
    assert [i.name for i in history] == ["Create", "Created", "Complete"]
    assert errors and errors[0][0] == 402
    assert orders == []


async def test_an_unknown_item_fails_the_checkout_with_the_reason() -> None:
    history, errors, orders = await shop(
        items=[{"item": {"id": "pink_wumpus", "title": "W"}, "quantity": 1}]
    )
    assert [i.name for i in history] == ["Create", "Failed"]
    reason = history[-1]["reason"]
    assert reason["status"] == 400 and "pink_wumpus" in reason["message"]
    assert errors == [] and orders == []


@pytest.mark.skipif(
    not os.environ.get("UCP_MERCHANT_URL"),
    reason="set UCP_MERCHANT_URL to a running UCP merchant to run this test",
)
@pytest.mark.parametrize("protocol", ["atomic", "incremental"])
async def test_the_demo_against_an_external_merchant(
    protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await demo.demo(protocol, "instant", os.environ["UCP_MERCHANT_URL"], 60.0)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "(completed)" in out
