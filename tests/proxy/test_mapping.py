"""Field mapping, headers, failures, retries and idempotency keys, against a
merchant mocked at the HTTP level (pytest-httpx)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pytest_httpx import HTTPXMock

from langshaw import ActionInstance
from peach import LocalExecutor, PeachAdapter
from strabo.proxy import ProxyAdapter, ProxyError, ProxyHTTPError, ProxyRequest, Route
from syncserver import SyncServer
from tests.conftest import paper
from tests.harness import until

SIMPLE = paper("atomic-ucp.lsh")  # untyped: the null conventions are tested here
MERCHANT = "http://merchant.test"
CREATE = dict(
    line_items=[{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}],
    currency="USD",
    buyer={"email": "a@b.c"},
    payment_pref={},
    discount_codes={"codes": ["10OFF"]},
    fulfillment_pref=None,
)
CREATED = dict(id="chk/1 x", totals=[], payment={}, discounts=None, fulfillment=None)


def hook(request: ProxyRequest) -> dict[str, str]:
    return {
        "UCP-Agent": 'profile="https://p.example"',
        "Authorization": "Bearer SECRET-123",
        "Request-Id": f"r-{request.attempt}",
    }


class Shop:
    """A platform and a proxy on one in-process SyncServer."""

    def __init__(self, **proxy_options: Any) -> None:
        self.server = SyncServer.embedded(
            [SIMPLE], {"platform": ["Platform"], "business": ["Business"]}
        )
        self.executor = LocalExecutor(self.server)
        self.platform = PeachAdapter("platform", SIMPLE, "Platform", self.executor)
        options = {"internal": ["cid"], "header_hook": hook, "backoff": 0.001, **proxy_options}
        self.proxy = self.new_proxy(**options)
        self.changed = asyncio.Event()
        self.seen: list[ActionInstance] = []

        @self.platform.observation()
        async def observe(action: ActionInstance, performer: str) -> None:
            self.seen.append(action)
            self.changed.set()

    def new_proxy(self, **options: Any) -> ProxyAdapter:
        # pytest-httpx answers for the merchant, and it sees httpx only: a transport
        # makes the proxy use httpx instead of its lean client.
        options.setdefault("transport", httpx.AsyncHTTPTransport())
        return ProxyAdapter(
            "business", SIMPLE, "Business", self.executor, base_url=MERCHANT, **options
        )

    def names(self) -> list[str]:
        return [a.name for a in self.seen]

    async def wait_for(self, name: str) -> ActionInstance:
        await until(lambda: name in self.names(), self.changed)
        return next(a for a in self.seen if a.name == name)

    async def created(self) -> ActionInstance:
        """A checkout up to Created, without HTTP (Create is excluded or unrouted)."""
        [create] = await self.platform.attempt([self.platform.initiating()[0].bind(**CREATE)])
        await self.proxy.attempt(
            [self.proxy.build_action("Created", {**create.bindings, **CREATED})]
        )
        return create


@pytest.fixture
async def shop() -> AsyncIterator[Shop]:
    shop = Shop(exclude=["Create"])
    async with shop.server:
        yield shop


def body(request: httpx.Request) -> Any:
    return json.loads(request.content) if request.content else None


async def test_identity_mapping_internal_nulls_and_path_parameters(
    shop: Shop, httpx_mock: HTTPXMock
) -> None:
    httpx_mock.add_response(
        method="POST",
        url=f"{MERCHANT}/checkout-sessions/chk%2F1%20x/complete",
        json={"id": "chk/1 x", "order": {"id": "o-1"}, "status": "completed"},
    )
    shop.proxy.route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete")
    async with shop.proxy, shop.platform:
        create = await shop.created()
        complete = next(f for f in shop.platform.enabled(create.keys) if f.name == "Complete")
        await shop.platform.attempt(
            [complete.bind(payment_data={"token": "t", "extra": None}, risk_signals=None)]
        )
        completed = await shop.wait_for("Completed")
    [request] = httpx_mock.get_requests()
    # cid is internal, Created is the protocol's own, risk_signals is null: none on the wire.
    # Nulls inside a value are the value's business and stay.
    assert body(request) == {"id": "chk/1 x", "payment_data": {"token": "t", "extra": None}}
    assert completed["order"] == {"id": "o-1"}
    assert request.headers["UCP-Agent"] == 'profile="https://p.example"'
    assert request.headers["Request-Id"] == "r-1"
    assert len(request.headers["Idempotency-Key"]) == 36


async def test_explicit_and_nested_mappings(httpx_mock: HTTPXMock) -> None:
    shop = Shop()
    httpx_mock.add_response(
        method="POST",
        url=f"{MERCHANT}/checkout-sessions",
        status_code=201,
        json={
            "id": "chk_9",
            "summary": {"totals": [{"type": "total", "amount": 5}]},
            "payment": {"handlers": [{"id": "shop_pay"}]},
        },
    )
    shop.proxy.route(
        "Create->>Created",
        "POST-/checkout-sessions",
        request={
            "discount_codes": "$.discounts.codes[0]",
            "payment_pref": "$.payment",
            "buyer": None,
        },
        response={"totals": "$.summary.totals", "payment": "$.payment.handlers[0]"},
    )
    async with shop.server, shop.proxy, shop.platform:
        await shop.platform.attempt([shop.platform.initiating()[0].bind(**CREATE)])
        created = await shop.wait_for("Created")
    [request] = httpx_mock.get_requests()
    assert body(request) == {
        "line_items": CREATE["line_items"],
        "currency": "USD",
        "discounts": {"codes": [{"codes": ["10OFF"]}]},
        "payment": {},
    }  # buyer mapped to nothing; fulfillment_pref null
    assert created["id"] == "chk_9"
    assert created["totals"] == [{"type": "total", "amount": 5}]
    assert created["payment"] == {"id": "shop_pay"}
    assert created["discounts"] is None and created["fulfillment"] is None  # absent: null


@pytest.mark.parametrize(
    ("failure_response", "expected"),
    [
        (
            None,
            {"status": 400, "code": "INVALID_REQUEST", "message": "Product pink_wumpus not found"},
        ),
        ({"reason": "$.message"}, "Product pink_wumpus not found"),
    ],
)
async def test_an_error_maps_to_the_failure_action(
    httpx_mock: HTTPXMock, failure_response: dict | None, expected: Any
) -> None:
    shop = Shop()
    httpx_mock.add_response(
        method="POST",
        url=f"{MERCHANT}/checkout-sessions",
        status_code=400,
        json={"detail": "Product pink_wumpus not found", "code": "INVALID_REQUEST"},
    )
    shop.proxy.route(
        "Create->>Created",
        "POST-/checkout-sessions",
        failure="Failed",
        failure_response=failure_response,
    )
    async with shop.server, shop.proxy, shop.platform:
        await shop.platform.attempt([shop.platform.initiating()[0].bind(**CREATE)])
        failed = await shop.wait_for("Failed")
    assert failed["reason"] == expected
    assert len(httpx_mock.get_requests()) == 1  # a 400 is not retried


async def test_an_unreachable_merchant_maps_to_the_failure_action_after_retries(
    httpx_mock: HTTPXMock,
) -> None:
    shop = Shop(retries=2)
    for _ in range(3):
        httpx_mock.add_exception(httpx.ConnectError("connection refused"))
    shop.proxy.route("Create->>Created", "POST-/checkout-sessions", failure="Failed")
    async with shop.server, shop.proxy, shop.platform:
        await shop.platform.attempt([shop.platform.initiating()[0].bind(**CREATE)])
        failed = await shop.wait_for("Failed")
    requests = httpx_mock.get_requests()
    assert len(requests) == 3
    assert len({r.headers["Idempotency-Key"] for r in requests}) == 1
    assert failed["reason"]["code"] == "unreachable"
    assert "no answer (cannot connect to merchant.test: ConnectError: connection refused)" in (
        failed["reason"]["message"]
    )


async def test_without_a_failure_action_the_error_hook_hears_it(
    shop: Shop, httpx_mock: HTTPXMock, caplog: pytest.LogCaptureFixture
) -> None:
    httpx_mock.add_response(
        method="POST",
        status_code=402,
        json={"detail": "Payment declined", "code": "INSUFFICIENT_FUNDS"},
    )
    shop.proxy.route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete")
    heard: list[tuple[ProxyError, Route, ActionInstance | None]] = []
    told = asyncio.Event()

    @shop.proxy.on_error
    async def on_error(error: ProxyError, route: Route, trigger: ActionInstance | None) -> None:
        heard.append((error, route, trigger))
        told.set()

    async with shop.proxy, shop.platform:
        create = await shop.created()
        complete = next(f for f in shop.platform.enabled(create.keys) if f.name == "Complete")
        await shop.platform.attempt(
            [complete.bind(payment_data={"token": "fail"}, risk_signals={})]
        )
        await asyncio.wait_for(told.wait(), 5)
        await shop.proxy.drain()
        assert "Completed" not in shop.names()  # the enactment is left as it is
    [(error, route, trigger)] = heard
    assert isinstance(error, ProxyHTTPError)
    assert (error.status, error.code, error.detail) == (
        402,
        "INSUFFICIENT_FUNDS",
        "Payment declined",
    )
    assert route.trigger == "Complete" and trigger is not None and trigger.name == "Complete"
    assert (
        "Complete->>Completed POST /checkout-sessions/{id}/complete failed and SimpleUCP "
        "has no action to say so: 402 Payment declined" in caplog.text
    )


@pytest.mark.parametrize(
    ("answers", "tries"),
    [
        ([{"status_code": 503}, {"status_code": 200, "json": {"order": {}}}], 2),
        (
            [
                {"status_code": 429, "headers": {"Retry-After": "0"}},
                {"status_code": 200, "json": {}},
            ],
            2,
        ),
        ([{"status_code": 500}, {"status_code": 502}, {"status_code": 200, "json": {}}], 3),
    ],
)
async def test_retries_reuse_the_idempotency_key(
    shop: Shop, httpx_mock: HTTPXMock, answers: list[dict], tries: int
) -> None:
    for answer in answers:
        httpx_mock.add_response(method="POST", **answer)
    shop.proxy.route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete")
    async with shop.proxy, shop.platform:
        create = await shop.created()
        complete = next(f for f in shop.platform.enabled(create.keys) if f.name == "Complete")
        await shop.platform.attempt([complete.bind(payment_data={}, risk_signals={})])
        await shop.wait_for("Completed")
    requests = httpx_mock.get_requests()
    assert len(requests) == tries
    assert len({r.headers["Idempotency-Key"] for r in requests}) == 1
    assert [r.headers["Request-Id"] for r in requests] == [f"r-{i}" for i in range(1, tries + 1)]


async def test_keys_are_stable_per_step_and_across_restarts(httpx_mock: HTTPXMock) -> None:
    """Each request of an orchestration has its own key; handling the same trigger
    again (a restarted proxy resuming it) reuses them, so nothing is done twice."""
    shop = Shop(exclude=["Create"])
    httpx_mock.add_response(
        method="POST", url=f"{MERCHANT}/s", json={"id": "chk"}, is_reusable=True
    )
    httpx_mock.add_response(
        method="PUT", url=f"{MERCHANT}/s/chk", json={"id": "chk"}, is_reusable=True
    )
    gate = asyncio.Event()
    handled = asyncio.Event()

    def orchestrate(proxy: ProxyAdapter, answer: bool) -> Callable[..., Any]:
        proxy.route("Create->>Created", "POST-/s")
        proxy.route("Update", "PUT-/s/{id}")

        @proxy.observation("Create")
        async def on_create(action: ActionInstance, performer: str) -> None:
            session = await proxy.request("Create", action.bindings)
            await proxy.request("Update", {**action.bindings, "id": session["id"]})
            await proxy.request("Update", {**action.bindings, "id": session["id"]})
            handled.set()
            if answer:
                await proxy.attempt([proxy.build_action("Created", {**action.bindings, **CREATED})])
            else:
                await gate.wait()  # the proxy "dies" before answering

        return on_create

    async with shop.server:
        orchestrate(shop.proxy, answer=False)
        async with shop.platform:
            async with shop.proxy:
                await shop.platform.attempt([shop.platform.initiating()[0].bind(**CREATE)])
                await asyncio.wait_for(handled.wait(), 5)
                # It dies: its handler, still waiting, is cut off (not given the
                # 5 s grace of a stop).
                await shop.proxy.stop(grace=0)
            first = [r.headers["Idempotency-Key"] for r in httpx_mock.get_requests()]
            handled.clear()
            restarted = shop.new_proxy(internal=["cid"], header_hook=hook, exclude=["Create"])
            orchestrate(restarted, answer=True)
            async with restarted:  # resumes the Create still waiting for its answer
                await shop.wait_for("Created")
    keys = [r.headers["Idempotency-Key"] for r in httpx_mock.get_requests()]
    assert len(first) == 3 and len(set(first)) == 3  # POST, PUT #0, PUT #1: three keys
    assert keys == first + first


async def test_credentials_from_the_hook_are_never_logged_nor_bound(
    shop: Shop, httpx_mock: HTTPXMock, caplog: pytest.LogCaptureFixture
) -> None:
    httpx_mock.add_response(method="POST", status_code=503)
    httpx_mock.add_response(method="POST", json={"order": {"id": "o"}})
    shop.proxy.route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete")
    with caplog.at_level(logging.DEBUG):
        async with shop.proxy, shop.platform:
            create = await shop.created()
            complete = next(f for f in shop.platform.enabled(create.keys) if f.name == "Complete")
            await shop.platform.attempt([complete.bind(payment_data={}, risk_signals={})])
            await shop.wait_for("Completed")
            history = shop.platform.history(create.keys)
    assert "retrying POST" in caplog.text  # the retry was logged...
    assert "SECRET-123" not in caplog.text  # ... without the headers
    assert "SECRET-123" not in json.dumps([i.bindings for _, i, _ in history])
    assert httpx_mock.get_requests()[0].headers["Authorization"] == "Bearer SECRET-123"


async def test_request_outside_a_handler_needs_keys_or_an_explicit_key(
    shop: Shop, httpx_mock: HTTPXMock
) -> None:
    from strabo.proxy import RouteError

    httpx_mock.add_response(
        method="GET", url=f"{MERCHANT}/s/chk", json={"id": "chk"}, is_reusable=True
    )
    shop.proxy.route("Get", "GET-/s/{id}")
    async with shop.proxy:
        with pytest.raises(RouteError, match="needs the enactment's keys"):
            await shop.proxy.request("Get", {"id": "chk"})
        assert await shop.proxy.request("Get", {"id": "chk", "cid": "c1"}) == {"id": "chk"}
        assert await shop.proxy.request("Get", {"id": "chk"}, idempotency_key="k") == {"id": "chk"}
    first, second = httpx_mock.get_requests()
    assert first.content == b""  # a GET has no body
    assert second.headers["Idempotency-Key"] == "k"
