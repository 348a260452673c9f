"""Shipping in three steps: ask for shipping, choose a destination, choose an option."""

from __future__ import annotations

from .conftest import Shop
from .shopper import instrument, line

SHIPPING = {"methods": [{"type": "shipping"}]}


def to(destination: str, option: str | None = None) -> dict:
    method: dict = {"type": "shipping", "selected_destination_id": destination}
    if option:
        method["groups"] = [{"selected_option_id": option}]
    return {"methods": [method]}


def amounts(checkout: dict, kind: str) -> list[int]:
    return [t["amount"] for t in checkout["totals"] if t["type"] == kind]


async def test_the_three_steps_offer_destinations_then_options_then_charge(shop: Shop):
    created = (await shop.shopper.create(line("pot_ceramic", 2))).json()

    asked = (await shop.shopper.update(created, fulfillment=SHIPPING)).json()
    method = asked["fulfillment"]["methods"][0]
    assert [d["id"] for d in method["destinations"]] == ["addr_1", "addr_2"]
    assert "selected_destination_id" not in method and "groups" not in method

    placed = (await shop.shopper.update(asked, fulfillment=to("addr_1"))).json()
    group = placed["fulfillment"]["methods"][0]["groups"][0]
    assert group["line_item_ids"] == [li["id"] for li in placed["line_items"]]
    assert [(o["id"], o["totals"][-1]["amount"]) for o in group["options"]] == [
        ("std-ship", 600),
        ("exp-ship-us", 1400),
    ]
    assert "selected_option_id" not in group
    assert amounts(placed, "fulfillment") == []

    chosen = (await shop.shopper.update(placed, fulfillment=to("addr_1", "exp-ship-us"))).json()
    assert chosen["fulfillment"]["methods"][0]["groups"][0]["selected_option_id"] == "exp-ship-us"
    assert amounts(chosen, "fulfillment") == [1400]
    assert amounts(chosen, "total") == [2 * 1200 + 1400]


async def test_completion_needs_a_destination_and_an_option(shop: Shop):
    created = (await shop.shopper.create()).json()
    asked = (await shop.shopper.update(created, fulfillment=SHIPPING)).json()
    placed = (await shop.shopper.update(asked, fulfillment=to("addr_2"))).json()

    for step in (created, asked, placed):
        response = await shop.shopper.complete(step["id"])
        assert response.status_code == 400
        assert response.json() == {
            "detail": "Fulfillment address and option must be selected before completion.",
            "code": "INVALID_REQUEST",
        }

    await shop.shopper.update(placed, fulfillment=to("addr_2", "std-ship"))
    assert (await shop.shopper.complete(created["id"])).status_code == 200


async def test_unknown_destination_or_option_is_refused(shop: Shop):
    created = (await shop.shopper.create()).json()
    asked = (await shop.shopper.update(created, fulfillment=SHIPPING)).json()

    nowhere = await shop.shopper.update(asked, fulfillment=to("addr_99"))
    no_option = await shop.shopper.update(asked, fulfillment=to("addr_1", "by-pigeon"))
    option_only = {"type": "shipping", "groups": [{"selected_option_id": "std-ship"}]}
    no_destination = {"methods": [option_only]}
    early = await shop.shopper.update(asked, fulfillment=no_destination)
    pickup = await shop.shopper.update(asked, fulfillment={"methods": [{"type": "pickup"}]})

    assert nowhere.json()["detail"] == "Unknown fulfillment destination: addr_99"
    assert no_option.json()["detail"] == "Unknown fulfillment option: by-pigeon"
    assert early.status_code == 400
    assert pickup.json()["detail"] == "Unsupported fulfillment method type: pickup"
    for response in (nowhere, no_option, early, pickup):
        assert response.status_code == 400
    assert shop.merchant.checkout(created["id"]).fulfillment.methods[0].groups is None


async def test_inline_destination_for_an_unknown_buyer(shop: Shop):
    created = (await shop.shopper.create(buyer={"email": "nobody@example.com"})).json()
    asked = (await shop.shopper.update(created, fulfillment=SHIPPING)).json()
    assert "destinations" not in asked["fulfillment"]["methods"][0]

    inline = {
        "methods": [
            {
                "type": "shipping",
                "destinations": [
                    {"id": "home", "street_address": "1 Rue X", "address_locality": "Lyon",
                     "postal_code": "69001", "address_country": "FR"}
                ],
                "selected_destination_id": "home",
            }
        ]
    }
    placed = (await shop.shopper.update(asked, fulfillment=inline)).json()
    options = placed["fulfillment"]["methods"][0]["groups"][0]["options"]
    # Outside the US the international express rate replaces the US one.
    assert [o["id"] for o in options] == ["std-ship", "exp-ship-intl"]


async def test_standard_shipping_is_free_with_roses_or_large_orders(shop: Shop):
    async def standard(*items: dict) -> dict:
        created = (await shop.shopper.create(*items)).json()
        asked = (await shop.shopper.update(created, fulfillment=SHIPPING)).json()
        placed = (await shop.shopper.update(asked, fulfillment=to("addr_1"))).json()
        return placed["fulfillment"]["methods"][0]["groups"][0]["options"][0]

    assert (await standard(line("pot_ceramic")))["totals"][-1]["amount"] == 600
    roses = await standard(line("bouquet_roses"))
    assert roses["totals"][-1]["amount"] == 0
    assert roses["title"] == "Standard Shipping (Free)"
    assert (await standard(line("orchid_white", 3)))["totals"][-1]["amount"] == 0


async def test_a_new_destination_keeps_an_option_it_still_offers(shop: Shop):
    ready = await shop.shopper.ship_ready(line("pot_ceramic"), option="exp-ship-us")
    moved = (await shop.shopper.update(ready, fulfillment=to("addr_2"))).json()
    group = moved["fulfillment"]["methods"][0]["groups"][0]
    assert group["id"] == ready["fulfillment"]["methods"][0]["groups"][0]["id"]
    assert group["selected_option_id"] == "exp-ship-us"
    assert amounts(moved, "fulfillment") == [1400]


async def test_changing_the_cart_keeps_the_choice_and_reprices_shipping(shop: Shop):
    ready = await shop.shopper.ship_ready(line("pot_ceramic"))
    assert amounts(ready, "fulfillment") == [600]

    bigger = dict(ready, line_items=[dict(ready["line_items"][0], quantity=10)])
    grown = (await shop.shopper.update(bigger)).json()

    assert grown["fulfillment"]["methods"][0]["groups"][0]["selected_option_id"] == "std-ship"
    assert amounts(grown, "fulfillment") == [0]  # 10 pots pass the free-shipping threshold
    assert amounts(grown, "total") == [12000]


async def test_the_order_expects_the_chosen_shipping(shop: Shop):
    ready = await shop.shopper.ship_ready(line("pot_ceramic", 3), option="exp-ship-us")
    done = (await shop.shopper.complete(ready["id"], instrument())).json()

    order = shop.merchant.order(done["order"]["id"])
    assert order is not None
    (expectation,) = order.fulfillment.expectations
    assert expectation.description == "Express Shipping (US)"
    assert expectation.destination is not None
    assert expectation.destination.street_address == "12 Rosebud Lane"
    assert [(e.id, e.quantity) for e in expectation.line_items] == [
        (done["line_items"][0]["id"], 3)
    ]
