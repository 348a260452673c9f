"""A shop loaded from CSV files (``--data-dir``), and order updates, over real HTTP.

The fixture ``tests/fixtures/merchant_csv_shop`` is a small tea shop in the UCP
conformance suite's CSV format, with prices, codes and rates unlike the bundled
flower shop, so every amount checked here can only come from the CSV files.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from strabo.cli import main
from strabo.merchant import CatalogError, Merchant, create_app, load_data_dir, merchant_of
from strabo.serving import serve

from .conftest import SIMULATION_SECRET, MockAgent
from .profile_rules import profile_problems
from .shopper import Shopper, headers, instrument, line

SHOP = Path(__file__).resolve().parents[2] / "fixtures" / "merchant_csv_shop"
ADA = {"full_name": "Ada Lovelace", "email": "ada@example.org"}


@dataclass
class TeaShop:
    url: str
    merchant: Merchant
    client: httpx.AsyncClient
    shopper: Shopper


@pytest.fixture
async def tea() -> AsyncIterator[TeaShop]:
    app = create_app(data_dir=SHOP, simulation_secret=SIMULATION_SECRET)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield TeaShop(url, merchant_of(app), client, Shopper(client))


def total(checkout: dict[str, Any], kind: str) -> list[int]:
    return [t["amount"] for t in checkout["totals"] if t["type"] == kind]


async def shipped_to(shop: TeaShop, checkout: dict, destination: dict) -> dict:
    """The checkout after sending one inline destination and selecting it."""
    method = {"type": "shipping", "destinations": [destination],
              "selected_destination_id": destination["id"]}
    response = await shop.shopper.update(checkout, fulfillment={"methods": [method]})
    assert response.status_code == 200, response.text
    return response.json()


def options(checkout: dict) -> dict[str, tuple[str, int]]:
    group = checkout["fulfillment"]["methods"][0]["groups"][0]
    return {o["id"]: (o["title"], o["totals"][-1]["amount"]) for o in group["options"]}


# --------------------------------------------------------------------------- loading


def test_every_table_is_loaded():
    shop = load_data_dir(SHOP)

    assert [(p.id, p.price, p.inventory) for p in shop.products] == [
        ("mug", 1200, 40), ("teapot", 4200, 5), ("tea_sampler", 900, 100), ("sold_out", 9900, 0)
    ]
    assert shop.product("mug").image_url == "https://shop.example/mug.jpg"
    assert shop.product("teapot").image_url is None
    assert [(d.code, d.type, d.value, d.title) for d in shop.discounts] == [
        ("TEA15", "percentage", 15, "15% off tea things"),
        ("TWOOFF", "fixed_amount", 200, "$2.00 off"),
    ]
    assert [(p.id, p.min_subtotal, p.item_ids) for p in shop.promotions] == [
        ("big_basket", 8000, ()), ("teapot_ships_free", None, ("teapot",))
    ]
    assert [(r.id, r.country, r.price) for r in shop.shipping_rates] == [
        ("ground", "*", 450), ("air-ca", "CA", 1100), ("air-world", "*", 2000)
    ]
    ada = shop.customer("ADA@example.org")
    assert ada is not None and ada.name == "Ada Lovelace"
    assert [(a.id, a.city, a.region) for a in ada.addresses] == [
        ("home_ada", "Toronto", "ON"), ("work_ada", "Ottawa", "ON")
    ]
    assert [(i.id, i.token, i.handler_id) for i in shop.payment_instruments] == [
        ("card_ok", "success_token", "mock_payment_handler"),
        ("card_declined", "fail_token", "mock_payment_handler"),
    ]


def _broken(tmp_path: Path, name: str, text: str | None) -> Path:
    shop = tmp_path / "shop"
    shutil.copytree(SHOP, shop)
    if text is None:
        (shop / name).unlink()
    else:
        (shop / name).write_text(text, encoding="utf-8")
    return shop


BAD_DATA = [
    ("products.csv", None, "products.csv: No such file"),
    ("products.csv", "id,title,price,colour\nmug,Mug,1,red\n",
     "products.csv:1: unknown column 'colour'"),
    ("inventory.csv", "product_id\nmug\n", "inventory.csv:1: missing column 'quantity'"),
    ("products.csv", "id,title,price\nmug,Mug,1200\nteapot,Teapot,12.50\n",
     "products.csv:3: price '12.50' is not a whole number"),
    ("inventory.csv", "product_id,quantity\nmug,4\nspoon,1\n",
     "inventory.csv:3: unknown product 'spoon' (not in products.csv)"),
    ("discounts.csv", "code,type,value,description\nX,bogo,1,Buy one\n",
     "discounts.csv:2: type 'bogo' is not percentage or fixed_amount"),
    ("promotions.csv",
     "id,type,min_subtotal,eligible_item_ids,description\np,free_shipping,,mug,x\n",
     "promotions.csv:2: eligible_item_ids 'mug' is not a JSON list of product ids"),
    ("shipping_rates.csv", "id,country_code,service_level,price,title\nground,US,standard,-5,G\n",
     "shipping_rates.csv:2: price '-5' is negative"),
    ("addresses.csv",
     "id,customer_id,street_address,city,state,postal_code,country\na,nobody,1 St,X,Y,1,US\n",
     "addresses.csv:2: unknown customer 'nobody' (not in customers.csv)"),
    ("customers.csv", "id,name,email\nc1,A,a@x.org\nc2,B,A@X.org\n",
     "customers.csv:3: duplicate customer email 'a@x.org'"),
    ("payment_instruments.csv", "id,type,token,handler_id\ni,card,t,paypal\n",
     "payment_instruments.csv:2: handler_id 'paypal' is not one this merchant has"),
]


@pytest.mark.parametrize(("name", "text", "expected"), BAD_DATA)
def test_bad_data_names_the_file_and_line(tmp_path, name, text, expected):
    shop = _broken(tmp_path, name, text)

    with pytest.raises(CatalogError) as caught:
        load_data_dir(shop)

    message = str(caught.value)
    assert expected in message
    assert str(shop / name) in message
    assert "\n" not in message


def test_optional_tables_may_be_missing(tmp_path):
    shop = _broken(tmp_path, "promotions.csv", None)
    for name in ("discounts.csv", "customers.csv", "addresses.csv", "payment_instruments.csv"):
        (shop / name).unlink()

    loaded = load_data_dir(shop)

    assert loaded.promotions == loaded.discounts == loaded.customers == ()


def test_the_command_line_reports_bad_data_in_one_line(tmp_path, capsys):
    shop = _broken(tmp_path, "products.csv", "id,title,price\nmug,Mug,lots\n")

    assert main(["merchant", "--data-dir", str(shop)]) == 2

    err = capsys.readouterr().err
    where = shop / "products.csv"
    assert err == f"strabo merchant: {where}:2: price 'lots' is not a whole number\n"


def test_the_command_line_refuses_a_catalog_and_a_data_dir(capsys):
    assert main(["merchant", "--catalog", "x.json", "--data-dir", str(SHOP)]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_create_app_refuses_both():
    with pytest.raises(ValueError, match="not both"):
        create_app("x.json", data_dir=SHOP)


# ------------------------------------------------------------ prices and shipping


async def test_prices_stock_and_discounts_come_from_the_csv_files(tea: TeaShop):
    created = await tea.shopper.create(
        line("mug", 2), line("tea_sampler"), discounts={"codes": ["TEA15", "TWOOFF", "NOPE"]}
    )
    body = created.json()

    assert created.status_code == 201, body
    assert [li["item"]["price"] for li in body["line_items"]] == [1200, 900]
    assert total(body, "subtotal") == [3300]
    # 15 % of 3300, then 200 off what is left; the unknown code does nothing.
    assert total(body, "discount") == [495, 200]
    assert total(body, "total") == [3300 - 495 - 200]
    assert [a["title"] for a in body["discounts"]["applied"]] == ["15% off tea things", "$2.00 off"]
    sold_out = await tea.shopper.create(line("sold_out"))
    assert sold_out.status_code == 400 and sold_out.json()["code"] == "OUT_OF_STOCK"
    too_many = await tea.shopper.create(line("teapot", 6))
    assert too_many.json()["code"] == "OUT_OF_STOCK"


async def test_shipping_rates_depend_on_the_country(tea: TeaShop):
    created = (await tea.shopper.create(line("mug"))).json()

    canada = await shipped_to(tea, created, {"id": "d_ca", "address_country": "CA"})
    assert options(canada) == {"ground": ("Ground", 450), "air-ca": ("Air (Canada)", 1100)}
    france = await shipped_to(tea, canada, {"id": "d_fr", "address_country": "FR"})
    assert options(france) == {"ground": ("Ground", 450), "air-world": ("Air (World)", 2000)}


@pytest.mark.parametrize(
    ("items", "free"),
    [
        ([line("mug")], False),
        ([line("teapot")], True),  # an eligible item
        ([line("mug", 7)], True),  # 8400 >= 8000
        ([line("tea_sampler", 8)], False),  # 7200 < 8000
    ],
)
async def test_free_shipping_promotions(tea: TeaShop, items, free):
    created = (await tea.shopper.create(*items)).json()

    offered = options(await shipped_to(tea, created, {"id": "d", "address_country": "US"}))

    assert offered["ground"] == (("Ground (Free)", 0) if free else ("Ground", 450))
    assert offered["air-world"] == ("Air (World)", 2000)


async def test_a_chosen_rate_is_priced_into_the_totals(tea: TeaShop):
    created = (await tea.shopper.create(line("mug"))).json()
    step = await shipped_to(tea, created, {"id": "d_ca", "address_country": "CA"})
    method = {"type": "shipping", "selected_destination_id": "d_ca",
              "groups": [{"selected_option_id": "air-ca"}]}

    chosen = (await tea.shopper.update(step, fulfillment={"methods": [method]})).json()

    assert total(chosen, "fulfillment") == [1100]
    assert total(chosen, "total") == [1200 + 1100]


# ------------------------------------------------------------------ saved addresses


async def test_a_known_buyer_is_offered_the_saved_addresses(tea: TeaShop):
    created = (await tea.shopper.create(line("mug"), buyer=ADA)).json()

    opened = await tea.shopper.update(created, fulfillment={"methods": [{"type": "shipping"}]})

    destinations = opened.json()["fulfillment"]["methods"][0]["destinations"]
    assert [(d["id"], d["city"], d["postal_code"]) for d in destinations] == [
        ("home_ada", "Toronto", "M5V 2T6"), ("work_ada", "Ottawa", "K1A 0A6")
    ]


async def test_a_retyped_saved_address_keeps_its_id(tea: TeaShop):
    created = (await tea.shopper.create(line("mug"), buyer=ADA)).json()
    typed = {"street_address": "1  engine way", "address_locality": "OTTAWA",
             "address_region": "ON", "postal_code": "K1A 0A6", "address_country": "CA"}

    updated = await tea.shopper.update(
        created, fulfillment={"methods": [{"type": "shipping", "destinations": [typed]}]}
    )

    assert [d["id"] for d in updated.json()["fulfillment"]["methods"][0]["destinations"]] == [
        "work_ada"
    ]


async def test_a_new_buyers_address_is_remembered_for_the_next_checkout(tea: TeaShop):
    newcomer = {"full_name": "Grace Hopper", "email": "grace@example.org"}
    first = (await tea.shopper.create(line("mug"), buyer=newcomer)).json()
    address = {"street_address": "9 Harbor St", "address_locality": "Arlington",
               "address_region": "VA", "postal_code": "22201", "address_country": "US"}
    sent = await tea.shopper.update(
        first, fulfillment={"methods": [{"type": "shipping", "destinations": [address]}]}
    )
    given = sent.json()["fulfillment"]["methods"][0]["destinations"][0]["id"]
    stranger = (await tea.shopper.create(line("mug"), buyer={"email": "x@example.org"})).json()

    second = (await tea.shopper.create(line("mug"), buyer=newcomer)).json()
    reopened = await tea.shopper.update(second, fulfillment={"methods": [{"type": "shipping"}]})
    other = await tea.shopper.update(stranger, fulfillment={"methods": [{"type": "shipping"}]})

    assert given
    assert [d["id"] for d in reopened.json()["fulfillment"]["methods"][0]["destinations"]] == [
        given
    ]
    assert other.json()["fulfillment"]["methods"][0].get("destinations") is None


# --------------------------------------------------------------------- order update


async def placed_order(shop: TeaShop, *, agent: str | None = None) -> dict:
    shopper = Shopper(shop.client, agent=agent) if agent else shop.shopper
    created = (await shopper.create(line("mug", 2), line("teapot"), buyer=ADA)).json()
    step = await shipped_to(shop, created, {"id": "d_us", "address_country": "US"})
    method = {"type": "shipping", "selected_destination_id": "d_us",
              "groups": [{"selected_option_id": "ground"}]}
    await shopper.update(step, fulfillment={"methods": [method]})
    done = await shopper.complete(created["id"])
    assert done.status_code == 200, done.text
    order = await shop.client.get(f"/orders/{done.json()['order']['id']}", headers=headers())
    return order.json()


def now() -> str:
    return datetime.now(UTC).isoformat()


async def put_order(shop: TeaShop, order: dict, *, key: str | None = None) -> httpx.Response:
    return await shop.client.put(f"/orders/{order['id']}", json=order, headers=headers(key=key))


async def test_an_order_update_appends_events_and_adjustments(tea: TeaShop):
    order = await placed_order(tea)
    mugs, teapot = order["line_items"]
    order["fulfillment"]["events"].append({
        "id": "evt_1", "type": "shipped", "occurred_at": now(), "tracking_number": "TRK1",
        "line_items": [{"id": mugs["id"], "quantity": 2}, {"id": teapot["id"], "quantity": 1}],
    })
    order["adjustments"] = [{"id": "adj_1", "type": "refund", "occurred_at": now(),
                             "status": "pending", "amount": 500, "description": "chipped mug"}]
    order["totals"] = []  # the merchant's own fields are not the agent's to change

    updated = await put_order(tea, order)

    assert updated.status_code == 200, updated.text
    body = updated.json()
    assert [e["tracking_number"] for e in body["fulfillment"]["events"]] == ["TRK1"]
    assert [(a["id"], a["amount"], a["description"]) for a in body["adjustments"]] == [
        ("adj_1", 500, "chipped mug")
    ]
    assert [(li["quantity"]["fulfilled"], li["status"]) for li in body["line_items"]] == [
        (2, "fulfilled"), (1, "fulfilled")
    ]
    assert total(body, "total") == [1200 * 2 + 4200]
    read = await tea.client.get(f"/orders/{order['id']}", headers=headers())
    assert read.json() == body


async def test_logs_are_append_only_and_partial_shipments_show(tea: TeaShop):
    order = await placed_order(tea)
    mugs = order["line_items"][0]
    first = {"id": "evt_1", "type": "shipped", "occurred_at": now(),
             "line_items": [{"id": mugs["id"], "quantity": 1}]}
    order["fulfillment"]["events"] = [first]
    after_first = (await put_order(tea, order)).json()

    first["tracking_number"] = "rewritten"
    order["fulfillment"]["events"] = []  # leaving an entry out does not delete it
    again = await put_order(tea, order)

    assert again.status_code == 200
    assert again.json()["fulfillment"]["events"] == after_first["fulfillment"]["events"]
    assert "tracking_number" not in again.json()["fulfillment"]["events"][0]
    assert [(li["quantity"]["fulfilled"], li["status"]) for li in again.json()["line_items"]] == [
        (1, "partial"), (0, "processing")
    ]


@pytest.mark.parametrize(
    ("change", "loc", "kind"),
    [
        ({"adjustments": [{"id": "a", "type": "refund", "occurred_at": "2026-01-01T00:00:00Z",
                           "status": "INVALID"}]},
         ["body", "adjustments", 0, "status"], "literal_error"),
        ({"adjustments": {"id": "a", "amount": 1}}, ["body", "adjustments"], "list_type"),
        ({"adjustments": [{"id": "a", "type": "refund", "status": "pending"}]},
         ["body", "adjustments", 0, "occurred_at"], "missing"),
        ({"fulfillment": {"events": [{"id": "e", "type": "shipped", "occurred_at": "yesterday",
                                      "line_items": []}]}},
         ["body", "fulfillment", "events", 0, "occurred_at"], "datetime_from_date_parsing"),
        ({"fulfillment": {"events": [{"id": "e", "type": "shipped",
                                      "occurred_at": "2026-01-01T00:00:00Z"}]}},
         ["body", "fulfillment", "events", 0, "line_items"], "missing"),
    ],
)
async def test_a_bad_log_entry_is_a_422_naming_it(tea: TeaShop, change, loc, kind):
    order = await placed_order(tea)

    response = await put_order(tea, {**order, **change})

    assert response.status_code == 422, response.text
    assert [(e["loc"], e["type"]) for e in response.json()["detail"]] == [(loc, kind)]
    assert (await tea.client.get(f"/orders/{order['id']}", headers=headers())).json() == order


async def test_order_update_errors_and_replays(tea: TeaShop):
    order = await placed_order(tea)
    unknown_line = {"id": "e", "type": "shipped", "occurred_at": now(),
                    "line_items": [{"id": "nope", "quantity": 1}]}
    bad = await put_order(tea, {**order, "fulfillment": {"events": [unknown_line]}})
    assert bad.status_code == 400 and "unknown line item nope" in bad.json()["detail"]
    missing = await tea.client.put("/orders/nope", json=order, headers=headers())
    assert missing.status_code == 404
    no_key = await tea.client.put(
        f"/orders/{order['id']}", json=order,
        headers={k: v for k, v in headers().items() if k != "Idempotency-Key"},
    )
    assert no_key.status_code == 422

    refund = {"id": "adj_9", "type": "refund", "occurred_at": now(), "status": "completed"}
    first = await put_order(tea, {**order, "adjustments": [refund]}, key="k-1")
    replay = await put_order(tea, {**order, "adjustments": [refund]}, key="k-1")
    conflict = await put_order(tea, order, key="k-1")
    assert first.status_code == replay.status_code == 200
    assert replay.json() == first.json()
    assert conflict.status_code == 409


async def test_an_order_update_is_sent_to_the_agents_webhook(agent: MockAgent):
    app = create_app(data_dir=SHOP)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        shop = TeaShop(url, merchant_of(app), client, Shopper(client))
        order = await placed_order(shop, agent=agent.ucp_agent)
        refund = {"id": "adj_1", "type": "refund", "occurred_at": now(), "status": "pending"}
        await put_order(shop, {**order, "adjustments": [refund]})

    assert [e["body"]["event_type"] for e in agent.events] == ["order_placed", "order_updated"]
    assert agent.events[-1]["body"]["order"]["adjustments"][0]["id"] == "adj_1"


# ------------------------------------------------------------------------ discovery


async def test_discovery_is_valid_and_its_handler_documents_are_served(tea: TeaShop):
    profile = (await tea.client.get("/.well-known/ucp")).json()

    assert profile_problems(profile) == []
    handlers = {h["id"]: h for h in profile["payment"]["handlers"]}
    assert set(handlers) == {"shop_pay", "google_pay", "mock_payment_handler"}
    assert handlers["shop_pay"]["name"] == "com.shopify.shop_pay"
    assert [i["id"] for i in handlers["mock_payment_handler"]["config"]["instruments"]] == [
        "card_ok", "card_declined"
    ]
    for handler in handlers.values():
        for url in (handler["spec"], handler["config_schema"], *handler["instrument_schemas"]):
            assert url.startswith(tea.url)
            response = await tea.client.get(url)
            assert response.status_code == 200, url
            assert response.headers["content-type"] == "application/json"
    assert (await tea.client.get("/payment-handlers/paypal")).status_code == 404
    assert (await tea.client.get("/payment-handlers/shop_pay/other.json")).status_code == 404


def test_the_profile_checker_finds_the_reference_profiles_nulls():
    problems = profile_problems({
        "ucp": {"version": "2026-01-11", "services": {}, "capabilities": [
            {"name": "dev.ucp.shopping.checkout", "version": "2026-01-11",
             "spec": "https://ucp.dev/specification/checkout", "schema": None, "extends": None},
        ]},
    })

    assert problems == [
        "$.ucp.capabilities[0].schema: null (the schema wants a value or no key)",
        "$.ucp.capabilities[0].extends: null (the schema wants a value or no key)",
        "$.ucp.capabilities[0].schema: dev.ucp.* URLs must be on https://ucp.dev/",
        "$.ucp.capabilities[0].extends: not a reverse-domain name",
    ]


async def test_paying_with_a_stored_instruments_token(tea: TeaShop):
    order = await placed_order(tea)
    assert order["line_items"][0]["item"]["price"] == 1200
    created = (await tea.shopper.create(line("mug"))).json()
    step = await shipped_to(tea, created, {"id": "d", "address_country": "US"})
    method = {"type": "shipping", "selected_destination_id": "d",
              "groups": [{"selected_option_id": "ground"}]}
    await tea.shopper.update(step, fulfillment={"methods": [method]})

    declined = await tea.shopper.complete(created["id"], instrument("fail_token"))

    assert declined.status_code == 402
