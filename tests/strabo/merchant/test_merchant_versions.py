"""The bundled merchant serving UCP 2026-04-08 (``create_app(ucp_version=...)``,
``strabo merchant --ucp-version``).

The 2026-04-08 traces (tests/fixtures/ucp/merchant-2026-04-08-traces.md) were
written from the spec, not recorded from this merchant, so a few of their
choices are not this merchant's: its handler names and configs, optional
fields its 2026-01-11 core never sets. Those are listed in :data:`KNOWN`, each
with the reason, and only those are forgiven; every other difference of status
or shape (keys, nesting, types; see ``shapes``) fails the replay. What the
version change is about (registries instead of lists, signed totals, handlers
in ``ucp``, the error envelope, the 422) is therefore checked by shape, and a
few values on top.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from strabo.cli import main
from strabo.merchant import _cli, create_app, merchant_of
from strabo.merchant._versioning import SERVED
from strabo.serving import serve

from .conftest import SIMULATION_SECRET, MockAgent
from .shapes import differences
from .traces import RECORDED_BASE, TraceCase, load_trace

NEW = "2026-04-08"
OLD = "2026-01-11"
TRACES = f"merchant-{NEW}-traces.md"
# The platform profiles the traces name (nobody serves them): played by Platforms.
PLATFORM_HOSTS = ("https://strabo.example", "https://agent.example")
DROPPED_HEADERS = {"host", "content-length"}

KNOWN: dict[tuple[str, str], str] = {
    ("$", "continue_url"): "the 2026-01-11 core sets it only on escalation (optional)",
    ("$", "expires_at"): "the 2026-01-11 core sets no expiry (optional)",
    ("$", "messages"): "the core does not message missing choices (optional)",
    ("$", "payment"): "the core does not echo the paid instrument (optional in answers)",
    ("$", "adjustments"): "the traced order has an adjustment; ours has none yet",
    ("$.ucp.capabilities", "dev.ucp.shopping.discount"): "answers name the checkout "
    "capability only, as the reference merchant's did",
    ("$.ucp.capabilities", "dev.ucp.shopping.fulfillment"): "as above",
    ("$.ucp.capabilities", "dev.ucp.shopping.order"): "as above, for orders too",
    ("$.ucp.capabilities", "dev.ucp.shopping.checkout"): "as above, for orders too",
    ("$.discounts.applied[*]", "automatic"): "the core says automatic: false (optional)",
    ("$.fulfillment.expectations[*].destination", "address_locality"): "the core copies "
    "the reference's null locality into orders; nulls are dropped",
    ("$.fulfillment.expectations[*].destination", "address_region"): "as above",
    ("$.ucp.payment_handlers.*[*]", "available_instruments"): "made from "
    "*_payment_instrument.json schema names, which this merchant's handlers do not use",
}
"""Keys one side has and the other not that are not a translation fault: where
(the path, ``*`` for any registry name) and which key, with the reason."""

EMPTY_LISTS_KNOWN = {"$.links": "the core links no terms of service (an empty list)"}
"""Lists the trace fills and this merchant leaves empty."""


def pruned(recorded: Any, ours: Any, path: str = "$") -> tuple[Any, Any]:
    """Both bodies without the :data:`KNOWN` differences, and with payment
    handler registries compared by their entries' shape: the names (the trace
    invented Shopify's) and free-form configs are each merchant's own."""
    if isinstance(recorded, dict) and isinstance(ours, dict):
        if path.endswith(".payment_handlers"):
            return _handlers(recorded), _handlers(ours)
        star = re.sub(r"\.payment_handlers\.[^.\[]+", ".payment_handlers.*", path)
        skip = {k for k in recorded.keys() ^ ours.keys() if (star, k) in KNOWN}
        a, b = {}, {}
        for key in recorded.keys() | ours.keys():
            if key in skip:
                continue
            if key in recorded and key in ours:
                a[key], b[key] = pruned(recorded[key], ours[key], f"{path}.{key}")
            elif key in recorded:
                a[key] = recorded[key]
            else:
                b[key] = ours[key]
        return a, b
    if isinstance(recorded, list) and isinstance(ours, list):
        if path == "$.ucp.services.dev.ucp.shopping":
            # The traced merchant served no A2A, and an A2A entry names no
            # schema (checkout a2a.md's example): not compared.
            ours = [e for e in ours if not (isinstance(e, dict) and e.get("transport") == "a2a")]
        if path in EMPTY_LISTS_KNOWN and not ours:
            return [], []
        if not recorded or not ours:
            return recorded, ours
        # Elements are compared as a set of shapes; each is pruned against the
        # other side's first element.
        left = [pruned(r, ours[0], f"{path}[*]")[0] for r in recorded]
        right = [pruned(recorded[0], o, f"{path}[*]")[1] for o in ours]
        return left, right
    return recorded, ours


def _handlers(registry: dict[str, Any]) -> dict[str, Any]:
    entries = [{k: ({} if k == "config" else v) for k, v in e.items()
                if k != "available_instruments"}
               for es in registry.values() for e in es]
    return {"handler": entries}


@dataclass
class Platforms:
    """The platform profiles the traces point at: ``/profile`` speaks 2026-04-08,
    ``/profiles/{version}.json`` the version named."""

    url: str = ""
    fetched: list[str] = field(default_factory=list)

    def app(self) -> Starlette:
        async def profile(request: Request) -> JSONResponse:
            self.fetched.append(request.url.path)
            version = request.path_params.get("version", NEW)
            return JSONResponse({"ucp": {"version": version, "capabilities": {}}})

        return Starlette(routes=[Route("/profile", profile),
                                 Route("/profiles/{version}.json", profile)])


@pytest.fixture
async def platforms() -> AsyncIterator[Platforms]:
    mock = Platforms()
    async with serve(mock.app()) as url:
        mock.url = url
        yield mock


class Replay:
    """Sends the 2026-04-08 trace cases, with the traced ids replaced by ours."""

    def __init__(self, client: httpx.AsyncClient, base: str, platforms: str) -> None:
        self.client, self.base, self.platforms = client, base, platforms
        self.ids: dict[str, str] = {}

    def text(self, value: str) -> str:
        value = value.replace(RECORDED_BASE, self.base)
        for host in PLATFORM_HOSTS:
            value = value.replace(host, self.platforms)
        return value

    def ours(self, value: Any) -> Any:
        """A traced request body with our ids in it (whole strings only)."""
        if isinstance(value, dict):
            return {k: self.ours(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.ours(v) for v in value]
        return self.ids.get(value, value) if isinstance(value, str) else value

    def learn(self, traced: Any, ours: Any) -> None:
        """Map each traced ``id`` to ours at the same place."""
        if isinstance(traced, dict) and isinstance(ours, dict):
            for key in traced.keys() & ours.keys():
                if key == "id" and isinstance(traced[key], str) and isinstance(ours[key], str):
                    self.ids.setdefault(traced[key], ours[key])
                else:
                    self.learn(traced[key], ours[key])
        elif isinstance(traced, list) and isinstance(ours, list):
            for a, b in zip(traced, ours, strict=False):
                self.learn(a, b)

    async def send(self, case: TraceCase) -> httpx.Response:
        headers = [(n, self.text(v)) for n, v in case.request_headers
                   if n not in DROPPED_HEADERS]
        path = "/".join(self.ids.get(part, part) for part in case.path.split("/"))
        body = None
        if case.request_body is not None:
            body = json.dumps(self.ours(json.loads(case.request_body))).encode()
        return await self.client.request(case.method, path, headers=headers, content=body)

    async def check(self, case: TraceCase) -> tuple[list[str], Any]:
        response = await self.send(case)
        body = response.json()
        problems = []
        if response.status_code != case.status:
            problems.append(f"status {response.status_code}, traced {case.status}: "
                            f"{str(body)[:300]}")
        traced = json.loads(self.text(case.response_body or "null"))
        self.learn(traced, body)
        if case.path == "/.well-known/ucp" and isinstance(body, dict):
            # Ours lists the key that signs its webhooks (order.md); the traced
            # merchant's sent none.
            body = {k: v for k, v in body.items() if k != "signing_keys"}
        problems += differences(*pruned(traced, body))
        return [f"{case.label}: {p}" for p in problems], body


async def test_every_traced_case_gets_the_traced_status_and_shape(
    platforms: Platforms,
) -> None:
    app = create_app(ucp_version=NEW, simulation_secret=SIMULATION_SECRET)
    failures: list[str] = []
    answers: dict[int, Any] = {}
    async with serve(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as client:
        replay = Replay(client, base, platforms.url)
        for case in load_trace(TRACES):
            problems, answers[case.number] = await replay.check(case)
            failures += problems
    assert not failures, f"{len(failures)} differences:\n" + "\n".join(failures)
    # Values the shapes cannot say.
    profile = answers[0]["ucp"]
    assert profile["version"] == NEW
    assert profile["supported_versions"] == {OLD: f"{base}/.well-known/ucp/{OLD}"}
    assert "mock_payment_handler" in {e["id"] for es in profile["payment_handlers"].values()
                                      for e in es}
    totals = {t["type"]: t["amount"] for t in answers[3]["totals"]}
    assert totals["discount"] < 0 and totals["total"] == sum(
        v for k, v in totals.items() if k != "total")
    assert answers[4]["status"] == "completed" and answers[4]["ucp"]["version"] == NEW
    assert answers[5]["currency"] == "USD" and answers[5]["id"] == answers[4]["order"]["id"]
    assert answers[7]["status"] == "canceled"
    assert answers[8]["ucp"] == {"version": NEW, "status": "error"}
    assert answers[9]["continue_url"] == base + "/"
    assert "/profiles/2099-01-01.json" in platforms.fetched
    [order] = merchant_of(app).orders()
    assert order.id == answers[5]["id"]


def test_the_pruning_forgives_only_what_it_lists() -> None:
    traced = {"id": "x", "expires_at": "t", "status": "s"}
    assert differences(*pruned(traced, {"id": "y", "status": "s"})) == []
    assert differences(*pruned(traced, {"id": "y"})) == ["$: missing keys ['status']"]
    assert differences(*pruned({"ucp": {"payment_handlers": {"a": [{"id": "1"}]}}},
                               {"ucp": {"payment_handlers": {"b": [{"id": 2}]}}}))


# ------------------------------------------------------------------ old platforms

ROSES = [{"item": {"id": "bouquet_roses", "title": "Bouquet of Red Roses"}, "quantity": 1}]


def old_headers(agent: str, key: str, *, signed: bool = True) -> dict[str, str]:
    headers = {"UCP-Agent": agent, "Request-Id": "r-1", "Idempotency-Key": key}
    if signed:
        headers["Request-Signature"] = "test"
    return headers


@pytest.fixture
async def new_shop() -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    app = create_app(ucp_version=NEW, simulation_secret=SIMULATION_SECRET)
    async with serve(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as client:
        yield base, client


async def test_the_old_profile_is_served_unchanged_at_its_path(
    new_shop: tuple[str, httpx.AsyncClient],
) -> None:
    base, client = new_shop
    old = (await client.get(f"/.well-known/ucp/{OLD}")).json()
    async with serve(create_app(base_url=base)) as other, httpx.AsyncClient() as c:
        served_by_old = (await c.get(f"{other}/.well-known/ucp")).json()
    # The same document a 2026-01-11 merchant at that address serves (its shop id aside).
    shop_pay = next(h for h in old["payment"]["handlers"] if h["id"] == "shop_pay")
    for h in served_by_old["payment"]["handlers"]:
        if h["id"] == "shop_pay":
            h["config"]["shop_id"] = shop_pay["config"]["shop_id"]
    # Each merchant makes its own key to sign webhooks with (order.md).
    for document in (old, served_by_old):
        assert [k["kid"] for k in document.pop("signing_keys")] == ["merchant-webhooks"]
    assert old == served_by_old
    assert old["ucp"]["version"] == OLD and "supported_versions" not in old["ucp"]
    assert isinstance(old["ucp"]["capabilities"], list)


async def test_a_2026_01_11_platform_still_checks_out(
    new_shop: tuple[str, httpx.AsyncClient], agent: MockAgent,
) -> None:
    """The mock agent's profile declares 2026-01-11 (and a webhook)."""
    _, client = new_shop
    ucp_agent = f'{agent.ucp_agent}; version="{OLD}"'
    body = {"line_items": ROSES, "currency": "USD", "payment": {}}
    created = await client.post("/checkout-sessions", json=body,
                                headers=old_headers(ucp_agent, "k1"))
    assert created.status_code == 201, created.text
    session = created.json()
    assert session["ucp"]["version"] == OLD
    assert isinstance(session["ucp"]["capabilities"], list)
    assert "handlers" in session["payment"]  # the 2026-01-11 place for them
    assert "payment_handlers" not in session["ucp"]
    # An error is the 2026-01-11 one too.
    missing = await client.get("/checkout-sessions/nope", headers=old_headers(ucp_agent, "k2"))
    assert missing.status_code == 404 and missing.json()["code"] == "RESOURCE_NOT_FOUND"
    # And the Request-Signature it requires.
    unsigned = await client.post("/checkout-sessions", json=body,
                                 headers=old_headers(ucp_agent, "k3", signed=False))
    assert unsigned.status_code == 422
    assert unsigned.json()["detail"][0]["loc"] == ["header", "request-signature"]


