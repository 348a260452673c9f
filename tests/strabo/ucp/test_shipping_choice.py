"""The Platform chooses shipping among what the merchant offers, not ids it
hard-codes: the first destination, the cheapest option (strabo.ucp.shipping).

Against the bundled flower shop (``addr_1``, ``std-ship``) and a shop of other
ids, loaded from CSV files (``cottage``, ``loft``; ``courier``, ``parcel``):
every protocol completes, with the first destination offered and the cheapest
option chosen. IncrementalUCP's Platform picks itself, one version per step,
reading FulfillmentSet; in SimpleUCP and ResilientUCP, which give it no say
between Create and Created, the proxy picks by the same rule and Created says
what was chosen.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import LocalExecutor, PeachAdapter
from strabo import serve
from strabo.merchant import create_app, merchant_of
from strabo.ucp import shipping
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.incremental_platform import incremental_platform
from strabo.ucp.incremental_proxy import incremental_proxy
from strabo.ucp.platform_agent import platform_agent
from strabo.ucp.resilient_platform import ResilientPlatform
from strabo.ucp.resilient_proxy import resilient_proxy
from syncserver import SyncServer
from tests.conftest import load

WAIT = 20.0
FILES = {"atomic": "atomic-ucp.lsh", "incremental": "incremental-ucp.lsh",
         "resilient": "resilient-ucp.lsh"}
SHOP = {
    "products.csv": "id,title,price,image_url\nbouquet_roses,Bouquet of Red Roses,3500,\n",
    "inventory.csv": "product_id,quantity\nbouquet_roses,10\n",
    "customers.csv": "id,name,email\nc_john,John Doe,john.doe@example.com\n",
    "addresses.csv": ("id,customer_id,street_address,city,state,postal_code,country\n"
                      "cottage,c_john,7 Lake Road,Kingston,ON,K7L 3N6,CA\n"
                      "loft,c_john,2 Mill Street,Boston,MA,02118,US\n"),
    # The dearer option first in the file: the Platform must pick by price.
    "shipping_rates.csv": ("id,country_code,service_level,price,title\n"
                           "courier,CA,express,1800,Courier (Canada)\n"
                           "parcel,default,standard,700,Parcel\n"),
    "payment_instruments.csv": ("id,type,brand,last_digits,token,handler_id\n"
                                "instr_1,card,Visa,1234,success_token,mock_payment_handler\n"),
}
NODE = {"methods": [{"id": "method_1", "type": "shipping", "line_item_ids": ["line_1"],
                     "destinations": [{"id": "dest_1", "address_country": "US"},
                                      {"id": "dest_2", "address_country": "DE"}]}]}


def option(oid: str, amount: int) -> dict[str, Any]:
    return {"id": oid, "title": oid, "totals": [{"type": "subtotal", "amount": amount},
                                                 {"type": "total", "amount": amount}]}


def test_the_first_destination_then_the_cheapest_option() -> None:
    assert shipping.next_choice(NODE) == {
        "methods": [{"type": "shipping", "selected_destination_id": "dest_1"}]}
    offered = {"methods": [{**NODE["methods"][0], "selected_destination_id": "dest_1",
                            "groups": [{"id": "g", "line_item_ids": ["line_1"], "options": [
                                option("exp-ship-us", 1500), option("std-ship", 500),
                                option("slow", 500)]}]}]}
    assert shipping.next_choice(offered) == {"methods": [{
        "type": "shipping", "selected_destination_id": "dest_1",
        "groups": [{"selected_option_id": "std-ship"}]}]}  # the first of the cheapest
    offered["methods"][0]["groups"][0]["selected_option_id"] = "exp-ship-us"
    assert shipping.next_choice(offered) is None  # all chosen: the merchant's choice stands
    assert shipping.chosen(offered) == ("dest_1", ["exp-ship-us"])


def test_nothing_offered_is_nothing_to_choose() -> None:
    for fulfillment in (None, {}, {"methods": []}, "shipping",
                        {"methods": [{"type": "shipping", "destinations": []}]},
                        {"methods": [{"type": "shipping", "selected_destination_id": "d",
                                      "groups": [{"id": "g", "options": []}]}]}):
        assert shipping.next_choice(fulfillment) is None
    assert shipping.price({"id": "x"}) == float("inf")
    assert shipping.chosen(None) == (None, [])


def agents(protocol: str, url: str) -> tuple[Any, PeachAdapter, asyncio.Event]:
    executor = LocalExecutor(SyncServer.embedded(
        [load(FILES[protocol])], {"platform": ["Platform"], "business": ["Business"]}))
    if protocol == "atomic":
        return business_proxy(executor, url), *platform_agent(executor)
    if protocol == "incremental":
        return incremental_proxy(executor, url), *incremental_platform(executor)
    platform = ResilientPlatform(executor)
    return resilient_proxy(executor, url), platform, platform.done


def watch(platform: PeachAdapter) -> list[ActionInstance]:
    seen: list[ActionInstance] = []

    @platform.observation()
    async def observe(action: ActionInstance, performer: str) -> None:
        seen.append(action)

    return seen


@pytest.mark.parametrize("protocol", list(FILES))
@pytest.mark.parametrize(("shop", "destination", "chosen"), [
    pytest.param(None, "addr_1", "std-ship", id="bundled"),
    pytest.param(SHOP, "cottage", "parcel", id="other-ids"),
])
async def test_the_platform_ships_by_what_the_merchant_offers(
    protocol: str, shop: dict[str, str] | None, destination: str, chosen: str, tmp_path: Path
) -> None:
    if shop is not None:
        for name, text in shop.items():
            (tmp_path / name).write_text(text)
    app = create_app(data_dir=tmp_path) if shop else create_app()
    async with serve(app) as url:
        proxy, platform, done = agents(protocol, url)
        seen = watch(platform)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), WAIT)
            await platform.drain()
    assert seen[-1].name == "Completed", [a.name for a in seen]
    [session] = merchant_of(app).checkouts()
    [method] = session.model_dump()["fulfillment"]["methods"]
    assert method["selected_destination_id"] == destination
    assert [g["selected_option_id"] for g in method["groups"]] == [chosen]
    if protocol == "incremental":  # the Platform itself picked, one version a step
        asked = [a["fulfillment_pref"] for a in seen if a.name == "SetFulfillment"]
        assert asked[0] == shipping.ASK
        assert asked[-1]["methods"][0]["groups"] == [{"selected_option_id": chosen}]
        assert len(asked) == 3
    else:  # Created says what was chosen
        created = next(a for a in seen if a.name == "Created")
        assert shipping.chosen(created["fulfillment"]) == (destination, [chosen])


class OffersOnUpdate:
    """The merchant, except that its answer to the POST that opens a session
    offers no destinations (as the UCP reference merchant's does)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.puts = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        opening = scope["type"] == "http" and scope["method"] == "POST" and (
            scope["path"] == "/checkout-sessions")
        self.puts += scope["type"] == "http" and scope["method"] == "PUT"
        if not opening:
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def keep(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, keep)
        answer = json.loads(b"".join(chunks))
        for method in (answer.get("fulfillment") or {}).get("methods") or []:
            method.pop("destinations", None)
        body = json.dumps(answer).encode()
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": start["status"], "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def test_a_merchant_that_offers_destinations_only_on_an_update_is_asked_again() -> None:
    app = create_app()
    wrapped = OffersOnUpdate(app)
    async with serve(wrapped) as url:
        proxy, platform, done = agents("atomic", url)
        seen = watch(platform)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), WAIT)
            await platform.drain()
    assert seen[-1].name == "Completed"
    assert wrapped.puts == 3  # the method again, the destination, the option
    created = next(a for a in seen if a.name == "Created")
    assert shipping.chosen(created["fulfillment"]) == ("addr_1", ["std-ship"])
