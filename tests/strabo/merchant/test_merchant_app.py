"""The app as a whole: discovery, isolation, sessions' life cycle, webhooks, catalogs."""

from __future__ import annotations

import json

import httpx
import pytest

from strabo.merchant import CatalogError, create_app, load_catalog, merchant_of
from strabo.serving import serve

from .conftest import SIMULATION_SECRET, MockAgent, Shop
from .shopper import Shopper, headers, line


async def test_discovery_advertises_the_endpoint_the_client_used(shop: Shop):
    profile = (await shop.client.get("/.well-known/ucp")).json()

    assert profile["ucp"]["services"]["dev.ucp.shopping"]["rest"]["endpoint"] == shop.url + "/"
    assert [h["id"] for h in profile["payment"]["handlers"]] == [
        "shop_pay", "google_pay", "mock_payment_handler"
    ]
    assert {c["name"] for c in profile["ucp"]["capabilities"]} >= {
        "dev.ucp.shopping.checkout", "dev.ucp.shopping.fulfillment", "dev.ucp.shopping.discount"
    }


async def test_a_configured_base_url_is_used_for_discovery_and_orders():
    app = create_app(base_url="https://shop.example/ucp/")
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        profile = (await client.get("/.well-known/ucp")).json()
        ready = await Shopper(client).ship_ready()
        done = (await Shopper(client).complete(ready["id"])).json()

    endpoint = profile["ucp"]["services"]["dev.ucp.shopping"]["rest"]["endpoint"]
    assert endpoint == "https://shop.example/ucp/"
    assert done["order"]["permalink_url"].startswith("https://shop.example/ucp/orders/")


async def test_two_apps_share_nothing():
    one, two = create_app(), create_app()
    async with serve(one) as url, httpx.AsyncClient(base_url=url) as client:
        created = (await Shopper(client).create()).json()

    assert merchant_of(one).checkout(created["id"]) is not None
    assert merchant_of(two).checkout(created["id"]) is None
    assert merchant_of(one).shop_id != merchant_of(two).shop_id


async def test_cancel_answers_the_core_shape_and_get_the_full_one(shop: Shop):
    created = (await shop.shopper.create()).json()

    canceled = (await shop.shopper.cancel(created["id"])).json()
    read = (await shop.shopper.get(created["id"])).json()

    assert canceled["status"] == read["status"] == "canceled"
    # The extensions' fields (ap2, fulfillment and platform are unset, so absent).
    assert set(read) - set(canceled) == {"discounts"}
    assert "consent" not in canceled["buyer"]
    for action in (
        shop.shopper.cancel(created["id"]),
        shop.shopper.update(created),
        shop.shopper.complete(created["id"]),
    ):
        refused = await action
        assert refused.status_code == 409
        assert refused.json()["code"] == "CHECKOUT_NOT_MODIFIABLE"


async def test_unknown_ids_are_404(shop: Shop):
    for response in (
        await shop.shopper.get("nope"),
        await shop.shopper.cancel("nope"),
        await shop.shopper.complete("nope"),
    ):
        assert response.status_code == 404
        assert response.json() == {
            "detail": "Checkout session not found", "code": "RESOURCE_NOT_FOUND"
        }
    order = await shop.client.get("/orders/nope", headers=headers())
    assert order.json() == {"detail": "Order not found", "code": "RESOURCE_NOT_FOUND"}


async def test_a_failed_update_leaves_the_session_as_it_was(shop: Shop):
    created = (await shop.shopper.create(line("pot_ceramic", 2))).json()
    before = shop.merchant.checkout(created["id"])

    unknown = await shop.shopper.update(created, line_items=[line("pink_wumpus")])
    sold_out = await shop.shopper.update(created, line_items=[line("gardenias")])
    foreign = await shop.shopper.update(created, currency="EUR")

    assert unknown.json() == {"detail": "Product pink_wumpus not found", "code": "INVALID_REQUEST"}
    assert sold_out.json() == {
        "detail": "Insufficient stock for item gardenias", "code": "OUT_OF_STOCK"
    }
    assert foreign.status_code == 400
    assert shop.merchant.checkout(created["id"]) == before