async def test_the_header_version_is_read_when_there_is_no_profile(
    new_shop: tuple[str, httpx.AsyncClient],
) -> None:
    _, client = new_shop
    answer = await client.post(
        "/checkout-sessions", json={"line_items": ROSES, "currency": "USD", "payment": {}},
        headers=old_headers(f'version="{OLD}"', "k1"))
    assert answer.status_code == 201 and answer.json()["ucp"]["version"] == OLD


async def test_a_2026_04_08_request_needs_no_signature_but_its_headers(
    new_shop: tuple[str, httpx.AsyncClient],
) -> None:
    _, client = new_shop
    answer = await client.post("/checkout-sessions", json={"line_items": ROSES},
                               headers={"Idempotency-Key": "k1"})
    # UCP-Agent and Request-Id missing: the 2026-01-11 422 becomes a 400.
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == "invalid_request"
    assert "ucp-agent" in body["content"] and "request-signature" not in body["content"]


@pytest.mark.parametrize("version", ["2025-10-01", "2099-01-01"])
async def test_an_unsupported_version_gets_the_422(
    new_shop: tuple[str, httpx.AsyncClient], version: str,
) -> None:
    base, client = new_shop
    answer = await client.get("/checkout-sessions/any",
                              headers=old_headers(f'version="{version}"', "k1"))
    assert answer.status_code == 422
    assert answer.json() == {
        "code": "version_unsupported",
        "content": f"Protocol version {version} is not supported. This business "
                   f"supports versions {OLD} and {NEW}.",
        "continue_url": base + "/"}


