"""The AP2 mandates extension on the bundled merchant (``create_app(ap2=...)``).

Real servers on loopback: the merchant, and a platform that publishes its
profile (declaring AP2 or not, with its signing key). The mandates are made
with ``strabo.ucpwire.ap2`` from the platform's key, or tampered with by hand.
The strings are checked against the patterns of the spec's
``ap2_mandate.json`` (2026-04-08, the same in 2026-01-11), and the merchant's
signature against PyJWT, an implementation that is not ours.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from strabo.merchant import Ap2Settings, create_app, merchant_of
from strabo.serving import serve
from strabo.ucpwire import ap2 as jose

from .shopper import Shopper, instrument

# ap2_mandate.json#/$defs/merchant_authorization and #/$defs/checkout_mandate.
AUTHORIZATION = re.compile(r"^[A-Za-z0-9_-]+\.\.[A-Za-z0-9_-]+$")
MANDATE = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+(~[A-Za-z0-9_-]+)*$")
NEW = "2026-04-08"
PLATFORM_KID = "platform-2026"


@dataclass
class Platform:
    """A platform's profile server: ``/ap2`` declares AP2 and the signing key,
    ``/plain`` declares neither, ``/nokey`` AP2 without keys."""

    key: jose.PrivateKey = field(default_factory=jose.generate_key)
    url: str = ""
    version: str = "2026-01-11"

    def agent(self, path: str = "ap2") -> str:
        return f'profile="{self.url}/{path}"'

    def app(self) -> Starlette:
        async def profile(request: Request) -> JSONResponse:
            kind = request.path_params["kind"]
            capabilities: Any = []
            if kind != "plain":
                capabilities = [{"name": jose.CAPABILITY, "version": self.version}]
            if self.version == NEW:
                capabilities = {c["name"]: [{"version": NEW}] for c in capabilities}
            document: dict[str, Any] = {
                "ucp": {"version": self.version, "capabilities": capabilities}}
            if kind == "ap2":
                document["signing_keys"] = [jose.public_jwk(self.key, PLATFORM_KID)]
            return JSONResponse(document)

        return Starlette(routes=[Route("/{kind}", profile)])

    def mandate(self, checkout: dict[str, Any], audience: str, **options: Any) -> str:
        return jose.create_mandate(checkout, self.key, PLATFORM_KID, audience=audience,
                                   **options)


@dataclass
class Shop:
    url: str
    app: Any
    client: httpx.AsyncClient
    shopper: Shopper  # speaks for the AP2 platform
    platform: Platform

    def profile_key(self, profile: dict[str, Any]) -> jose.PublicKey:
        [jwk] = profile["signing_keys"]
        return jose.key_from_jwk(jwk)


@pytest.fixture
async def platform() -> AsyncIterator[Platform]:
    mock = Platform()
    async with serve(mock.app()) as url:
        mock.url = url
        yield mock


@pytest.fixture
async def shop(platform: Platform) -> AsyncIterator[Shop]:
    app = create_app(ap2=True)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield Shop(url, app, client, Shopper(client, agent=platform.agent()), platform)


async def ready(shop: Shop) -> dict[str, Any]:
    """A session ready to complete, as the AP2 platform got it (signed)."""
    checkout = await shop.shopper.ship_ready()
    assert checkout["status"] == "ready_for_complete"
    return checkout


def with_mandate(mandate: str | None) -> dict[str, Any]:
    body = instrument()
    if mandate is not None:
        body["ap2"] = {"checkout_mandate": mandate}
    return body


def refused(response: httpx.Response, code: str) -> str:
    """The 2026-01-11 business error's message, checked for ``code``."""
    assert response.status_code in (400, 403), response.text
    body = response.json()
    assert body["code"] == code, body
    return str(body["detail"])


# --------------------------------------------------------------- advertised


async def test_the_profile_advertises_ap2_and_the_key_that_signs_checkouts(shop: Shop):
    profile = (await shop.client.get("/.well-known/ucp")).json()
    [ap2] = [c for c in profile["ucp"]["capabilities"] if c["name"] == jose.CAPABILITY]
    assert ap2["extends"] == "dev.ucp.shopping.checkout"
    assert ap2["config"] == {"vp_formats_supported": {"dc+sd-jwt": {}}}
    assert ap2["spec"].endswith("/specification/ap2-mandates")
    checkout = await ready(shop)
    authorization = checkout["ap2"]["merchant_authorization"]
    assert AUTHORIZATION.match(authorization)
    [jwk] = profile["signing_keys"]
    assert jose.verify_checkout(checkout, lambda kid: shop.profile_key(profile)) == jwk["kid"]

    # ...as another implementation reads it, the payload put back (RFC 7515 appendix F).
    jwt = pytest.importorskip("jwt")
    payload = jose.canonical({k: v for k, v in checkout.items() if k != "ap2"})
    header, signature = authorization.split("..")
    decoded = jwt.api_jws.PyJWS().decode_complete(
        f"{header}.{jose.b64url(payload)}.{signature}", shop.profile_key(profile),
        algorithms=["ES256"])
    assert decoded["header"] == {"alg": "ES256", "kid": jwk["kid"]}
    assert decoded["payload"] == payload


