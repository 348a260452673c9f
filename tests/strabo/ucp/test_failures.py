"""A merchant that keeps failing, and bindings the Business cannot use: the sample
proxies retry under one idempotency key, then answer in the protocol where it
has an action for it, or escalate through on_error where it has none; a
malformed binding cannot be made at all (the protocols are typed). Nothing
hangs, nothing escapes.

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
from peach import ActionRejected, BindError, LocalExecutor, PeachAdapter
from strabo import serve
from strabo.merchant import create_app, merchant_of
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
            # The Platform sees StatusChange, which ends the enactment: after
            # Complete it may not Cancel (nono Complete Cancel).
            await asyncio.wait_for(done.wait(), 20)
            await platform.drain()
            [root] = platform.enactments()
            assert platform.is_complete(root)
    assert len(faulty.keys) == TRIES and len(set(faulty.keys)) == 1
    names = [a.name for a in seen]
    assert names[-2:] == ["Complete", "StatusChange"] and "Cancel" not in names
    change = seen[-1]
    assert change["status"] == "requires_escalation" and "totals" not in change
    assert change.get("messages") == seen[1].get("messages")  # Created's: the protocol fixes them
    checkout = next(a["id"] for a in seen if a.name == "Created")
    # No order, and the session is left open for the buyer to go on with the merchant.
    assert merchant_of(merchant).checkout(checkout).status != "canceled"
    assert merchant_of(merchant).orders() == [] and proxy.escalations == []
    assert not escaped(caplog)


MALFORMED = [
    pytest.param("express", "fulfillment_pref", '"express" is not of type "object"', id="string"),
    pytest.param(["shipping"], "fulfillment_pref", 'is not of type "object"', id="list"),
    pytest.param(42, "fulfillment_pref", '42 is not of type "object"', id="number"),
    pytest.param(
        {"methods": "shipping"}, "fulfillment_pref.methods", 'is not of type "array"', id="methods"
    ),
    pytest.param(
        {"methods": [{}]}, "fulfillment_pref.methods[0]", '"type" is a required property',
        id="no-type",
    ),
    pytest.param(
        {"methods": [{"type": "shipping", "selected_destination_id": 7}]},
        "fulfillment_pref.methods[0].selected_destination_id",
        '7 is not of type "string"',
        id="destination",
    ),
]


@pytest.mark.parametrize("protocol", ["atomic-ucp.lsh", "incremental-ucp.lsh"])
@pytest.mark.parametrize(("preference", "path", "message"), MALFORMED)
async def test_a_malformed_fulfillment_pref_never_reaches_the_business(
    protocol: str, preference: Any, path: str, message: str
) -> None:
    """The motivating bug: a model bound fulfillment_pref to a string and the
    Business proxy crashed in a handler. The types now refuse it at bind(), and
    the SyncServer refuses it from an agent that skips bind(), so the proxy
    cannot receive one."""
    merchant = create_app()
    executor = mas(protocol)
    simple = protocol == "atomic-ucp.lsh"
    async with serve(merchant) as url:
        proxy = business_proxy(executor, url) if simple else incremental_proxy(executor, url)
        seen = watch(proxy)
        platform = PeachAdapter("platform", load(protocol), "Platform", executor)
        created = asyncio.Event()

        @platform.observation("Created")
        async def on_created(action: ActionInstance, performer: str) -> None:
            created.set()

        async with proxy, platform:
            create = {"line_items": platform_module.SAMPLE_LINE_ITEMS, "currency": "USD"}
            create |= {"payment_pref": {}} if simple else {"payment": {}}
            [opened] = await platform.attempt([platform.initiating()[0].bind(**create)])
            if not simple:  # IncrementalUCP sets the preference in a change of its own
                await asyncio.wait_for(created.wait(), 20)
            name = "Create" if simple else "SetFulfillment"
            keys = {} if simple else opened.keys
            with pytest.raises(BindError) as refused:
                platform.build_action(name, {**keys, **create, "fulfillment_pref": preference})
            assert refused.value.path == path and message in str(refused.value)
            # Built by hand, past bind(): the server refuses it, with the same path.
            action = load(protocol).action(name)
            fixed = platform.build_action(name, {**keys, **create}).bindings if simple else (
                platform.build_action(name, {**keys, "fulfillment_pref": {"methods": []}})
                .bindings)
            raw = ActionInstance(action, {**fixed, "fulfillment_pref": preference})
            with pytest.raises(ActionRejected) as rejected:
                await platform.attempt([raw])
            assert rejected.value.rule == "type" and rejected.value.violation.path == path
            await proxy.sync()
    assert all(a.name != name or a is opened for a in seen)
    assert proxy.escalations == []
    if simple:
        [checkout] = merchant_of(merchant).checkouts()  # only the well-formed Create's
        assert checkout.status != "canceled"



def test_the_demo_says_why_an_incremental_checkout_ended_at_a_status_change() -> None:
    """StatusChange ends an IncrementalUCP checkout: the demo's summary says what
    the status means, whether or not an order may exist."""
    from types import SimpleNamespace

    from strabo.demo import _unsaid

    class Said(dict[str, Any]):
        def __init__(self, name: str, **values: Any) -> None:
            super().__init__(values)
            self.name = name

    created = Said("Created", id="co1")
    open_session = [created, Said("StatusChange", status="requires_escalation")]
    [line] = _unsaid(open_session, SimpleNamespace(placed={}))
    assert "status requires_escalation: no order" in line and "stays open" in line
    placed = [created, Said("StatusChange", status="completed")]
    [line] = _unsaid(placed, SimpleNamespace(placed={"co1": "ORD-1"}))
    assert "placed order ORD-1" in line and "not cancelled" in line
