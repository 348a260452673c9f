"""Typed and optional attributes from bind() to the wire, on both executors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from langshaw import ActionInstance, LangshawProtocol
from peach import ActionRejected, BindError, FeasibleAction, PeachAdapter
from syncserver import SyncServer
from tests.conftest import FIXTURES
from tests.harness import Harness

ORDER = LangshawProtocol.load(FIXTURES / "lsh" / "typed" / "order.lsh")
AGENTS = {"buyer": ["Buyer"], "seller": ["Seller"]}
ITEMS = [{"sku": "ABC-1", "qty": 2}]
BASE = "/mas/default/protocols/TypedOrder"


@pytest.fixture(params=["local", "http"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def find(adapter: PeachAdapter, name: str, keys: Any = None) -> FeasibleAction:
    [found] = [f for f in adapter.enabled(keys) if f.name == name]
    return found


async def test_bind_refuses_a_wrong_type_naming_the_attribute_and_the_path(kind: str) -> None:
    async with Harness(kind, [ORDER], AGENTS) as h:
        buyer = h.adapter("buyer", "Buyer")
        async with buyer:
            order = find(buyer, "Order")
            assert order.optional == ("note", "gift")
            with pytest.raises(BindError) as caught:
                order.bind(items=[{"sku": "ABC-1", "qty": "2"}])
            assert caught.value.attribute == "items" and caught.value.path == "items[0].qty"
            assert str(caught.value) == (
                "'Order': items[0].qty: \"2\" is not of type \"integer\" "
                "(schema: /$defs/line/properties/qty/type)"
            )
            with pytest.raises(BindError) as caught:
                order.bind(items=ITEMS, note=None)  # null is a value, not a string
            assert caught.value.path == "note"
            with pytest.raises(BindError, match="oid: 12 is not of type"):
                order.bind(oid=12, items=ITEMS)  # a key of type string
            # Required attributes stay required; optional ones may be left out.
            with pytest.raises(BindError, match="Order needs 'items' bound"):
                order.bind()
            instance = order.bind(items=ITEMS)
            assert "note" not in instance and instance.get("note") is None
            assert set(instance.bindings) == {"oid", "items"}
            # No JSON value at all (Python's json module reads NaN, Infinity): the
            # path says where, as for a type error, so a proxy treats it as an
            # answer that does not fit rather than as its own bug.
            with pytest.raises(BindError) as caught:
                order.bind(items=[{"sku": "ABC-1", "qty": float("nan")}])
            assert caught.value.path == "items[0].qty"
            assert "items[0].qty is nan, not a JSON number" in str(caught.value)


async def test_the_server_refuses_a_wrong_type_with_rule_type_and_the_path(kind: str) -> None:
    async with Harness(kind, [ORDER], AGENTS) as h:
        buyer = h.adapter("buyer", "Buyer")
        async with buyer:
            # An instance built by hand skips bind(): the server checks it anyway.
            bad = ActionInstance(ORDER.action("Order"), {"oid": "o1", "items": []})
            with pytest.raises(ActionRejected) as caught:
                await buyer.attempt([bad])
            violation = caught.value.violation
            assert violation.rule == "type" and violation.attribute == "items"
            assert violation.path == "items"
            assert "[] has less than 1 item" in violation.message
            assert buyer.enactments() == []


async def test_over_http_a_wrong_type_is_a_422_with_the_path() -> None:
    async with Harness("http", [ORDER], AGENTS) as h, h.client("buyer") as client:
        body = {"instances": [{"action": "Order", "bindings": {
            "oid": "o1", "items": [{"sku": "ABC-1", "qty": 1}, {"sku": "ABC-2", "qty": -1}]}}]}
        response = await client.post(f"{BASE}/attempts", json=body)
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["code"] == "type" and error["rule"] == "type"
        assert error["attribute"] == "items" and error["path"] == "items[1].qty"
        assert "-1 is less than the minimum of 1" in error["message"]
        # Absent is accepted; null for a typed optional attribute is not.
        body["instances"][0]["bindings"] = {"oid": "o1", "items": ITEMS, "note": None}
        response = await client.post(f"{BASE}/attempts", json=body)
        assert response.status_code == 422 and response.json()["error"]["path"] == "note"
        body["instances"][0]["bindings"] = {"oid": "o1", "items": ITEMS}
        response = await client.post(f"{BASE}/attempts", json=body)
        assert response.status_code == 200, response.text
        response = await client.get(f"{BASE}/enactment", params={"oid": "o1"})
        [entry] = response.json()["instances"]
        assert entry["bindings"] == {"oid": "o1", "items": ITEMS}
        [accept, _declined] = response.json()["enabled"]["Seller"]
        assert accept["to_bind"] == ["price", "eta"]


async def test_absent_reaches_other_agents_as_absent_and_holds(kind: str) -> None:
    async with Harness(kind, [ORDER], AGENTS) as h:
        buyer, seller = h.adapter("buyer", "Buyer"), h.adapter("seller", "Seller")
        seen: list[ActionInstance] = []
        observed = asyncio.Event()

        @seller.observation("Order")
        async def on_order(instance: ActionInstance, performer: str) -> None:
            seen.append(instance)
            observed.set()

        async with buyer, seller:
            [order] = await buyer.attempt([find(buyer, "Order").bind(items=ITEMS, gift=None)])
            await asyncio.wait_for(observed.wait(), 5)
            [received] = seen
            assert "note" not in received and received["gift"] is None  # absent vs null
            keys = order.keys
            accept = find(seller, "Accept", keys)
            assert accept.to_bind == ("price", "eta") and accept.optional == ("eta",)
            await seller.attempt([accept.bind(price=9.5)])
            await buyer.sync()
            await buyer.attempt([find(buyer, "Pay", keys).bind(amount=9.5)])
            await seller.sync()
            delivered = find(seller, "Delivered", keys)
            assert delivered.absent == ("note",) and "note" not in delivered.fixed
            with pytest.raises(BindError, match="'note' was left absent here"):
                delivered.bind(note="late")
            with pytest.raises(BindError, match="'note' was left absent in this enactment"):
                seller.build_action("Delivered", {**keys, "note": "late"})
            [done] = await seller.attempt([delivered.bind()])
            assert "note" not in done
            assert seller.is_complete(keys)


async def test_absence_survives_a_restart_on_sqlite(tmp_path: Path) -> None:
    db = str(tmp_path / "typed.db")
    async with SyncServer.embedded([ORDER], AGENTS, store=db) as server:
        order = ActionInstance(ORDER.action("Order"), {"oid": "o1", "items": ITEMS})
        await server.attempt("default", "TypedOrder", server.agent("default", "buyer"), [order])
    async with SyncServer.embedded([ORDER], AGENTS, store=db) as again:
        [batch] = await again.read("default", "TypedOrder", again.agent("default", "buyer"), 0, 10)
        [entry] = batch.entries
        assert entry.instance.bindings == {"oid": "o1", "items": ITEMS}
        accept = ActionInstance(ORDER.action("Accept"), {"oid": "o1", "Order": True, "price": 1})
        await again.attempt("default", "TypedOrder", again.agent("default", "seller"), [accept])
        pay = ActionInstance(ORDER.action("Pay"), {"oid": "o1", "Accept": True, "amount": 1})
        await again.attempt("default", "TypedOrder", again.agent("default", "buyer"), [pay])
        late = ActionInstance(
            ORDER.action("Delivered"), {"oid": "o1", "Pay": True, "note": "late"}
        )
        from syncserver.errors import Rejected

        with pytest.raises(Rejected, match="'note' was left absent here"):
            await again.attempt("default", "TypedOrder", again.agent("default", "seller"), [late])
