"""Every answer of a whole checkout validates against the spec's JSON Schemas.

The trace replays (``test_merchant_conformance``, ``test_merchant_versions``)
check answers against what a reference merchant sent, by shape; the reference
breaks its own schemas (it sends ``null`` where the schema wants a string or no
key at all), so a shape match is no proof of validity. This test asks the spec
itself: the schemas of UCP 2026-01-11 and 2026-04-08, vendored under
``tests/fixtures/ucp-schemas/`` (see its README), resolved locally, never over
the network.

A checkout runs against a merchant on loopback, as a platform with a profile of
its own (served on loopback too): create with a shipping method, update with a
discount code and a destination, update with an option, get, complete, get the
order, add a shipment to it, cancel a second checkout, escalate a third, and a
few refusals. Each answer is validated against the schema of its version and
operation, as the REST bindings (``openapi.json``, ``rest.openapi.json``) name
them: a checkout answer against ``checkout.json`` with the extensions the
merchant's profile advertises for checkout (``discount``, ``fulfillment``,
``buyer_consent``), an order against ``order.json``, and at 2026-04-08 a
business outcome (``ucp.status: "error"``) against ``types/error_response.json``.
The spec gives no schema for error answers at 2026-01-11 (its REST binding lists
successes only) nor for 2026-04-08 transport errors: those are sent but not
validated. Every violation is reported with its step and its path.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from strabo.merchant import create_app
from strabo.serving import serve

from .conftest import SIMULATION_SECRET

OLD, NEW = "2026-01-11", "2026-04-08"
SCHEMAS = Path(__file__).resolve().parents[2] / "fixtures" / "ucp-schemas"
UCP_DEV = "https://ucp.dev/"
CHECKOUT_EXTENSIONS = ("discount", "fulfillment", "buyer_consent")
"""The checkout extensions this test composes, when the merchant advertises them."""


# ------------------------------------------------------------------- the schemas


def _refuse(uri: str) -> Any:
    raise LookupError(f"{uri} is not vendored under {SCHEMAS} (no network here)")


@cache
def _registry(version: str) -> jsonschema_rs.Registry:
    """Every vendored file of ``version``, under its ``$id`` and under the URL its
    path gives (2026-01-11's ``ucp.json`` names ``../services/service_schema.json``,
    whose ``$id`` says ``schemas/service.json``)."""
    resources: list[tuple[str, Any]] = []
    root = SCHEMAS / version
    for path in sorted(root.rglob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        uris = {UCP_DEV + path.relative_to(root).as_posix()}
        if isinstance(document.get("$id"), str):
            uris.add(document["$id"])
        resources += [(uri, document) for uri in sorted(uris)]
    return jsonschema_rs.Registry(resources, retriever=_refuse)


def _extension_def(version: str) -> str:
    """Where an extension schema defines the checkout it extends."""
    return "checkout" if version == OLD else "dev.ucp.shopping.checkout"


@cache
def validator(version: str, kind: str, extensions: tuple[str, ...] = ()) -> Any:
    """The validator of one answer: ``checkout`` (with ``extensions``), ``order``
    or ``error`` (2026-04-08's business outcome)."""
    if kind == "checkout":
        parts = [f"{UCP_DEV}schemas/shopping/checkout.json"] + [
            f"{UCP_DEV}schemas/shopping/{name}.json#/$defs/{_extension_def(version)}"
            for name in extensions]
    else:
        parts = [UCP_DEV + {"order": "schemas/shopping/order.json",
                            "error": "schemas/shopping/types/error_response.json"}[kind]]
    schema = {"allOf": [{"$ref": part} for part in parts]}
    return jsonschema_rs.validator_for(schema, registry=_registry(version), retriever=_refuse)


def violations(version: str, kind: str, body: Any,
               extensions: tuple[str, ...] = ()) -> list[str]:
    """Each place ``body`` breaks its schema: ``$.path: message``, once each
    (the extensions each include ``checkout.json``, so its errors come thrice).
    A message quoting a whole object (a failed ``oneOf``) is cut short."""
    found: dict[str, None] = {}
    for error in validator(version, kind, extensions).iter_errors(body):
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                             for p in error.instance_path)
        message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
        found.setdefault(f"{path}: {message}", None)
    return list(found)


