"""The 2026-04-08 MUST rules of overview.md a merchant serving 2026-04-08 keeps.

* *Response Capability Selection*: a checkout answer lists the capabilities
  negotiated with the platform's profile (the intersection) that checkout uses,
  the checkout capability and its extensions (AP2 among them when negotiated);
  an order answer lists the order capability, not the checkout one.
* *Error Handling* and *Profile Requirements*: a platform profile the merchant
  cannot fetch is ``424 profile_unreachable``; a missing, malformed, non-HTTPS
  or unresolvable profile URL ``400 invalid_profile_url``; a profile that is
  not JSON, or not a profile, ``422 profile_malformed``. Nothing is created.

The platform profiles are served by a real server on loopback; the merchant
fetches them over HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from strabo.merchant import create_app, merchant_of
from strabo.merchant.merchant import Merchant
from strabo.serving import free_port, serve
from strabo.ucpwire.ap2 import CAPABILITY as AP2

from .shopper import Shopper, instrument

NEW, OLD = "2026-04-08", "2026-01-11"
CHECKOUT = "dev.ucp.shopping.checkout"
DISCOUNT = "dev.ucp.shopping.discount"
FULFILLMENT = "dev.ucp.shopping.fulfillment"
ORDER = "dev.ucp.shopping.order"
ROSES = [{"item": {"id": "bouquet_roses"}, "quantity": 1}]


def declare(*names: str, version: str = NEW) -> dict[str, Any]:
    """A 2026-04-08 platform profile declaring ``names`` (extensions extend checkout)."""
    capabilities = {name: [{"version": version, "spec": "https://ucp.dev/s",
                            "schema": "https://ucp.dev/s.json",
                            **({} if name in (CHECKOUT, ORDER) else {"extends": CHECKOUT})}]
                    for name in names}
    return {"ucp": {"version": NEW, "capabilities": capabilities, "payment_handlers": {}}}


PROFILES: dict[str, Any] = {
    "all": declare(CHECKOUT, DISCOUNT, FULFILLMENT, ORDER),
    "checkout": declare(CHECKOUT),
    "discount": declare(CHECKOUT, DISCOUNT),
    "ap2": declare(CHECKOUT, AP2),
    "old-versions": declare(CHECKOUT, DISCOUNT, version=OLD),
    "orphans": declare(DISCOUNT, FULFILLMENT),
}


@dataclass
class Platform:
    """Platform profiles on loopback: ``/p/{name}`` one of :data:`PROFILES`,
    ``/broken`` a 500, ``/moved`` a redirect, ``/text`` no JSON, ``/odd`` JSON
    with no ``ucp.version``."""

    url: str = ""
    fetched: list[str] = field(default_factory=list)

    def agent(self, path: str) -> str:
        return f'profile="{self.url}/{path}"'

    def app(self) -> Starlette:
        async def profile(request: Request) -> Response:
            self.fetched.append(request.url.path)
            return JSONResponse(PROFILES[request.path_params["name"]])

        async def broken(request: Request) -> Response:
            return PlainTextResponse("down", status_code=500)

        async def moved(request: Request) -> Response:
            return RedirectResponse(f"{self.url}/p/all", status_code=302)

        async def text(request: Request) -> Response:
            return PlainTextResponse("not json")

        async def odd(request: Request) -> Response:
            return JSONResponse({"ucp": {"capabilities": {}}})

        return Starlette(routes=[Route("/p/{name}", profile), Route("/broken", broken),
                                 Route("/moved", moved), Route("/text", text),
                                 Route("/odd", odd)])


@dataclass
class Shop:
    url: str
    client: httpx.AsyncClient
    merchant: Merchant
    platform: Platform

    async def create(self, agent: str, key: str = "k1") -> httpx.Response:
        return await self.client.post("/checkout-sessions", json={"line_items": ROSES},
                                      headers={"UCP-Agent": agent, "Request-Id": "r",
                                               "Idempotency-Key": key})


@pytest.fixture
async def platform() -> AsyncIterator[Platform]:
    mock = Platform()
    async with serve(mock.app()) as url:
        mock.url = url
        yield mock


async def new_shop(platform: Platform, **options: Any) -> AsyncIterator[Shop]:
    app = create_app(ucp_version=NEW, **options)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield Shop(url, client, merchant_of(app), platform)


@pytest.fixture
async def shop(platform: Platform) -> AsyncIterator[Shop]:
    async for s in new_shop(platform):
        yield s


@pytest.fixture
async def ap2_shop(platform: Platform) -> AsyncIterator[Shop]:
    async for s in new_shop(platform, ap2=True):
        yield s


# ------------------------------------------------------------ capabilities listed


@pytest.mark.parametrize(("profile", "listed"), [
    ("all", {CHECKOUT: {}, DISCOUNT: {"extends": CHECKOUT},
             FULFILLMENT: {"extends": CHECKOUT}}),
    ("discount", {CHECKOUT: {}, DISCOUNT: {"extends": CHECKOUT}}),
    ("checkout", {CHECKOUT: {}}),
    # No version in common: nothing negotiated; extensions without their parent go.
    ("old-versions", {}),
    ("orphans", {}),
])
async def test_a_checkout_answer_lists_the_negotiated_checkout_capabilities(
        shop: Shop, profile: str, listed: dict[str, Any]) -> None:
    answer = await shop.create(shop.platform.agent(f"p/{profile}"))
    assert answer.status_code == 201, answer.text
    capabilities = answer.json()["ucp"]["capabilities"]
    assert capabilities == {name: [{"version": NEW, **extra}] for name, extra in listed.items()}
    assert f"/p/{profile}" in shop.platform.fetched


async def test_ap2_is_listed_when_negotiated(ap2_shop: Shop) -> None:
    answer = await ap2_shop.create(ap2_shop.platform.agent("p/ap2"))
    assert answer.status_code == 201, answer.text
    assert answer.json()["ucp"]["capabilities"] == {
        CHECKOUT: [{"version": NEW}], AP2: [{"version": NEW, "extends": CHECKOUT}]}
    # Without AP2 on the merchant's side it is not in the intersection.
    plain = await ap2_shop.create(ap2_shop.platform.agent("p/discount"), key="k2")
    assert AP2 not in plain.json()["ucp"]["capabilities"]


async def test_an_order_answer_names_the_order_capability(shop: Shop) -> None:
    # The order is made by a 2026-01-11 platform, then read by a 2026-04-08 one.
    old = Shopper(shop.client, agent=f'version="{OLD}"')
    session = await old.ship_ready()
    done = await old.complete(session["id"], instrument())
    assert done.status_code == 200, done.text
    order_id = done.json()["order"]["id"]
    headers = {"Request-Id": "r", "Idempotency-Key": "o1"}
    for profile, listed in [("all", {ORDER: [{"version": NEW}]}), ("checkout", {})]:
        answer = await shop.client.get(f"/orders/{order_id}", headers={
            **headers, "UCP-Agent": shop.platform.agent(f"p/{profile}")})
        assert answer.status_code == 200, answer.text
        assert answer.json()["ucp"]["capabilities"] == listed
        assert answer.json()["id"] == order_id


# ------------------------------------------------------------------ refusals


async def test_an_unreachable_profile_is_a_424(shop: Shop) -> None:
    nobody = f"http://127.0.0.1:{free_port()}/profile"
    for agent in (f'profile="{nobody}"', shop.platform.agent("broken"),
                  shop.platform.agent("moved")):  # redirects are not followed
        answer = await shop.create(agent)
        assert answer.status_code == 424, (agent, answer.text)
        body = answer.json()
        assert body["code"] == "profile_unreachable"
        assert body["continue_url"] == shop.url + "/"
        assert isinstance(body["content"], str) and body["content"]
    assert shop.merchant.checkouts() == []
    assert "/p/all" not in shop.platform.fetched


@pytest.mark.parametrize("agent", [
    "some-agent/1.0",                              # no profile named
    'profile="not a url"',                         # malformed
    'profile="ftp://platform.example/profile"',    # not http(s)
    'profile="http://platform.example/profile"',   # not HTTPS (and not loopback)
    'profile="https://agent.example/profile"',     # does not resolve (.example)
    'some-agent/1.0; version="2026-04-08"',        # none named, for this very version
])
async def test_an_invalid_profile_url_is_a_400(shop: Shop, agent: str) -> None:
    answer = await shop.create(agent)
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "invalid_profile_url"
    assert shop.merchant.checkouts() == []


@pytest.mark.parametrize("path", ["text", "odd"])
async def test_a_profile_that_is_not_one_is_a_422(shop: Shop, path: str) -> None:
    answer = await shop.create(shop.platform.agent(path))
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "profile_malformed"
    assert shop.merchant.checkouts() == []


async def test_google_s_flower_shop_client_is_refused_not_answered_in_2026_04_08(
        shop: Shop) -> None:
    """The samples' client names a profile nobody serves and says no version:
    a clear 400 rather than a 201 in shapes it cannot read."""
    answer = await shop.client.post(
        "/checkout-sessions",
        json={"line_items": [{"item": {"id": "bouquet_roses", "title": "Red Rose"},
                              "quantity": 1}], "currency": "USD", "payment": {}},
        headers={"UCP-Agent": 'profile="https://agent.example/profile"',
                 "request-signature": "test", "idempotency-key": "k", "request-id": "r"})
    assert answer.status_code == 400 and answer.json()["code"] == "invalid_profile_url"


async def test_a_2026_01_11_platform_is_still_served_without_a_usable_profile(
        shop: Shop) -> None:
    """Its version's rules have no such refusal, and it says its version."""
    old = Shopper(shop.client, agent=f'profile="https://agent.example/profile"; version="{OLD}"')
    answer = await old.create()
    assert answer.status_code == 201, answer.text
    assert answer.json()["ucp"]["version"] == OLD


async def test_a_2026_01_11_merchant_refuses_nothing(platform: Platform) -> None:
    """The conformance suite's merchant: an unreachable profile changes nothing."""
    async with serve(create_app()) as url, httpx.AsyncClient(base_url=url) as client:
        answer = await Shopper(client, agent=platform.agent("broken")).create()
    assert answer.status_code == 201, answer.text
