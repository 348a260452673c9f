"""A proxy over a typed protocol: absent attributes stay off the wire, and an
answer that does not fit the types becomes the route's failure, never a crash."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pytest_httpx import HTTPXMock

from langshaw import ActionInstance, LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from strabo.proxy import ProxyAdapter, ProxyAnswerError, ProxyError, Route
from syncserver import SyncServer
from tests.conftest import FIXTURES
from tests.harness import until

ORDER = LangshawProtocol.load(FIXTURES / "lsh" / "typed" / "order.lsh")
SHOP = "http://shop.test"
ITEMS = [{"sku": "ABC-1", "qty": 2}]


class World:
    """A buyer agent and a seller proxy on one in-process SyncServer."""

    def __init__(self, exclude: tuple[str, ...] = ()) -> None:
        self.server = SyncServer.embedded([ORDER], {"buyer": ["Buyer"], "seller": ["Seller"]})
        executor = LocalExecutor(self.server)
        self.buyer = PeachAdapter("buyer", ORDER, "Buyer", executor)
        self.seller = ProxyAdapter(
            "seller", ORDER, "Seller", executor, base_url=SHOP, internal=["oid"], backoff=0.001,
            exclude=exclude, transport=httpx.AsyncHTTPTransport(),  # pytest-httpx sees httpx only
        )
        self.seen: list[ActionInstance] = []
        self.changed = asyncio.Event()
        self.errors: list[tuple[ProxyError, Route]] = []

        @self.buyer.observation()
        async def observe(action: ActionInstance, performer: str) -> None:
            self.seen.append(action)
            self.changed.set()

        @self.seller.on_error
        async def on_error(error: ProxyError, route: Route, trigger: Any) -> None:
            self.errors.append((error, route))
            self.changed.set()

    async def order(self, **bindings: Any) -> ActionInstance:
        [order] = self.buyer.initiating()
        [done] = await self.buyer.attempt([order.bind(items=ITEMS, **bindings)])
        return done

    async def wait_for(self, name: str) -> ActionInstance:
        await until(lambda: any(a.name == name for a in self.seen), self.changed)
        return next(a for a in self.seen if a.name == name)


@pytest.fixture
async def world() -> AsyncIterator[World]:
    world = World()
    async with world.server:
        yield world


def body(request: httpx.Request) -> Any:
    return json.loads(request.content)


async def test_absent_attributes_stay_off_the_wire(world: World, httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(
        method="POST", url=f"{SHOP}/orders", json={"price": 5}, is_reusable=True
    )
    world.seller.route("Order->>Accept", "POST-/orders")
    async with world.seller, world.buyer:
        await world.order()
        await world.wait_for("Accept")
        await world.order(note="gift wrap")
        await until(lambda: len([a for a in world.seen if a.name == "Accept"]) == 2, world.changed)
    first, second = httpx_mock.get_requests()
    # oid is internal, note absent, gift absent: nothing of them is sent (no null either).
    assert body(first) == {"items": ITEMS}
    assert body(second) == {"items": ITEMS, "note": "gift wrap"}


async def test_a_null_in_the_answer_for_an_optional_attribute_is_absent(
    world: World, httpx_mock: HTTPXMock
) -> None:
    httpx_mock.add_response(method="POST", url=f"{SHOP}/orders", json={"price": 5, "eta": None})
    world.seller.route("Order->>Accept", "POST-/orders")
    async with world.seller, world.buyer:
        await world.order()
        accept = await world.wait_for("Accept")
    assert accept["price"] == 5 and "eta" not in accept


async def test_an_answer_of_the_wrong_type_is_the_routes_failure(
    world: World, httpx_mock: HTTPXMock
) -> None:
    httpx_mock.add_response(method="POST", url=f"{SHOP}/orders", json={"price": "cheap"})
    world.seller.route(
        "Order->>Accept", "POST-/orders", failure="Declined",
        failure_response={"reason": "$.message"},
    )
    async with world.seller, world.buyer:
        await world.order()
        declined = await world.wait_for("Declined")
    assert declined["reason"] == (
        "Accept: the answer does not fit: 'Accept': price: \"cheap\" is not of type \"number\" "
        "(schema: /type)"
    )
    assert not any(a.name == "Accept" for a in world.seen)
    assert world.errors == []


async def test_without_a_failure_action_a_misfit_reaches_the_error_handlers(
    world: World, httpx_mock: HTTPXMock
) -> None:
    # The answer lacks price, a required number: null does not fit it either.
    httpx_mock.add_response(method="POST", url=f"{SHOP}/orders", json={"eta": 3})
    world.seller.route("Order->>Accept", "POST-/orders")
    async with world.seller, world.buyer:
        await world.order()
        await until(lambda: bool(world.errors), world.changed)
    [(error, route)] = world.errors
    assert isinstance(error, ProxyAnswerError) and error.code == "invalid_answer"
    assert error.attribute == "price" and error.path == "price"
    assert route.trigger == "Order"
    assert world.seen and not any(a.name == "Accept" for a in world.seen)


async def test_reply_answers_custom_orchestrations_through_the_policy(
    httpx_mock: HTTPXMock,
) -> None:
    """A handler of one's own answers with reply(): a bad answer is a failure."""
    world = World(exclude=("Order",))
    world.seller.route(
        "Order->>Accept", "POST-/orders", failure="Declined",
        failure_response=lambda error, trigger: {"reason": error.code},
    )

    @world.seller.observation("Order")
    async def custom(order: ActionInstance, performer: str) -> None:
        await world.seller.reply("Order", order, {**order.bindings, "price": [5]})

    async with world.server, world.seller, world.buyer:
        await world.order()
        declined = await world.wait_for("Declined")
    assert declined["reason"] == "invalid_answer"
    assert httpx_mock.get_requests() == []