def advertised_extensions(profile: dict[str, Any]) -> tuple[str, ...]:
    """The checkout extensions a discovery profile (either version) advertises."""
    capabilities = profile.get("ucp", {}).get("capabilities") or []
    names = (capabilities.keys() if isinstance(capabilities, dict)
             else [c.get("name") for c in capabilities])
    return tuple(e for e in CHECKOUT_EXTENSIONS if f"dev.ucp.shopping.{e}" in names)


# ------------------------------------------------------------------ the platform


def platform_profile(version: str) -> dict[str, Any]:
    """A platform profile that declares ``version`` and the shopping capabilities
    (at 2026-04-08 valid against ``ucp.json#/$defs/platform_schema``)."""
    names = ["checkout", "order", *CHECKOUT_EXTENSIONS]
    if version == OLD:
        return {"ucp": {"version": OLD, "capabilities": [
            {"name": f"dev.ucp.shopping.{n}", "version": OLD,
             "spec": f"{UCP_DEV}specification/{n}",
             "schema": f"{UCP_DEV}schemas/shopping/{n}.json",
             **({} if n in ("checkout", "order") else {"extends": "dev.ucp.shopping.checkout"})}
            for n in names]}}
    base = f"{UCP_DEV}{NEW}"
    return {"ucp": {
        "version": NEW,
        "services": {"dev.ucp.shopping": [
            {"version": NEW, "transport": "rest", "spec": f"{base}/specification/overview",
             "schema": f"{base}/services/shopping/rest.openapi.json"}]},
        "capabilities": {f"dev.ucp.shopping.{n}": [
            {"version": NEW, "spec": f"{base}/specification/{n}",
             "schema": f"{base}/schemas/shopping/{n}.json",
             **({} if n in ("checkout", "order") else {"extends": "dev.ucp.shopping.checkout"})}]
            for n in names},
        "payment_handlers": {"com.google.pay": [
            {"id": "gpay", "version": NEW, "spec": "https://pay.google.com/gp/p/ucp/2026-04-08/",
             "schema": "https://pay.google.com/gp/p/ucp/2026-04-08/schemas/config.json"}]},
    }}


@pytest.fixture
async def platform() -> AsyncIterator[str]:
    """Serves ``/profiles/{version}.json``; yields its base URL."""
    async def profile(request: Request) -> JSONResponse:
        return JSONResponse(platform_profile(request.path_params["version"]))

    async with serve(Starlette(routes=[Route("/profiles/{version}.json", profile)])) as url:
        yield url


def test_the_platform_profile_is_valid_at_2026_04_08() -> None:
    schema = {"$ref": f"{UCP_DEV}schemas/ucp.json#/$defs/platform_schema"}
    check = jsonschema_rs.validator_for(schema, registry=_registry(NEW), retriever=_refuse)
    assert [e.message for e in check.iter_errors(platform_profile(NEW)["ucp"])] == []


# ---------------------------------------------------------------------- the flow


@dataclass
class Answer:
    """One answer of the flow: which step, what it should be, what came."""

    step: str
    kind: str  # checkout, order or none (no schema covers it)
    status: int
    body: Any


