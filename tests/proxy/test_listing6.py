"""Listing 6 of the Strabo paper, as printed (but for its imports), runs as is."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from pytest_httpx import HTTPXMock

from langshaw import ActionInstance
from peach import LocalExecutor, PeachAdapter
from strabo.proxy import ProxyAdapter, ProxyRequest
from syncserver import SyncServer
from tests.conftest import paper
from tests.harness import until

merchant_url = "http://merchant.test"


def ucp_header_hook(request: ProxyRequest) -> dict[str, str]:
    return {
        "UCP-Agent": 'profile="x"',
        "Request-Signature": "s",
        "Request-Id": "r",
        "Idempotency-Key": request.idempotency_key,
    }


async def test_listing_6_as_printed(
    httpx_mock: HTTPXMock, caplog: pytest.LogCaptureFixture
) -> None:
    protocol = paper("atomic-ucp.lsh")  # Listing 6 runs on Listing 3 as printed
    server = SyncServer.embedded(
        [protocol], {"platform": ["Platform"], "atomic_proxy": ["Business"]}
    )
    executor = LocalExecutor(server)
    session = {
        "id": "chk_1",
        "totals": [{"type": "total", "amount": 3800}],
        "payment": {"handlers": []},
        "line_items": [],
    }
    httpx_mock.add_response(
        method="POST", url=f"{merchant_url}/checkout-sessions", status_code=201, json=session
    )
    httpx_mock.add_response(
        method="PUT",
        url=f"{merchant_url}/checkout-sessions/chk_1",
        json={**session, "discounts": {"codes": ["10OFF"]}, "fulfillment": {"methods": []}},
    )
    httpx_mock.add_response(
        method="POST",
        url=f"{merchant_url}/checkout-sessions/chk_1/complete",
        json={**session, "order": {"id": "order_1"}},
    )
    httpx_mock.add_response(
        method="POST",
        url=f"{merchant_url}/checkout-sessions/chk_1/cancel",
        json={**session, "status": "canceled"},
    )

    # ---- Listing 6 -----------------------------------------------------------------
    # fmt: off
    proxy = ProxyAdapter(
        "atomic_proxy", protocol, "Business", executor,
        base_url=merchant_url, internal=["cid"],
        header_hook=ucp_header_hook, exclude=["Create"])
    proxy.route("Create->>Created", "POST-/checkout-sessions")
    proxy.route("Update->>Updated", "PUT-/checkout-sessions/{id}",
        request={"discount_codes": "$.discounts",
                "fulfillment_pref": "$.fulfillment",
                "payment_pref": "$.payment"})
    proxy.route("Complete->>Completed",
        "POST-/checkout-sessions/{id}/complete")
    proxy.route("Cancel->>Cancelled",
        "POST-/checkout-sessions/{id}/cancel")
    @proxy.observation('Create')
    async def on_create(action, performer):
        if performer == proxy.name: return  # noqa: E701
        create_resp = await proxy.request("Create",
            {k: action.bindings[k]
             for k in ("line_items", "currency", "buyer")})
        update_resp = await proxy.request("Update",
            {**action.bindings, "id": create_resp["id"]})
        combined = {**action.bindings, **create_resp,
                    **update_resp}
        await proxy.attempt([proxy.build_action("Created",
            combined)])
    # fmt: on
    # ---------------------------------------------------------------------------------
    # pytest-httpx answers for the merchant, and it sees httpx only: with a transport
    # the proxy uses httpx instead of its lean client, which would go to the network.
    proxy._transport = httpx.AsyncHTTPTransport()

    platform = PeachAdapter("platform", protocol, "Platform", executor)
    seen: list[ActionInstance] = []
    changed = asyncio.Event()

    @platform.observation()
    async def observe(action: ActionInstance, performer: str) -> None:
        seen.append(action)
        changed.set()

    with caplog.at_level(logging.INFO, logger="strabo.proxy"):
        async with proxy, platform:
            [create] = await platform.attempt(
                [
                    platform.initiating()[0].bind(
                        line_items=[{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}],
                        currency="USD",
                        buyer={"email": "a@b.c"},
                        payment_pref={},
                        discount_codes={"codes": ["10OFF"]},
                        fulfillment_pref=None,
                    )
                ]
            )
            await until(lambda: "Created" in [a.name for a in seen], changed)
            complete, cancel = sorted(
                platform.enabled(create.keys), key=lambda f: f.name != "Complete"
            )
            await platform.attempt([complete.bind(payment_data={"token": "t"}, risk_signals={})])
            await until(lambda: "Completed" in [a.name for a in seen], changed)
            await platform.attempt([cancel.bind()])
            # Both adapters share the executor, so the proxy's handler for Cancel is
            # already running when attempt() returns: wait for it to finish.
            await proxy.drain()
    created = next(a for a in seen if a.name == "Created")
    assert created["id"] == "chk_1" and created["discounts"] == {"codes": ["10OFF"]}
    assert next(a for a in seen if a.name == "Completed")["order"] == {"id": "order_1"}
    post, put, complete_request, cancel_request = httpx_mock.get_requests()
    assert json.loads(post.content) == {
        "line_items": [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}],
        "currency": "USD",
        "buyer": {"email": "a@b.c"},
    }
    assert json.loads(put.content) == {
        "id": "chk_1",
        "line_items": [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}],
        "currency": "USD",
        "buyer": {"email": "a@b.c"},
        "payment": {},
        "discounts": {"codes": ["10OFF"]},
    }
    assert json.loads(complete_request.content) == {
        "id": "chk_1",
        "payment_data": {"token": "t"},
        "risk_signals": {},
    }
    assert cancel_request.url.path == "/checkout-sessions/chk_1/cancel"
    assert (
        "Cancel->>Cancelled POST /checkout-sessions/{id}/cancel done; Cancelled is not in "
        "SimpleUCP" in caplog.text
    )
