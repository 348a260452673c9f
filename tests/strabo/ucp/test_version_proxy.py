"""The Business proxy negotiates the UCP version and speaks it on the wire.

A merchant that speaks 2026-04-08 is played from its traces (written from the
spec: tests/fixtures/ucp/merchant-2026-04-08-traces.md) by a small Starlette
app on a loopback port that answers each operation with the traced answer and
keeps what it was sent. The SimpleUCP Platform and Business proxy run a whole
checkout against it: the proxy reads the profile, picks 2026-04-08, sends
2026-04-08 requests and headers, and turns the answers back into the
2026-01-11 shapes the protocol's types check. Against the bundled merchant
(2026-01-11) nothing changes, and a merchant with no version in common makes
Create fail with the reason.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from peach import LocalExecutor
from strabo import serve
from strabo.merchant import create_app
from strabo.ucp import versions
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.platform_agent import platform_agent
from syncserver import SyncServer
from tests.conftest import load
from tests.strabo.merchant.traces import RECORDED_BASE, load_trace

ROLES = {"platform": ["Platform"], "business": ["Business"]}
TRACES = load_trace(f"merchant-{versions.NEW}-traces.md")


class TracedMerchant:
    """Answers as the traces say; ``sent`` holds (operation, headers, body)."""

    def __init__(self, profile: dict[str, Any] | None = None) -> None:
        self.sent: list[tuple[str, dict[str, str], Any]] = []
        self.url = ""
        answers: dict[str, list[Any]] = {}
        for case in TRACES:
            if case.status >= 300 or case.section == "errors":
                continue
            operation = versions.operation_of(case.method, case.path)
            answers.setdefault(operation, []).append((case.status, case.response_json()))
        if profile is not None:
            answers["discovery"] = [(200, profile)]
        self.answers = answers
        self.app = Starlette(routes=[
            Route("/{path:path}", self.answer, methods=["GET", "POST", "PUT"])])

    async def answer(self, request: Request) -> JSONResponse:
        operation = versions.operation_of(request.method, request.url.path)
        raw = await request.body()
        self.sent.append((operation, dict(request.headers), json.loads(raw) if raw else None))
        given = self.answers.get(operation) or []
        updates = sum(1 for op, _, _ in self.sent if op == operation)
        if not given:
            return JSONResponse({"code": "not_found", "content": operation}, status_code=404)
        status, body = given[min(updates, len(given)) - 1]
        # The traces were written for 127.0.0.1:8182: point them here.
        text = json.dumps(body).replace(RECORDED_BASE, self.url)
        return JSONResponse(json.loads(text), status_code=status)


async def run_checkout(url: str, **proxy_options: Any) -> tuple[list[Any], Any]:
    executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
    proxy = business_proxy(executor, url)
    for name, value in proxy_options.items():
        setattr(proxy, name, value)
    platform, done = platform_agent(executor)
    async with proxy, platform:
        await asyncio.wait_for(done.wait(), 20)
        await platform.drain()
    history = [i for root in platform.enactments() for _, i, _ in platform.history(root)]
    return history, proxy


async def test_a_2026_04_08_merchant_is_spoken_to_in_2026_04_08() -> None:
    shop = TracedMerchant()
    async with serve(shop.app) as url:
        shop.url = url
        history, proxy = await run_checkout(url)
    assert proxy.ucp_version == versions.NEW
    assert [i.name for i in history] == ["Create", "Created", "Complete", "Completed"]
    created, completed = history[1], history[3]
    # Answers came back in the 2026-01-11 shapes the protocol's types check.
    assert created["id"] and isinstance(created["payment"], dict)
    assert completed["order"]["id"] and completed["order"]["permalink_url"].startswith(url)
    operations = [op for op, _, _ in shop.sent]
    assert operations == ["discovery", "create", "update", "update", "complete"]
    for operation, headers, _body in shop.sent[1:]:
        assert "request-signature" not in headers, operation
        assert "version=" not in headers["ucp-agent"] and "profile=" in headers["ucp-agent"]
        assert headers["idempotency-key"]
    _, _, create = shop.sent[1]
    assert "currency" not in create and "id" not in create
    assert all("title" not in line["item"] for line in create["line_items"])
    _, _, complete = shop.sent[4]
    assert "payment_data" not in complete and "risk_signals" not in complete
    [instrument] = complete["payment"]["instruments"]
    assert instrument["selected"] is True
    _, _, option = shop.sent[3]
    [method] = option["fulfillment"]["methods"]
    assert method["id"] and all(group["id"] for group in method["groups"])


async def test_the_bundled_merchant_is_spoken_to_in_2026_01_11() -> None:
    async with serve(create_app()) as url:
        history, proxy = await run_checkout(url)
    assert proxy.ucp_version == versions.OLD
    assert history[-1].name == "Completed"


async def test_a_fixed_version_skips_discovery() -> None:
    async with serve(create_app()) as url:
        executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
        proxy = business_proxy(executor, url, ucp_version=versions.OLD)
        seen: list[str] = []
        proxy.http_listeners.append(lambda event: seen.append(event.path))
        platform, done = platform_agent(executor)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 20)
    assert "/.well-known/ucp" not in seen


async def test_no_version_in_common_fails_the_create_with_the_reason() -> None:
    future = copy.deepcopy(TRACES[0].response_json())
    future["ucp"]["version"] = "2099-01-01"
    future["ucp"]["supported_versions"] = {"2098-01-01": "http://x/.well-known/ucp"}
    shop = TracedMerchant(profile=future)
    async with serve(shop.app) as url:
        shop.url = url
        history, proxy = await run_checkout(url)
    failed = history[-1]
    assert failed.name == "Failed"
    assert failed["reason"]["code"] == "version_unsupported"
    assert "2099-01-01" in failed["reason"]["message"]
    assert [op for op, _, _ in shop.sent] == ["discovery"]  # nothing else was sent
    assert proxy.ucp_version is None


def test_an_unknown_fixed_version_is_refused_at_once() -> None:
    from strabo.ucp.checkout import BusinessProxy

    executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
    with pytest.raises(ValueError, match="ucp_version must be one of 2026-01-11, 2026-04-08"):
        BusinessProxy("b", load("atomic-ucp.lsh"), "Business", executor,
                      base_url="http://x", ucp_version="2025-01-01")