@dataclass
class Platform:
    """Talks to one merchant in one version, keeping every answer."""

    client: httpx.AsyncClient
    version: str
    profile_url: str
    answers: list[Answer] = field(default_factory=list)

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"UCP-Agent": f'profile="{self.profile_url}"',
                   "Request-Id": str(uuid.uuid4()), "Idempotency-Key": str(uuid.uuid4()),
                   **extra}
        if self.version == OLD:
            headers["Request-Signature"] = "test"
        return headers

    async def call(self, step: str, kind: str, method: str, path: str,
                   body: Any = None, expect: int | None = None, **headers: str) -> Any:
        response = await self.client.request(method, path, json=body,
                                             headers=self.headers(**headers))
        answer = response.json()
        if expect is not None:
            assert response.status_code == expect, f"{step}: {response.status_code} {answer}"
        if self.version == NEW and isinstance(answer, dict) and "ucp" in answer:
            if answer["ucp"].get("status") == "error":
                kind = "error"
        elif response.status_code >= 400:
            kind = "none"  # no schema at 2026-01-11, nor for transport errors
        self.answers.append(Answer(step, kind, response.status_code, answer))
        return answer

    # The requests of each version.

    def cart(self, checkout: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
        """A create (``checkout`` None) or update body with ``fields``."""
        items: list[dict[str, Any]] = [
            {"item": {"id": "bouquet_roses"}, "quantity": 1},
            {"item": {"id": "pot_ceramic"}, "quantity": 2}]
        if checkout is not None:
            items = [{"id": li["id"], "item": {"id": li["item"]["id"]},
                      "quantity": li["quantity"]} for li in checkout["line_items"]]
        buyer = {"first_name": "John", "last_name": "Doe", "email": "john.doe@example.com"}
        if self.version == NEW:
            return {"line_items": items, "buyer": buyer, "context": {"currency": "USD"},
                    **fields}
        for entry in items:
            entry["item"]["title"] = entry["item"]["id"]
        body = {"line_items": items, "currency": "USD", "buyer": buyer, "payment": {}, **fields}
        if checkout is not None:
            body["id"] = checkout["id"]
        return body

    def payment(self, token: str = "success_token") -> dict[str, Any]:
        instrument = {"id": "instr_1", "handler_id": "mock_payment_handler", "type": "card",
                      "credential": {"type": "token", "token": token}}
        if self.version == NEW:
            return {"payment": {"instruments": [{**instrument, "selected": True}]},
                    "signals": {"dev.ucp.buyer_ip": "127.0.0.1"}}
        return {"payment_data": {**instrument, "brand": "visa", "last_digits": "1111"},
                "risk_signals": {}}

    async def create(self, step: str, **fields: Any) -> Any:
        return await self.call(step, "checkout", "POST", "/checkout-sessions",
                               self.cart(None, **fields), expect=201)

    async def update(self, step: str, checkout: dict[str, Any], **fields: Any) -> Any:
        return await self.call(step, "checkout", "PUT", f"/checkout-sessions/{checkout['id']}",
                               self.cart(checkout, **fields), expect=200)


async def checkout_flow(platform: Platform) -> None:
    """The whole flow; answers are kept on ``platform``."""
    shipping = {"methods": [{"type": "shipping"}]}
    created = await platform.create("create", fulfillment=shipping)
    method = created["fulfillment"]["methods"][0]
    chosen = {"methods": [{"id": method["id"], "type": "shipping",
                           "line_item_ids": method["line_item_ids"],
                           "selected_destination_id": method["destinations"][0]["id"]}]}
    step = await platform.update("update: discount and destination", created,
                                 discounts={"codes": ["10OFF", "NOPE"]}, fulfillment=chosen)
    group = step["fulfillment"]["methods"][0]["groups"][0]
    chosen["methods"][0]["groups"] = [{"id": group["id"], "selected_option_id": "std-ship"}]
    ready = await platform.update("update: shipping option", step,
                                  discounts={"codes": ["10OFF", "NOPE"]}, fulfillment=chosen)
    path = f"/checkout-sessions/{ready['id']}"
    await platform.call("get", "checkout", "GET", path, expect=200)
    await platform.call("complete: declined", "checkout", "POST", f"{path}/complete",
                        platform.payment("fail_token"))
    done = await platform.call("complete", "checkout", "POST", f"{path}/complete",
                               platform.payment(), expect=200)
    order_path = f"/orders/{done['order']['id']}"
    order = await platform.call("get order", "order", "GET", order_path, expect=200)
    shipped = {"id": "evt_1", "occurred_at": "2026-02-01T10:00:00Z", "type": "shipped",
               "line_items": [{"id": li["id"], "quantity": 1} for li in order["line_items"]],
               "tracking_number": "1Z999", "carrier": "UPS"}
    order_update = {**order, "fulfillment": {**order["fulfillment"], "events": [shipped]}}
    await platform.call("update order", "order", "PUT", order_path, order_update, expect=200)
    await platform.call("update completed", "checkout", "PUT", path, platform.cart(ready))

    other = await platform.create("create another")
    await platform.call("cancel", "checkout", "POST",
                        f"/checkout-sessions/{other['id']}/cancel", expect=200)

    third = await platform.create("create a third", discounts={"codes": ["FIXED500"]})
    secret = {"Simulation-Secret": SIMULATION_SECRET}
    rigged = await platform.client.post(f"/testing/checkout-sessions/{third['id']}/escalate",
                                        headers=secret, json={})
    assert rigged.status_code == 200, rigged.text
    await platform.call("complete: escalated", "checkout", "POST",
                        f"/checkout-sessions/{third['id']}/complete", platform.payment(),
                        expect=200)

    await platform.call("get unknown", "checkout", "GET", "/checkout-sessions/chk_nope")
    await platform.call("get unknown order", "order", "GET", "/orders/ord_nope")
    await platform.call("create: unknown item", "checkout", "POST", "/checkout-sessions",
                        {**platform.cart(None), "line_items": [
                            {"item": {"id": "pink_wumpus", "title": "Wumpus"}, "quantity": 1}]})


SUCCESSES = {"create", "update: discount and destination", "update: shipping option", "get",
             "complete", "get order", "update order", "create another", "cancel",
             "create a third", "complete: escalated"}
"""The steps every version answers with a checkout or an order (validated)."""

CASES = [
    pytest.param(OLD, OLD, id="2026-01-11"),
    pytest.param(NEW, NEW, id="2026-04-08"),
    pytest.param(NEW, OLD, id="2026-01-11-platform-at-a-2026-04-08-merchant"),
]


@pytest.mark.parametrize(("serving", "speaking"), CASES)
async def test_every_answer_of_a_checkout_fits_the_schemas_of_its_version(
    platform: str, serving: str, speaking: str,
) -> None:
    app = create_app(ucp_version=serving, simulation_secret=SIMULATION_SECRET)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        shopper = Platform(client, speaking, f"{platform}/profiles/{speaking}.json")
        discovery = (await client.get("/.well-known/ucp")).json()
        if serving != speaking:
            discovery = (await client.get(f"/.well-known/ucp/{speaking}")).json()
        await checkout_flow(shopper)

    extensions = advertised_extensions(discovery)
    assert set(extensions) == set(CHECKOUT_EXTENSIONS), extensions
    checked = [a for a in shopper.answers if a.kind != "none"]
    missing = SUCCESSES - {a.step for a in checked}
    assert not missing, f"not checked: {missing}"
    report = [f"{a.step} ({a.status}, {a.kind}) {problem}"
              for a in checked
              for problem in violations(speaking, a.kind, a.body, extensions)]
    assert not report, (f"{len(report)} schema violations in "
                        f"{len({r.split(' (')[0] for r in report})} of {len(checked)} "
                        "answers:\n" + "\n".join(report))


# -------------------------------------------------------- the check itself works


@pytest.mark.parametrize("version", [OLD, NEW])
def test_a_null_for_an_absent_field_is_a_violation_at_its_path(version: str) -> None:
    """The check is not vacuous: the smallest valid checkout passes, and the
    same with ``"continue_url": null`` and a bad total fails, at their paths."""
    ucp: dict[str, Any] = ({"version": OLD, "capabilities": [
        {"name": "dev.ucp.shopping.checkout", "version": OLD}]} if version == OLD else
        {"version": NEW, "capabilities": {"dev.ucp.shopping.checkout": [{"version": NEW}]},
         "payment_handlers": {}})
    body: dict[str, Any] = {
        "ucp": ucp, "id": "chk_1", "line_items": [], "status": "ready_for_complete",
        "currency": "USD", "links": [],
        "totals": [{"type": "subtotal", "amount": 0}, {"type": "total", "amount": 0}]}
    if version == OLD:
        body["payment"] = {"handlers": []}
    assert violations(version, "checkout", body, CHECKOUT_EXTENSIONS) == []
    broken = {**body, "continue_url": None,
              "totals": [{"type": "subtotal", "amount": "0"}, {"type": "total", "amount": 0}]}
    found = violations(version, "checkout", broken, CHECKOUT_EXTENSIONS)
    assert any(v.startswith("$.continue_url: null is not of type") for v in found), found
    assert any(v.startswith("$.totals[0].amount:") for v in found), found
