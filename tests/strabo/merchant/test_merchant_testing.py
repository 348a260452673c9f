"""The merchant's testing endpoints: decline, escalate, expire, stock.

They make one chosen session fail the way real shops do, over real HTTP, so
agents' handling of each UCP ending can be tested. Each needs the simulation
secret, refuses bad bodies with a 400 that says what is wrong, and leaves the
state alone when it refuses.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import SIMULATION_SECRET, Shop
from .shopper import line

SECRET = {"Simulation-Secret": SIMULATION_SECRET}
ROSES = "bouquet_roses"


async def rig(shop: Shop, checkout: str, what: str, body: Any = None, **headers: str):
    return await shop.client.post(f"/testing/checkout-sessions/{checkout}/{what}", json=body,
                                  headers=headers or SECRET)


async def test_decline_fails_the_next_complete_only(shop: Shop) -> None:
    ready = await shop.shopper.ship_ready(line(ROSES))
    answer = await rig(shop, ready["id"], "decline", {"code": "CARD_DECLINED"})
    assert answer.status_code == 200
    assert answer.json() == {"checkout_id": ready["id"], "next_complete": "decline",
                             "code": "CARD_DECLINED"}
    declined = await shop.shopper.complete(ready["id"])
    assert declined.status_code == 402
    assert declined.json()["code"] == "CARD_DECLINED"
    assert shop.merchant.checkout(ready["id"]).status == "ready_for_complete"
    stock = shop.merchant.stock(ROSES)
    again = await shop.shopper.complete(ready["id"])  # a new key: a new try, now paid
    assert again.status_code == 200 and again.json()["status"] == "completed"
    assert shop.merchant.stock(ROSES) == stock - 1


async def test_escalate_answers_requires_escalation_with_a_continue_url(shop: Shop) -> None:
    ready = await shop.shopper.ship_ready(line(ROSES))
    answer = await rig(shop, ready["id"], "escalate")
    url = answer.json()["continue_url"]
    assert url == f"{shop.url}/checkout/{ready['id']}"
    escalated = await shop.shopper.complete(ready["id"])
    assert escalated.status_code == 200
    body = escalated.json()
    assert body["status"] == "requires_escalation" and body["continue_url"] == url
    [message] = body["messages"]
    assert message["type"] == "error" and message["severity"] == "requires_buyer_review"
    assert shop.merchant.orders() == []


async def test_expire_cancels_the_session_for_the_shop(shop: Shop) -> None:
    created = (await shop.shopper.create(line(ROSES))).json()
    answer = await rig(shop, created["id"], "expire")
    assert answer.status_code == 200 and answer.json()["status"] == "canceled"
    late = await shop.shopper.complete(created["id"])
    assert late.status_code == 409 and late.json()["code"] == "CHECKOUT_NOT_MODIFIABLE"
    session = (await shop.shopper.get(created["id"])).json()
    assert session["status"] == "canceled" and session["messages"][0]["code"] == "expired"
    # An ended session cannot be rigged or expired again.
    assert (await rig(shop, created["id"], "decline")).status_code == 409
    assert (await rig(shop, created["id"], "expire")).status_code == 409


async def test_inventory_sets_the_stock(shop: Shop) -> None:
    answer = await shop.client.put(f"/testing/inventory/{ROSES}", json={"quantity": 0},
                                   headers=SECRET)
    assert answer.json() == {"product_id": ROSES, "quantity": 0}
    assert shop.merchant.stock(ROSES) == 0
    refused = await shop.shopper.create(line(ROSES))
    assert refused.status_code == 400 and refused.json()["code"] == "OUT_OF_STOCK"
    unknown = await shop.client.put("/testing/inventory/nope", json={"quantity": 1},
                                    headers=SECRET)
    assert unknown.status_code == 404


@pytest.mark.parametrize(("body", "detail"), [
    ({"quantity": -1}, "quantity must be an integer of at least 0"),
    ({"quantity": "3"}, "quantity must be an integer of at least 0"),
    ({"quantity": True}, "quantity must be an integer of at least 0"),
    ({}, "quantity must be an integer of at least 0"),
    ({"quantity": 1, "price": 2}, "unknown field(s) price (known: quantity)"),
    ([1], "the body must be a JSON object"),
])
async def test_bad_inventory_bodies_are_400s_that_change_nothing(
    shop: Shop, body: Any, detail: str
) -> None:
    before = shop.merchant.stock(ROSES)
    answer = await shop.client.put(f"/testing/inventory/{ROSES}", json=body, headers=SECRET)
    assert (answer.status_code, answer.json()) == (400, {"detail": detail})
    assert shop.merchant.stock(ROSES) == before


async def test_bad_rigging_bodies(shop: Shop) -> None:
    created = await shop.shopper.ship_ready(line(ROSES))
    assert (await shop.client.post(f"/testing/checkout-sessions/{created['id']}/decline",
                                   content=b"{", headers=SECRET)).json() == {
        "detail": "the body is not valid JSON"}
    assert (await rig(shop, created["id"], "decline", {"code": ""})).json() == {
        "detail": "code must be a non-empty string"}
    assert (await rig(shop, "nope", "escalate")).status_code == 404
    assert shop.merchant.checkout(created["id"]).status == "ready_for_complete"
    assert (await shop.shopper.complete(created["id"])).status_code == 200  # nothing rigged


@pytest.mark.parametrize("what", ["decline", "escalate", "expire"])
async def test_the_secret_is_required(shop: Shop, what: str) -> None:
    created = (await shop.shopper.create(line(ROSES))).json()
    for headers in ({}, {"Simulation-Secret": "wrong"}):
        answer = await shop.client.post(
            f"/testing/checkout-sessions/{created['id']}/{what}", headers=headers)
        assert (answer.status_code, answer.json()) == (403, {"detail": "Invalid Simulation Secret"})
    assert shop.merchant.checkout(created["id"]).status == "ready_for_complete"