async def test_the_2026_04_08_profile_advertises_it_in_the_registry(platform: Platform):
    app = create_app(ap2=True, ucp_version=NEW)
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        profile = (await client.get("/.well-known/ucp")).json()
    [ap2] = profile["ucp"]["capabilities"][jose.CAPABILITY]
    assert ap2["version"] == NEW and ap2["config"]["vp_formats_supported"] == {"dc+sd-jwt": {}}
    assert [k["kid"] for k in profile["signing_keys"]] == ["merchant-ap2"]


async def test_without_ap2_the_merchant_and_its_profile_are_as_before(platform: Platform):
    app = create_app()
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        profile = (await client.get("/.well-known/ucp")).json()
        shopper = Shopper(client, agent=platform.agent())
        checkout = await shopper.ship_ready()
        # The conformance suite's ap2_test.py: a mandate that is no mandate, ignored.
        done = await shopper.complete(
            checkout["id"], with_mandate("header.payload.signature~kb_signature"))
    # Without AP2 the profile lists only the key that signs webhooks (order.md).
    assert [k["kid"] for k in profile["signing_keys"]] == ["merchant-webhooks"]
    assert jose.CAPABILITY not in [c["name"] for c in profile["ucp"]["capabilities"]]
    assert "ap2" not in checkout
    assert done.status_code == 200 and done.json()["status"] == "completed"


async def test_a_platform_that_does_not_declare_ap2_completes_as_before(shop: Shop):
    plain = Shopper(shop.client, agent=shop.platform.agent("plain"))
    checkout = await plain.ship_ready()
    assert "ap2" not in checkout  # not negotiated: nothing signed
    done = await plain.complete(checkout["id"])
    assert done.status_code == 200 and done.json()["status"] == "completed"


# ----------------------------------------------------------------- complete


async def test_a_valid_mandate_completes(shop: Shop):
    checkout = await ready(shop)
    mandate = shop.platform.mandate(checkout, shop.url)
    assert MANDATE.match(mandate)
    done = await shop.shopper.complete(checkout["id"], with_mandate(mandate))
    assert done.status_code == 200, done.text
    completed = done.json()
    assert completed["status"] == "completed" and completed["order"]["id"]
    assert AUTHORIZATION.match(completed["ap2"]["merchant_authorization"])


async def test_a_complete_without_a_mandate_is_mandate_required(shop: Shop):
    checkout = await ready(shop)
    refused(await shop.shopper.complete(checkout["id"]), "mandate_required")
    refused(await shop.shopper.complete(checkout["id"], {**instrument(), "ap2": {}}),
            "mandate_required")
    assert merchant_of(shop.app).orders() == []
    # The session stays open: a good mandate still completes it.
    again = await shop.shopper.complete(
        checkout["id"], with_mandate(shop.platform.mandate(checkout, shop.url)))
    assert again.status_code == 200 and again.json()["status"] == "completed"


def _tamper_signature(mandate: str) -> str:
    jwt, disclosure = mandate.split("~")
    head, payload, signature = jwt.split(".")
    flipped = ("B" if signature[5] == "A" else "A")
    return f"{head}.{payload}.{signature[:5]}{flipped}{signature[6:]}~{disclosure}"


def _tamper_checkout(mandate: str) -> str:
    """Disclose another total: the disclosure's digest is no longer in ``_sd``."""
    import json

    jwt, disclosure = mandate.split("~")
    salt, name, checkout = json.loads(jose.b64url_decode(disclosure))
    checkout["totals"] = [{**t, "amount": 1} for t in checkout["totals"]]
    forged = jose.b64url(json.dumps([salt, name, checkout]).encode())
    return f"{jwt}~{forged}"


@pytest.mark.parametrize("tamper", [
    _tamper_signature, _tamper_checkout,
    lambda m: m.split("~")[0] + "~" + m.split("~")[1] + "~eyJ.kb.jwt",  # a KB-JWT
    lambda m: "not-a-mandate",
], ids=["signature", "disclosure", "key-binding", "garbage"])
async def test_a_tampered_mandate_is_mandate_invalid_signature(shop: Shop, tamper: Any):
    checkout = await ready(shop)
    mandate = tamper(shop.platform.mandate(checkout, shop.url))
    refused(await shop.shopper.complete(checkout["id"], with_mandate(mandate)),
            "mandate_invalid_signature")
    assert merchant_of(shop.app).orders() == []