async def test_serving_2026_01_11_has_no_old_profile_path_and_no_translation() -> None:
    async with serve(create_app()) as base, httpx.AsyncClient(base_url=base) as client:
        assert (await client.get(f"/.well-known/ucp/{OLD}")).status_code == 404
        profile = (await client.get("/.well-known/ucp")).json()
        assert profile["ucp"]["version"] == OLD and "supported_versions" not in profile["ucp"]
        # A 2026-04-08-style request is not translated: no signature is a 422.
        answer = await client.post("/checkout-sessions", json={"line_items": ROSES},
                                   headers={"UCP-Agent": 'profile="x"', "Request-Id": "r",
                                            "Idempotency-Key": "k"})
        assert answer.status_code == 422


def test_an_unknown_version_is_refused_by_create_app() -> None:
    with pytest.raises(ValueError, match="ucp_version must be one of 2026-01-11, 2026-04-08"):
        create_app(ucp_version="2026-01-23")


# ------------------------------------------------------------------------ the CLI


def test_the_cli_versions_are_the_served_ones() -> None:
    assert _cli.UCP_VERSIONS == SERVED


def test_help_shows_the_ucp_version_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["merchant", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--ucp-version {2026-01-11,2026-04-08}" in out
    assert "UCP version served (2026-01-11)" in out


def test_a_bad_ucp_version_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["merchant", "--ucp-version", "2026-01-23"]) == 2
    err = capsys.readouterr().err
    assert err == ("strabo merchant: --ucp-version must be one of 2026-01-11, 2026-04-08, "
                   "not '2026-01-23'\n")
