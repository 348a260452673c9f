"""A merchant that keeps failing, and bindings the Business cannot use: the sample
proxies retry under one idempotency key, then answer in the protocol where it
has an action for it, or escalate through on_error where it has none; a
malformed binding is a clean failure. Nothing hangs, nothing escapes.

Real servers: the bundled merchant on a loopback port behind a fault injector,
an in-process SyncServer, the sample agents.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import LocalExecutor, PeachAdapter
from strabo import serve
from strabo.merchant import create_app, merchant_of
from strabo.ucp import incremental_platform as incremental_platform_module
from strabo.ucp import platform_agent as platform_module
from strabo.ucp.business_proxy import RETRY, business_proxy
from strabo.ucp.incremental_platform import incremental_platform
from strabo.ucp.incremental_proxy import incremental_proxy
from strabo.ucp.platform_agent import platform_agent
from syncserver import SyncServer
from tests.conftest import load

ASGI = Callable[..., Awaitable[None]]
TRIES = 1 + RETRY["retries"]


class CompleteAlwaysFails:
    """The merchant, except that every ``/complete`` gets a 500 without reaching it;
    the Idempotency-Key of each of those requests is kept."""

    def __init__(self, app: ASGI) -> None:
        self.app = app
        self.keys: list[str] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/complete"):
            await self.app(scope, receive, send)
            return
        self.keys.append(dict(scope["headers"]).get(b"idempotency-key", b"").decode())
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"Internal Server Error"})


def watch(platform: PeachAdapter) -> list[ActionInstance]:
    """What the Platform observes, in order."""
    seen: list[ActionInstance] = []

    @platform.observation()
    async def observe(action: ActionInstance, performer: str) -> None:
        seen.append(action)

    return seen


def mas(protocol: str) -> LocalExecutor:
    return LocalExecutor(
        SyncServer.embedded([load(protocol)], {"platform": ["Platform"], "business": ["Business"]})
    )


def escaped(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Exceptions that escaped a handler (Peach logs them with their traceback)."""
    return [r for r in caplog.records if r.exc_info]


async def test_simple_ucp_a_permanent_500_on_complete_is_retried_then_escalated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    merchant = create_app()
    faulty = CompleteAlwaysFails(merchant)
    executor = mas("atomic-ucp.lsh")
    async with serve(faulty) as url:
        proxy = business_proxy(executor, url)
        proxy.backoff = 0.01
        platform, _ = platform_agent(executor)
        seen = watch(platform)
        with caplog.at_level(logging.INFO, logger="strabo.proxy"):
            async with proxy, platform:
                # SimpleUCP lets the Business say nothing after Created but Completed:
                # the failure reaches the sample's on_error handler, which escalates.
                await asyncio.wait_for(proxy.escalated.wait(), 20)
                await platform.drain()
    assert len(faulty.keys) == TRIES and len(set(faulty.keys)) == 1  # one key, every try
    assert [a.name for a in seen] == ["Create", "Created", "Complete"]  # no protocol answer
    [escalation] = proxy.escalations
    created = seen[1]
    assert escalation.action == "Complete" and escalation.keys == {"cid": created["cid"]}
    assert escalation.checkout == created["id"] and escalation.attempts == TRIES
    assert escalation.error == {"status": 500, "code": None, "message": "Internal Server Error"}
    assert merchant_of(merchant).orders() == []
    loud = [r for r in caplog.records if r.name == "strabo.proxy" and r.levelno >= logging.WARNING]
    [line] = [r.getMessage() for r in loud]  # logged once, one line
    assert line.startswith("business: Complete->>Completed POST /checkout-sessions/{id}/complete")
    assert "failed and SimpleUCP has no action to say so: 500 Internal Server Error " in line
    assert f"({TRIES} tries in " in line and "retries exhausted" in line
    assert "\n" not in line and not escaped(caplog)


