"""Whole UCP checkouts over real HTTP: SyncServer, bundled merchant, proxy, platform;
and the same peer to peer, with no SyncServer."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import Executor, SyncExecutor
from peach.peer import Directory, PeerExecutor
from strabo import demo, serve
from strabo.merchant import create_app, merchant_of
from strabo.proxy import ProxyError, Route
from strabo.serving import free_port
from strabo.ucp import platform_agent as platform_module
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.platform_agent import platform_agent
from syncserver import SyncServer
from syncserver import create_app as syncserver_app
from tests.conftest import ROOT, load

# How the demo runs: on a SyncServer with either policy, or peer to peer.
EXECUTORS = [("syncserver", "instant"), ("syncserver", "batched"), ("peer", None)]


@pytest.fixture
def no_syncserver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any SyncServer or SyncExecutor made from now on fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("peer to peer, yet a SyncServer or SyncExecutor was made")

    monkeypatch.setattr(SyncServer, "__init__", refuse)
    monkeypatch.setattr(SyncExecutor, "__init__", refuse)


@pytest.mark.parametrize(("executor", "policy"), EXECUTORS)
@pytest.mark.parametrize("protocol", ["atomic", "incremental"])
async def test_the_demo_completes_a_checkout(
    protocol: str,
    executor: str,
    policy: str | None,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    if executor == "peer":
        request.getfixturevalue("no_syncserver")
    code = await demo.demo(protocol, policy, None, 30.0, executor=executor)
    out = capsys.readouterr().out
    assert code == 0, out
    header = out.split("\n\n")[0]
    if executor == "peer":
        assert header.splitlines()[0].endswith(", peer to peer")
        assert "SyncServer  http" not in out and "finalization" not in header
        assert re.search(r"platform +http://127\.0\.0\.1:\d+ \(peer to peer, no SyncServer", header)
        assert re.search(r"business +http://127\.0\.0\.1:\d+ \(peer to peer, no SyncServer", header)
    else:
        assert header.splitlines()[0].endswith(f", {policy} finalization")
        assert re.search(r"SyncServer  http://127\.0\.0\.1:\d+", header)
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
            # Shipping chosen from what the merchant offers, a step at a time:
            # the method, then a destination, then an option.
            *["SetFulfillment", "FulfillmentSet"] * 3,
            "Complete",
            "Completed",
        ]
    calls = re.findall(r"HTTP (\w+)\s+(\S+)\s+(\d+)", out)
    # The proxy reads the merchant's profile first, for the UCP version to speak.
    assert calls[0] == ("GET", "/.well-known/ucp", "200")
    assert calls[1][:1] == ("POST",) and calls[1][2] == "201"
    assert calls[-1][0] == "POST" and calls[-1][1].endswith("/complete") and calls[-1][2] == "200"
    assert re.search(r"checkout  \S+ \(completed\)", out)
    assert re.search(r"order     [0-9a-f-]{36}", out)
    # 38.00 for the roses, 10% off, free standard shipping with roses.
    assert "subtotal 38.00, fulfillment 0.00, discount -3.80, total 34.20 USD" in out


def test_the_demo_command_peer_to_peer() -> None:
    """`strabo demo --executor peer`, the command itself; --policy makes no sense there."""
    command = [sys.executable, "-m", "strabo.cli", "demo", "--executor", "peer"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SimpleUCP, peer to peer" in result.stdout and "SyncServer  http" not in result.stdout
    assert re.search(r"checkout  \S+ \(completed\)", result.stdout)
    refused = subprocess.run(
        [*command, "--policy", "batched"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert "--executor peer runs no SyncServer" in refused.stderr


async def test_the_demo_refuses_a_policy_peer_to_peer() -> None:
    with pytest.raises(ValueError, match="policy"):
        await demo.demo("atomic", "batched", None, 5.0, executor="peer")
    with pytest.raises(ValueError, match="executor must be one of syncserver, peer"):
        await demo.demo("atomic", None, None, 5.0, executor="p2p")


@pytest.fixture(params=["syncserver", "peer"])
def executor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def shop(executor: str, payment: dict | None = None, items: list | None = None):
    """A checkout with the given payment and items, on a SyncServer or peer to peer;
    returns (history, proxy errors, orders)."""
    protocol = load("atomic-ucp.lsh")
    roles = {"platform": ["Platform"], "business": ["Business"]}
    merchant = create_app()
    errors: list[tuple[int | None, str]] = []
    old = platform_module.SAMPLE_PAYMENT_DATA, platform_module.SAMPLE_LINE_ITEMS
    if payment is not None:
        platform_module.SAMPLE_PAYMENT_DATA = payment
    if items is not None:
        platform_module.SAMPLE_LINE_ITEMS = items
    try:
        async with contextlib.AsyncExitStack() as stack:
            to: dict[str, Executor]
            if executor == "peer":
                directory = Directory.of(
                    [protocol],
                    {
                        n: {"roles": r, "token": f"{n}-t", "url": f"http://127.0.0.1:{free_port()}"}
                        for n, r in roles.items()
                    },
                )
                to = {n: PeerExecutor(n, directory) for n in roles}
            else:
                server = SyncServer.embedded([protocol], roles)
                sync_url = await stack.enter_async_context(serve(syncserver_app(server)))
                to = {n: SyncExecutor(sync_url, n) for n in roles}
            merchant_url = await stack.enter_async_context(serve(merchant))
            proxy = business_proxy(to["business"], merchant_url)
            platform, done = platform_agent(to["platform"])

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


async def test_a_declined_payment_is_reported_and_no_order_is_made(executor: str) -> None:
    declined = {
        **platform_module.SAMPLE_PAYMENT_DATA,
        "credential": {"type": "token", "token": "fail_token"},
    }
    history, errors, orders = await shop(executor, payment=declined)
    assert [i.name for i in history] == ["Create", "Created", "Complete"]
    assert errors and errors[0][0] == 402
    assert orders == []


async def test_an_unknown_item_fails_the_checkout_with_the_reason(executor: str) -> None:
    history, errors, orders = await shop(
        executor, items=[{"item": {"id": "pink_wumpus", "title": "W"}, "quantity": 1}]
    )
    assert [i.name for i in history] == ["Create", "Failed"]
    reason = history[-1]["reason"]
    assert reason["status"] == 400 and "pink_wumpus" in reason["message"]
    assert errors == [] and orders == []


@pytest.mark.skipif(
    not os.environ.get("UCP_MERCHANT_URL"),
    reason="set UCP_MERCHANT_URL to a running UCP merchant to run this test",
)
@pytest.mark.parametrize(("executor", "policy"), [("syncserver", "instant"), ("peer", None)])
@pytest.mark.parametrize("protocol", ["atomic", "incremental"])
async def test_the_demo_against_an_external_merchant(
    protocol: str, executor: str, policy: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    url = os.environ["UCP_MERCHANT_URL"]
    code = await demo.demo(protocol, policy, url, 60.0, executor=executor)
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"merchant    {url} (external)" in out
    assert ("peer to peer" in out) == (executor == "peer")
    assert re.search(r"checkout  \S+ \(completed\)", out)


@pytest.mark.parametrize("protocol", ["atomic", "incremental", "resilient"])
async def test_the_demo_speaks_2026_04_08_with_a_merchant_serving_it(
    protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await demo.demo(protocol, None, None, 30.0, ucp_version="2026-04-08")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "(bundled, UCP 2026-04-08)" in out
    calls = re.findall(r"HTTP (\w+)\s+(\S+)\s+(\d+)", out)
    assert calls[0] == ("GET", "/.well-known/ucp", "200")
    assert calls[-1][1].endswith("/complete") and calls[-1][2] == "200"


def test_the_demo_refuses_a_version_for_a_merchant_it_does_not_run() -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "strabo.cli", "demo", "--ucp-version", "2026-04-08",
         "--merchant", "http://127.0.0.1:9"], capture_output=True, text=True, timeout=60,
        cwd=ROOT)
    assert refused.returncode == 2 and "--ucp-version is the bundled merchant's" in refused.stderr
