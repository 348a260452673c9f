"""Discount codes: percentage and fixed amounts, taken from the merchandise subtotal."""

from __future__ import annotations

import httpx

from strabo.merchant import create_app, load_catalog, merchant_of
from strabo.serving import serve

from .conftest import Shop
from .shopper import Shopper, line


def totals(checkout: dict) -> list[tuple[str, int]]:
    return [(t["type"], t["amount"]) for t in checkout["totals"]]


async def test_percentage_code(shop: Shop):
    response = await shop.shopper.create(line("bouquet_roses"), discounts={"codes": ["10OFF"]})
    checkout = response.json()

    assert totals(checkout) == [("subtotal", 3800), ("discount", 380), ("total", 3420)]
    (applied,) = checkout["discounts"]["applied"]
    assert (applied["code"], applied["title"], applied["amount"]) == ("10OFF", "10% Off", 380)
    assert applied["allocations"] == [
        {"path": "$.totals[?(@.type=='subtotal')]", "amount": 380}
    ]


async def test_codes_apply_in_order_to_what_is_left(shop: Shop):
    codes = {"codes": ["WELCOME20", "FIXED500"]}
    cart = (line("bouquet_roses"), line("pot_ceramic", 2))
    response = await shop.shopper.create(*cart, discounts=codes)
    checkout = response.json()

    # 6200 subtotal; 20% is 1240; 500 off the remaining 4960.
    assert totals(checkout) == [
        ("subtotal", 6200), ("discount", 1240), ("discount", 500), ("total", 4460)
    ]
    assert [a["title"] for a in checkout["discounts"]["applied"]] == ["20% Off", "$5.00 Off"]


async def test_unknown_and_repeated_codes_are_ignored(shop: Shop):
    checkout = (
        await shop.shopper.create(discounts={"codes": ["NOPE", "10OFF", "10OFF"]})
    ).json()

    assert checkout["discounts"]["codes"] == ["NOPE", "10OFF", "10OFF"]
    assert [a["code"] for a in checkout["discounts"]["applied"]] == ["10OFF"]
    unknown_only = (await shop.shopper.create(discounts={"codes": ["NOPE"]})).json()
    assert unknown_only["discounts"] == {"codes": ["NOPE"]}
    assert totals(unknown_only) == [("subtotal", 3800), ("total", 3800)]


async def test_shipping_is_not_discounted(shop: Shop):
    ready = await shop.shopper.ship_ready(
        line("pot_ceramic"), option="exp-ship-us", discounts={"codes": ["10OFF"]}
    )

    assert totals(ready) == [
        ("subtotal", 1200), ("fulfillment", 1400), ("discount", 120), ("total", 2480)
    ]


async def test_codes_stay_until_replaced_and_are_applied_once(shop: Shop):
    created = (await shop.shopper.create(discounts={"codes": ["10OFF"]})).json()
    kept = (await shop.shopper.update(created)).json()
    kept_again = (await shop.shopper.update(kept)).json()
    replaced = (await shop.shopper.update(kept_again, discounts={"codes": ["FIXED500"]})).json()
    cleared = (await shop.shopper.update(replaced, discounts={"codes": []})).json()

    assert [a["code"] for a in kept_again["discounts"]["applied"]] == ["10OFF"]
    assert totals(kept_again) == totals(created)
    assert totals(replaced) == [("subtotal", 3800), ("discount", 500), ("total", 3300)]
    assert cleared["discounts"] == {"codes": []}


async def test_a_fixed_amount_never_makes_the_subtotal_negative():
    shop = load_catalog()
    cheap_pot = shop.product("pot_ceramic").model_copy(update={"price": 300})
    app = create_app(shop.model_copy(update={"products": (cheap_pot,)}))

    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        checkout = (
            await Shopper(client).create(line("pot_ceramic"), discounts={"codes": ["FIXED500"]})
        ).json()

    assert totals(checkout) == [("subtotal", 300), ("discount", 300), ("total", 0)]
    assert merchant_of(app).checkout(checkout["id"]).totals[-1].amount == 0