async def test_the_path_id_wins_over_the_body_id(shop: Shop):
    created = (await shop.shopper.create()).json()
    body = {
        "id": "some-other-id",
        "line_items": [line("pot_ceramic")],
        "currency": "USD",
        "payment": {},
    }

    updated = await shop.client.put(
        f"/checkout-sessions/{created['id']}", json=body, headers=headers()
    )

    assert updated.status_code == 200
    assert updated.json()["id"] == created["id"]
    assert shop.merchant.checkout("some-other-id") is None


async def test_line_items_without_a_title_get_the_reference_500(shop: Shop):
    untitled = {"item": {"id": "bouquet_roses"}, "quantity": 1}
    created = (await shop.shopper.create()).json()

    on_create = await shop.shopper.create(untitled)
    on_update = await shop.shopper.update(created, line_items=[untitled])

    for response in (on_create, on_update):
        assert response.status_code == 500
        assert response.text == "Internal Server Error"
    assert len(shop.merchant.checkouts()) == 1


async def test_a_client_chosen_id_replaces_an_open_session_only(shop: Shop):
    first = await shop.shopper.create(id="my-checkout")
    second = await shop.shopper.create(line("bouquet_roses", 3), id="my-checkout")
    assert (first.status_code, second.status_code) == (201, 201)
    assert shop.merchant.checkout("my-checkout").line_items[0].quantity == 3

    await shop.shopper.cancel("my-checkout")
    third = await shop.shopper.create(id="my-checkout")
    assert third.status_code == 409
    assert third.json()["detail"] == "Cannot replace checkout in state 'canceled'"


async def test_order_events_reach_the_agent_webhook(shop: Shop, agent: MockAgent):
    shopper = Shopper(shop.client, agent=agent.ucp_agent)
    ready = await shopper.ship_ready()
    assert ready["platform"] == {"webhook_url": f"{agent.url}/webhook"}

    done = (await shopper.complete(ready["id"])).json()
    assert [e["body"]["event_type"] for e in agent.events] == ["order_placed"]
    placed = agent.events[0]["body"]
    assert placed["checkout_id"] == ready["id"]
    assert placed["order"]["id"] == done["order"]["id"]

    ship = f"/testing/simulate-shipping/{done['order']['id']}"
    refused = await shop.client.post(ship, headers=headers() | {"Simulation-Secret": "wrong"})
    assert (refused.status_code, refused.json()) == (403, {"detail": "Invalid Simulation Secret"})
    shipped = await shop.client.post(
        ship, headers=headers() | {"Simulation-Secret": SIMULATION_SECRET}
    )
    assert shipped.json() == {"status": "shipped"}
    assert [e["body"]["event_type"] for e in agent.events] == ["order_placed", "order_shipped"]
    assert agent.events[1]["body"]["order"]["fulfillment"]["events"][0]["type"] == "shipped"
    assert shop.merchant.order(done["order"]["id"]).fulfillment.events[0].type == "shipped"


async def test_no_webhook_without_a_profile_that_declares_one(shop: Shop, agent: MockAgent):
    ready = await shop.shopper.ship_ready()
    done = (await shop.shopper.complete(ready["id"])).json()

    assert "platform" not in done
    assert agent.events == []


async def test_a_catalog_file_replaces_the_shop(tmp_path):
    data = json.loads(load_catalog().model_dump_json())
    data["products"] = [{"id": "cactus", "title": "Cactus", "price": 999, "inventory": 1}]
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(data))
    app = create_app(path)

    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        shopper = Shopper(client)
        cactus = await shopper.create(line("cactus"))
        roses = await shopper.create(line("bouquet_roses"))
        two = await shopper.create(line("cactus", 2))

    assert cactus.json()["totals"][-1] == {"type": "total", "amount": 999}
    assert roses.status_code == 400
    assert two.json()["code"] == "OUT_OF_STOCK"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read catalog"),
        ("{", "is not valid JSON"),
        ('{"products": [{"id": "x"}]}', "is invalid at products.0.title"),
        ('{"products": [], "colour": "red"}', "is invalid at colour"),
    ],
)
def test_unusable_catalogs_raise_a_one_line_error(tmp_path, content, message):
    path = tmp_path / "catalog.json"
    if content is not None:
        path.write_text(content)

    with pytest.raises(CatalogError, match=message) as raised:
        create_app(path)
    assert "\n" not in str(raised.value)


def test_merchant_of_refuses_other_apps():
    from starlette.applications import Starlette

    with pytest.raises(TypeError):
        merchant_of(Starlette())
