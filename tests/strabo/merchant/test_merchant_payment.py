"""Completing a checkout: mock payment tokens, handlers, stock and orders."""

from __future__ import annotations

import pytest

from .conftest import Shop
from .shopper import instrument, line


@pytest.mark.parametrize(
    ("token", "handler", "status", "code"),
    [
        ("success_token", "mock_payment_handler", 200, None),
        ("fail_token", "mock_payment_handler", 402, "INSUFFICIENT_FUNDS"),
        ("fraud_token", "mock_payment_handler", 403, "FRAUD_DETECTED"),
        ("whatever", "mock_payment_handler", 402, "UNKNOWN_TOKEN"),
        ("anything", "google_pay", 200, None),
        ("anything", "shop_pay", 200, None),
        ("success_token", "no_such_handler", 400, "INVALID_REQUEST"),
    ],
)
async def test_tokens_and_handlers(shop: Shop, token: str, handler: str, status: int, code):
    ready = await shop.shopper.ship_ready(line("pot_ceramic", 2))

    response = await shop.shopper.complete(ready["id"], instrument(token, handler))

    assert response.status_code == status, response.text
    session = shop.merchant.checkout(ready["id"])
    if code is None:
        assert response.json()["status"] == "completed"
        assert session.status == "completed"
        assert shop.merchant.stock("pot_ceramic") == 2000 - 2
    else:
        assert response.json()["code"] == code
        assert session.status == "ready_for_complete"
        assert shop.merchant.stock("pot_ceramic") == 2000
        assert shop.merchant.orders() == []


async def test_a_card_credential_is_accepted_whatever_the_handler(shop: Shop):
    ready = await shop.shopper.ship_ready()
    body = instrument()
    body["payment_data"]["handler_id"] = "nonexistent"
    body["payment_data"]["credential"] = {
        "type": "card", "card_number_type": "fpan", "number": "4242424242424242",
        "expiry_month": 12, "expiry_year": 2030,
    }

    assert (await shop.shopper.complete(ready["id"], body)).status_code == 200


async def test_an_instrument_without_credential_is_refused(shop: Shop):
    ready = await shop.shopper.ship_ready()
    body = instrument()
    del body["payment_data"]["credential"]

    response = await shop.shopper.complete(ready["id"], body)

    assert response.status_code == 400
    assert response.json() == {
        "detail": "Missing credentials in instrument", "code": "INVALID_REQUEST"
    }


async def test_complete_needs_payment_data_and_risk_signals(shop: Shop):
    ready = await shop.shopper.ship_ready()
    bare = instrument()["payment_data"]
    missing_both = await shop.shopper.complete(ready["id"], bare)
    missing_risk = await shop.shopper.complete(ready["id"], {"payment_data": bare})
    no_handler = await shop.shopper.complete(
        ready["id"], {"payment_data": {"id": "i", "type": "card"}, "risk_signals": {}}
    )

    assert missing_both.status_code == missing_risk.status_code == no_handler.status_code == 422
    assert [e["loc"] for e in missing_both.json()["detail"]] == [
        ["body", "payment_data"], ["body", "risk_signals"]
    ]
    assert [e["loc"] for e in missing_risk.json()["detail"]] == [["body", "risk_signals"]]
    assert [e["loc"] for e in no_handler.json()["detail"]] == [
        ["body", "payment_data", "handler_id"]
    ]


async def test_payment_is_checked_before_shipping(shop: Shop):
    created = (await shop.shopper.create()).json()

    response = await shop.shopper.complete(created["id"], instrument("fail_token"))

    assert response.status_code == 402


async def test_completion_places_an_order_reachable_by_its_permalink(shop: Shop):
    ready = await shop.shopper.ship_ready(line("bouquet_tulips", 2))
    done = (await shop.shopper.complete(ready["id"])).json()

    order_link = done["order"]
    assert order_link["permalink_url"] == f"{shop.url}/orders/{order_link['id']}"
    order = await shop.client.get(
        f"/orders/{order_link['id']}",
        headers={"UCP-Agent": "x", "Request-Signature": "x", "Request-Id": "1"},
    )
    assert order.status_code == 200
    body = order.json()
    assert body["checkout_id"] == ready["id"]
    assert body["line_items"][0]["quantity"] == {"total": 2, "fulfilled": 0}
    assert body["totals"] == done["totals"]


async def test_stock_sold_to_one_checkout_is_gone_for_the_next(shop: Shop):
    first = await shop.shopper.ship_ready(line("bouquet_sunflowers", 300))
    second = await shop.shopper.ship_ready(line("bouquet_sunflowers", 300))

    assert (await shop.shopper.complete(first["id"])).status_code == 200
    late = await shop.shopper.complete(second["id"])

    assert late.status_code == 409
    assert late.json() == {
        "detail": "Item bouquet_sunflowers is out of stock", "code": "OUT_OF_STOCK"
    }
    assert shop.merchant.stock("bouquet_sunflowers") == 200
    more = await shop.shopper.create(line("bouquet_sunflowers", 201))
    assert more.status_code == 400
    assert more.json()["code"] == "OUT_OF_STOCK"


async def test_an_emptied_cart_cannot_be_completed(shop: Shop):
    ready = await shop.shopper.ship_ready()
    emptied = await shop.shopper.update(ready, line_items=[])
    assert emptied.json()["line_items"] == []

    response = await shop.shopper.complete(ready["id"])

    assert response.status_code == 400
    assert response.json()["detail"] == "Cannot complete a checkout without line items."
    assert shop.merchant.orders() == []