async def test_a_mandate_signed_by_another_key_is_refused(shop: Shop):
    checkout = await ready(shop)
    stranger = jose.create_mandate(checkout, jose.generate_key(), PLATFORM_KID,
                                   audience=shop.url)
    refused(await shop.shopper.complete(checkout["id"], with_mandate(stranger)),
            "mandate_invalid_signature")
    unknown = jose.create_mandate(checkout, shop.platform.key, "who", audience=shop.url)
    refused(await shop.shopper.complete(checkout["id"], with_mandate(unknown)),
            "agent_missing_key")


async def test_an_expired_mandate_is_mandate_expired(shop: Shop):
    checkout = await ready(shop)
    old = shop.platform.mandate(checkout, shop.url, lifetime=60, now=time.time() - 600)
    message = refused(await shop.shopper.complete(checkout["id"], with_mandate(old)),
                      "mandate_expired")
    assert "expired" in message


async def test_a_mandate_for_another_cart_or_amount_is_mandate_scope_mismatch(shop: Shop):
    checkout = await ready(shop)
    mandate = shop.platform.mandate(checkout, shop.url)
    # The cart grows after the principal signed: more items, a higher amount.
    bigger = await shop.shopper.update(checkout, line_items=[
        {"id": li["id"], "item": li["item"], "quantity": li["quantity"] + 2}
        for li in checkout["line_items"]])
    assert bigger.status_code == 200, bigger.text
    message = refused(await shop.shopper.complete(checkout["id"], with_mandate(mandate)),
                      "mandate_scope_mismatch")
    assert "amount" in message and "items" in message
    assert merchant_of(shop.app).orders() == []


async def test_a_mandate_for_another_checkout_or_merchant_is_refused(shop: Shop):
    one, two = await ready(shop), await ready(shop)
    for_one = shop.platform.mandate(one, shop.url)
    message = refused(await shop.shopper.complete(two["id"], with_mandate(for_one)),
                      "mandate_scope_mismatch")
    assert "checkout id" in message
    elsewhere = shop.platform.mandate(two, "https://another-shop.example")
    refused(await shop.shopper.complete(two["id"], with_mandate(elsewhere)),
            "mandate_scope_mismatch")


async def test_a_checkout_the_merchant_did_not_sign_is_merchant_authorization_invalid(
        shop: Shop):
    checkout = await ready(shop)
    cheaper = {**checkout, "totals": [{**t, "amount": 1} for t in checkout["totals"]]}
    refused(await shop.shopper.complete(
        checkout["id"], with_mandate(shop.platform.mandate(cheaper, shop.url))),
        "merchant_authorization_invalid")
    unsigned = {k: v for k, v in checkout.items() if k != "ap2"}
    refused(await shop.shopper.complete(
        checkout["id"], with_mandate(shop.platform.mandate(unsigned, shop.url))),
        "merchant_authorization_invalid")


async def test_a_platform_key_may_come_from_configuration(platform: Platform):
    """A platform whose profile declares AP2 but lists no key: the merchant
    trusts the key it was configured with, and only that one."""
    settings = Ap2Settings(platform_keys=(jose.public_jwk(platform.key, PLATFORM_KID),))
    for app, code in ((create_app(ap2=settings), 200), (create_app(ap2=True), 403)):
        async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
            shopper = Shopper(client, agent=platform.agent("nokey"))
            checkout = await shopper.ship_ready()
            done = await shopper.complete(
                checkout["id"], with_mandate(platform.mandate(checkout, url)))
        assert done.status_code == code, done.text
        if code == 403:
            assert done.json()["code"] == "agent_missing_key"


async def test_2026_04_08_refusals_are_business_errors_with_the_spec_code(
        platform: Platform):
    platform.version = NEW
    app = create_app(ap2=True, ucp_version=NEW)
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        headers = {"UCP-Agent": platform.agent(), "Request-Signature": "t",
                   "Request-Id": "r1", "Idempotency-Key": "k1"}
        created = await client.post("/checkout-sessions", headers=headers, json={
            "line_items": [{"item": {"id": "bouquet_roses"}, "quantity": 1}],
            "currency": "USD"})
        checkout = created.json()
        assert created.status_code in (200, 201), created.text
        assert checkout["ucp"]["version"] == NEW  # signed as sent: in 2026-04-08's shape
        assert AUTHORIZATION.match(checkout["ap2"]["merchant_authorization"])
        [jwk] = (await client.get("/.well-known/ucp")).json()["signing_keys"]
        assert jose.verify_checkout(checkout, lambda kid: jose.key_from_jwk(jwk))
        done = await client.post(
            f"/checkout-sessions/{checkout['id']}/complete",
            headers={**headers, "Idempotency-Key": "k2"},
            json={"payment": {"instruments": [{"id": "i1", "handler_id": "mock_payment_handler",
                                               "type": "card", "selected": True,
                                               "credential": {"type": "token",
                                                              "token": "success_token"}}]}})
    assert done.status_code == 200, done.text
    answer = done.json()
    assert answer["ucp"]["status"] == "error"
    [message] = answer["messages"]
    assert message["code"] == "mandate_required" and message["type"] == "error"