async def test_incremental_ucp_a_permanent_500_on_complete_is_a_status_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    merchant = create_app()
    faulty = CompleteAlwaysFails(merchant)
    executor = mas("incremental-ucp.lsh")
    async with serve(faulty) as url:
        proxy = incremental_proxy(executor, url)
        proxy.backoff = 0.01
        platform, done = incremental_platform(executor)
        seen = watch(platform)
        async with proxy, platform:
            # The Platform sees StatusChange, cancels, and the Business says Cancelled:
            # the enactment completes.
            await asyncio.wait_for(done.wait(), 20)
    assert len(faulty.keys) == TRIES and len(set(faulty.keys)) == 1
    names = [a.name for a in seen]
    assert names[-4:] == ["Complete", "StatusChange", "Cancel", "Cancelled"]
    change = seen[-3]
    assert change["status"] == "requires_escalation" and change["totals"] is None
    assert change["messages"] == seen[1]["messages"]  # Created's: the protocol fixes them
    checkout = next(a["id"] for a in seen if a.name == "Created")
    assert merchant_of(merchant).checkout(checkout).status == "canceled"
    assert merchant_of(merchant).orders() == [] and proxy.escalations == []
    assert not escaped(caplog)


MALFORMED = [
    pytest.param("express", "fulfillment_pref must be an object", id="string"),
    pytest.param(["shipping"], "fulfillment_pref must be an object", id="list"),
    pytest.param(
        42,
        "fulfillment_pref must be an object with 'methods', or null, not a number (42)",
        id="number",
    ),
    pytest.param({"methods": "shipping"}, "fulfillment_pref.methods must be a list", id="methods"),
    pytest.param(
        {"methods": [{}]},
        "fulfillment_pref.methods[0].type must be a non-empty string",
        id="no-type",
    ),
    pytest.param(
        {"methods": [{"type": "shipping", "selected_destination_id": 7}]},
        "fulfillment_pref.methods[0].selected_destination_id must be a string, not a number (7)",
        id="destination",
    ),
]


@pytest.mark.parametrize(("preference", "message"), MALFORMED)
async def test_simple_ucp_a_malformed_fulfillment_pref_fails_the_checkout_cleanly(
    preference: Any,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(platform_module, "SAMPLE_FULFILLMENT_PREF", preference)
    merchant = create_app()
    executor = mas("atomic-ucp.lsh")
    async with serve(merchant) as url:
        proxy = business_proxy(executor, url)
        platform, done = platform_agent(executor)
        seen = watch(platform)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 20)  # Failed completes the enactment
            await platform.drain()
    assert [a.name for a in seen] == ["Create", "Failed"]
    reason = seen[-1]["reason"]
    assert reason["status"] is None and reason["code"] == "invalid_binding"
    assert reason["message"].startswith(message)
    assert merchant_of(merchant).checkouts() == []  # refused before any request
    assert not escaped(caplog) and proxy.escalations == []


@pytest.mark.parametrize(("preference", "message"), MALFORMED[:3])
async def test_incremental_ucp_a_malformed_fulfillment_pref_is_acknowledged_with_the_error(
    preference: Any,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(incremental_platform_module, "SAMPLE_FULFILLMENT_PREF", preference)
    merchant = create_app()
    executor = mas("incremental-ucp.lsh")
    async with serve(merchant) as url:
        proxy = incremental_proxy(executor, url)
        platform, done = incremental_platform(executor)
        seen = watch(platform)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 20)  # the Platform cancels on the error
    names = [a.name for a in seen]
    assert names[-4:] == ["SetFulfillment", "FulfillmentSet", "Cancel", "Cancelled"]
    ack = seen[-3]
    [error] = ack["messages"]
    assert error["type"] == "error" and error["code"] == "invalid_binding"
    assert error["content"].startswith(message)
    assert ack["fulfillment"] is None  # the session's, unchanged: no shipping was set
    assert not escaped(caplog) and proxy.escalations == []
