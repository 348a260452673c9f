"""UCP 2026-01-11 / 2026-04-08: negotiation and the translations on both sides.

The 2026-04-08 traces (tests/fixtures/ucp/merchant-2026-04-08-traces.md) were
written from the spec, not recorded; they were checked once against the spec's
own schemas at tag v2026-04-08 outside this repository (docs/ucp-versions.md).
Here they are held to hand-written structural checks of what changed between the
versions, so that a fixture drifting back to a 2026-01-11 shape fails, and every
body goes through both translation directions and must come back unchanged.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import jsonschema_rs
import pytest

from strabo.merchant import _versions as merchant
from strabo.proxy import ProxyError, ProxyHTTPError
from strabo.ucp import versions
from strabo.ucp.versions import (
    NEW,
    OLD,
    SUPPORTED,
    BusinessOutcomeError,
    MalformedProfile,
    UnsupportedVersion,
)
from tests.strabo.merchant.traces import TraceCase, load_trace

NEW_TRACES = f"merchant-{NEW}-traces.md"
SCHEMAS = Path(__file__).resolve().parents[3] / "protocols" / "ucp"
TITLES = {"bouquet_roses": "Bouquet of Red Roses"}
CHECKOUT_OPS = ("create", "get", "update", "complete", "cancel")


@cache
def cases() -> list[TraceCase]:
    return load_trace(NEW_TRACES)


def case(number: int) -> TraceCase:
    return cases()[number]


def request(c: TraceCase) -> Any:
    return json.loads(c.request_body) if c.request_body else None


def op(c: TraceCase) -> str:
    return versions.operation_of(c.method, c.path)


def checkout_answers() -> list[TraceCase]:
    return [c for c in cases() if op(c) in CHECKOUT_OPS and c.status < 300
            and not versions.is_error_envelope(c.response_json())]


# ------------------------------------------------------------------ negotiation


def profile(version: str, supported: dict[str, str] | None = None) -> dict[str, Any]:
    ucp: dict[str, Any] = {"version": version, "services": {}, "payment_handlers": {}}
    if supported is not None:
        ucp["supported_versions"] = supported
    return {"ucp": ucp}


def test_supported_versions_are_the_two_oldest_first() -> None:
    assert SUPPORTED == ("2026-01-11", "2026-04-08")


@pytest.mark.parametrize(
    ("merchant_profile", "expected"),
    [
        (profile(NEW, {OLD: "https://shop.example/.well-known/ucp/2026-01-11"}), NEW),  # both
        (profile(NEW), NEW),  # only the new one
        (profile(OLD), OLD),  # only the old one
        (profile("2026-01-23"), OLD),  # pre-2026-04-08 rule: anything not newer
        (profile("2026-09-01", {NEW: "u1", OLD: "u2"}), NEW),  # a future merchant
        (profile("2026-09-01", {OLD: "u"}), OLD),
    ],
)
def test_negotiate_picks_the_newest_common_version(
    merchant_profile: dict[str, Any], expected: str
) -> None:
    assert versions.negotiate(merchant_profile) == expected


def test_the_fixture_profile_negotiates_the_new_version() -> None:
    assert versions.negotiate(case(0).response_json()) == NEW


@pytest.mark.parametrize(
    "merchant_profile",
    [profile("2025-06-01"), profile("2026-09-01"), profile("2026-09-01", {"2026-05-01": "u"})],
)
def test_no_common_version_is_version_unsupported(merchant_profile: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedVersion) as caught:
        versions.negotiate(merchant_profile)
    assert isinstance(caught.value, ProxyError)
    assert caught.value.code == "version_unsupported"
    assert caught.value.offered == versions.offered_versions(merchant_profile)
    assert "no version in common" in str(caught.value)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (None, "no 'ucp'"),
        ({"ucp": "2026-01-11"}, "no 'ucp'"),
        ({"ucp": {}}, "ucp.version"),
        ({"ucp": {"version": "latest"}}, "ucp.version"),
        ({"ucp": {"version": NEW, "supported_versions": ["2026-01-11"]}}, "supported_versions"),
        ({"ucp": {"version": NEW, "supported_versions": {"draft": "u"}}}, "supported_versions"),
        ({"ucp": {"version": NEW, "supported_versions": {OLD: None}}}, "supported_versions"),
    ],
)
def test_a_malformed_profile_is_named(bad: Any, why: str) -> None:
    with pytest.raises(MalformedProfile, match=why) as caught:
        versions.negotiate(bad)
    assert caught.value.code == "profile_malformed"


def test_profile_url_for_points_at_the_versioned_profile() -> None:
    both = profile("2026-09-01", {OLD: "https://shop.example/ucp/old"})
    assert versions.profile_url_for(both, OLD) == "https://shop.example/ucp/old"
    assert versions.profile_url_for(both, "2026-09-01") is None
    assert versions.profile_url_for(profile("2026-01-23"), OLD) is None  # same profile


@pytest.mark.parametrize(
    ("requested", "serving", "expected"),
    [(None, NEW, NEW), (OLD, NEW, OLD), (NEW, NEW, NEW), ("2026-01-23", NEW, None),
     ("2099-01-01", NEW, None), (OLD, OLD, OLD), ("2025-01-01", OLD, OLD), (NEW, OLD, None)],
)
def test_the_merchant_accepts_what_its_version_rule_allows(
    requested: str | None, serving: str, expected: str | None
) -> None:
    assert merchant.accepted_version(requested, serving=serving) == expected


def test_the_merchant_reads_the_platform_version_from_its_profile() -> None:
    assert merchant.platform_version({"ucp": {"version": NEW}}) == NEW
    assert merchant.platform_version({"ucp": {"version": "soon"}}) is None
    assert merchant.platform_version(None) is None


# ------------------------------------------------- the fixture's changed fields


def walk(node: Any, path: str = "$") -> list[tuple[str, Any]]:
    found = [(path, node)]
    if isinstance(node, dict):
        for key, value in node.items():
            found += walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += walk(value, f"{path}[{index}]")
    return found


def check_totals(totals: Any, where: str) -> None:
    assert isinstance(totals, list), where
    kinds = [t["type"] for t in totals]
    assert kinds.count("subtotal") == 1 and kinds.count("total") == 1, where
    for t in totals:
        assert set(t) <= {"type", "amount", "display_text", "lines"}, where
        if t["type"] in ("discount", "items_discount"):
            assert t["amount"] < 0, f"{where}: a {t['type']} total must be negative now"
        elif t["type"] != "total":
            assert t["amount"] >= 0, where
    assert sum(t["amount"] for t in totals if t["type"] != "total") == next(
        t["amount"] for t in totals if t["type"] == "total"), where


def check_new_checkout(body: dict[str, Any], where: str) -> None:
    ucp = body["ucp"]
    assert ucp["version"] == NEW, where
    assert isinstance(ucp["capabilities"], dict) and all(
        isinstance(v, list) for v in ucp["capabilities"].values()), where
    assert isinstance(ucp["payment_handlers"], dict), f"{where}: handlers are in ucp now"
    assert "handlers" not in body.get("payment", {}), where
    assert "selected_instrument_id" not in body.get("payment", {}), where
    for instrument in body.get("payment", {}).get("instruments", []):
        assert isinstance(instrument["selected"], bool), where
        assert "brand" not in instrument and "last_digits" not in instrument, where
    for key in ("id", "line_items", "status", "currency", "totals", "links"):
        assert key in body, f"{where}: {key}"
    check_totals(body["totals"], where)
    for item in body["line_items"]:
        check_totals(item["totals"], where)


@pytest.mark.parametrize("number", range(10))
def test_no_fixture_body_holds_null_or_full_name(number: int) -> None:
    c = case(number)
    for body in (request(c), c.response_json()):
        if body is None:  # no request body
            continue
        for path, value in walk(body):
            assert value is not None, f"{c.label}: {path} is null"
            assert not path.endswith(".full_name"), f"{c.label}: {path} was removed in {NEW}"


def test_fixture_checkout_answers_have_the_new_shape() -> None:
    answers = checkout_answers()
    assert [c.number for c in answers] == [1, 2, 3, 4, 6, 7]
    for c in answers:
        check_new_checkout(c.response_json(), c.label)
    assert case(4).response_json()["payment"]["instruments"][0]["selected"] is True
    assert case(4).response_json()["order"]["id"] == case(5).response_json()["id"]


def test_fixture_requests_leave_out_what_the_merchant_decides() -> None:
    for c in cases():
        body = request(c)
        if op(c) not in ("create", "update"):
            continue
        assert "currency" not in body and "id" not in body, c.label
        assert all(set(li["item"]) == {"id"} for li in body["line_items"]), c.label
        assert body["context"]["currency"] == "USD", c.label
        for method in body.get("fulfillment", {}).get("methods", []):
            if op(c) == "update":
                assert method["line_item_ids"] and method["id"], c.label
                assert all("id" in g for g in method.get("groups", [])), c.label
    complete = request(case(4))
    assert set(complete) == {"payment", "signals"}
    assert [i["selected"] for i in complete["payment"]["instruments"]] == [True]
    assert all("." in key for key in complete["signals"])


def test_fixture_headers_are_the_new_ones() -> None:
    for c in cases()[1:]:
        headers = dict(c.request_headers)
        assert "request-signature" not in headers, c.label
        assert headers["ucp-agent"].startswith('profile="') and "version" not in headers[
            "ucp-agent"], c.label


def test_fixture_discovery_profile_has_the_new_registries() -> None:
    ucp = case(0).response_json()["ucp"]
    assert ucp["version"] == NEW and set(ucp["supported_versions"]) == {OLD}
    assert all(isinstance(entries, list) for key in ("services", "capabilities",
               "payment_handlers") for entries in ucp[key].values())
    assert ucp["services"]["dev.ucp.shopping"][0]["transport"] == "rest"
    assert "payment" not in case(0).response_json()


def test_fixture_order_and_errors_have_the_new_shape() -> None:
    order = case(5).response_json()
    assert order["currency"] == "USD" and order["ucp"]["version"] == NEW
    check_totals(order["totals"], case(5).label)
    envelope = case(8).response_json()
    assert case(8).status == 200 and envelope["ucp"]["status"] == "error"
    assert set(envelope) <= {"ucp", "messages", "continue_url"}
    assert envelope["messages"][0]["severity"] == "unrecoverable"
    assert case(9).status == 422 and case(9).response_json()["code"] == "version_unsupported"


# ----------------------------------------------------------------- round trips


@pytest.mark.parametrize("number", [1, 2, 3, 4, 6, 7])
def test_checkout_answers_survive_both_directions(number: int) -> None:
    c = case(number)
    old = versions.answer_to_old(op(c), c.response_json())
    assert merchant.checkout_to_new(old) == c.response_json()


@pytest.mark.parametrize("number", [1, 2, 3, 4, 6, 7])
def test_translated_answers_fit_the_protocols_2026_01_11_types(number: int) -> None:
    old = versions.answer_to_old(op(case(number)), case(number).response_json())
    assert old["ucp"]["version"] == OLD
    assert isinstance(old["ucp"]["capabilities"], list)
    fits("totals.json", old["totals"])
    fits("payment.json", old["payment"])
    fits("buyer.json", old["buyer"])
    assert old["buyer"]["full_name"] == "John Doe"
    for key, schema in (("fulfillment", "fulfillment.json"), ("discounts", "discounts.json"),
                        ("order", "order.json")):
        if key in old:
            fits(schema, old[key])
    assert all(t["amount"] >= 0 for t in old["totals"])


def test_the_order_survives_both_directions() -> None:
    body = case(5).response_json()
    old = versions.answer_to_old("order", body)
    assert isinstance(old["ucp"]["capabilities"], list)
    assert next(t for t in old["totals"] if t["type"] == "discount")["amount"] == 350
    assert merchant.order_to_new(old) == body


def test_the_profile_survives_both_directions() -> None:
    body = case(0).response_json()
    old = versions.answer_to_old("discovery", body)
    assert old["ucp"]["version"] == OLD
    assert old["ucp"]["services"]["dev.ucp.shopping"]["rest"]["endpoint"] == \
        "http://127.0.0.1:8182/"
    assert {h["id"] for h in old["payment"]["handlers"]} == {"shop_pay", "google_pay"}
    back = merchant.profile_to_new(old, supported_versions=body["ucp"]["supported_versions"])
    assert back == body


@pytest.mark.parametrize("number", [1, 2, 3, 4, 6])
def test_requests_survive_both_directions(number: int) -> None:
    c = case(number)
    checkout_id = c.path.split("/")[2] if op(c) != "create" else None
    old = merchant.request_to_old(op(c), request(c), checkout_id=checkout_id,
                                  title_of=TITLES.get)
    if op(c) in ("create", "update"):
        assert old["currency"] == "USD" and "context" not in old
        assert all(li["item"]["title"] for li in old["line_items"])
        assert (old.get("id") == checkout_id) if checkout_id else "id" not in old
    else:
        assert old["payment_data"]["brand"] == "visa" and "display" not in old["payment_data"]
    assert versions.request_to_new(op(c), old) == request(c)


def test_a_proxy_update_gets_the_ids_new_requires_from_the_session() -> None:
    """What shipping_steps sends for the option step: no method or group id."""
    session = versions.answer_to_old("update", case(2).response_json())
    built = {"id": "chk_7f3c2a91",
             "line_items": [{"id": "li_1", "quantity": 1,
                             "item": {"id": "bouquet_roses", "title": "Bouquet of Red Roses"}}],
             "buyer": {"full_name": "John Doe", "email": "john.doe@example.com"},
             "currency": "USD", "payment": {}, "discounts": {"codes": ["10OFF"]},
             "fulfillment": {"methods": [{"type": "shipping", "selected_destination_id": "addr_1",
                                          "groups": [{"selected_option_id": "exp-ship-us"}]}]}}
    assert versions.request_to_new("update", built, session=session) == request(case(3))
    without = versions.request_to_new("update", built)
    assert "id" not in without["fulfillment"]["methods"][0]["groups"][0]


def test_the_proxys_complete_body_becomes_the_new_one() -> None:
    sample = {"payment_data": {"id": "instr_1", "handler_id": "google_pay", "type": "card",
                               "brand": "visa", "last_digits": "1111",
                               "credential": {"type": "PAYMENT_GATEWAY", "token": "success_token"}},
              "risk_signals": {"ip": "127.0.0.1", "session_age": 12}}
    assert versions.request_to_new("complete", sample) == request(case(4))


def test_headers_lose_the_signature_and_the_version_parameter() -> None:
    old = {"UCP-Agent": 'profile="https://strabo.example/profile"; version="2026-01-11"',
           "Request-Signature": "abc", "Request-Id": "r", "Idempotency-Key": "k"}
    assert versions.headers_to_new(old) == {
        "UCP-Agent": 'profile="https://strabo.example/profile"', "Request-Id": "r",
        "Idempotency-Key": "k"}


def test_the_error_envelope_is_raised_as_the_old_4xx_was() -> None:
    with pytest.raises(BusinessOutcomeError) as caught:
        versions.answer_to_old("get", case(8).response_json(), route="Get")
    assert caught.value.summary() == {"status": 200, "code": "not_found",
                                      "message": "Checkout session not found"}
    old_not_found = {"detail": "Checkout session not found", "code": "RESOURCE_NOT_FOUND"}
    assert merchant.error_to_new(404, old_not_found) == (200, case(8).response_json())


def test_version_unsupported_both_ways() -> None:
    status, body = merchant.version_unsupported("2099-01-01", serving=NEW,
                                                continue_url="http://127.0.0.1:8182/")
    assert (status, body) == (case(9).status, case(9).response_json())
    error = versions.http_error_to_old(ProxyHTTPError(422, "Unprocessable Entity", body=body))
    assert error.code == "version_unsupported" and error.detail.startswith("Protocol version")
    old_body = {"detail": {"status": "error", "errors": [{"code": "VERSION_UNSUPPORTED",
                                                          "message": "Version x"}]}}
    assert merchant.error_to_new(400, old_body) == (422, {"code": "version_unsupported",
                                                          "content": "Version x"})


@pytest.mark.parametrize(
    ("status", "body", "expected_status", "code"),
    [(409, {"detail": "Idempotency key reused", "code": "IDEMPOTENCY_CONFLICT"}, 409,
      "idempotency_conflict"),
     (400, {"detail": "Out of stock", "code": "OUT_OF_STOCK"}, 200, "out_of_stock"),
     (422, {"detail": [{"loc": ["body", "currency"], "msg": "Field required"}]}, 400,
      "invalid_request"),
     (500, "Internal Server Error", 500, "internal_error")],
)
def test_old_errors_take_their_new_form(
    status: int, body: Any, expected_status: int, code: str
) -> None:
    new_status, new_body = merchant.error_to_new(status, body)
    assert new_status == expected_status
    found = new_body["messages"][0]["code"] if new_status == 200 else new_body["code"]
    assert found == code


# -------------------------------------- the 2026-01-11 merchant's own answers


def test_the_old_merchants_answers_translate_to_the_new_shape() -> None:
    old_cases = load_trace("merchant-2026-01-11-traces.md")
    old_profile = old_cases[0].response_json()
    new_profile = merchant.profile_to_new(old_profile)
    assert versions.negotiate(new_profile) == NEW
    assert set(new_profile["ucp"]["payment_handlers"]) == {"dev.shopify.shop_pay",
                                                           "com.google.pay"}
    completed = merchant.checkout_to_new(old_cases[9].response_json(), profile=old_profile)
    check_new_checkout(completed, "old #9")
    assert all(value is not None for _, value in walk(completed))
    destinations = completed["fulfillment"]["methods"][0]["destinations"]
    assert destinations[0]["address_locality"] == "Springfield" and "city" not in destinations[0]
    order = merchant.order_to_new(old_cases[11].response_json(), currency="USD")
    assert order["currency"] == "USD" and "schema_" not in json.dumps(order)
    check_totals(order["totals"], "old #11")


def test_the_old_complete_request_translates_to_the_new_shape() -> None:
    old_cases = load_trace("merchant-2026-01-11-traces.md")
    body = versions.request_to_new("complete", json.loads(old_cases[9].request_body or ""))
    instrument = body["payment"]["instruments"][0]
    assert instrument["display"] == {"brand": "Visa", "last_digits": "1234"}
    assert instrument["selected"] is True and "signals" not in body  # {} carries nothing


# ------------------------------------------------------------------- helpers


def _retrieve(uri: str) -> Any:
    path = Path(unquote(urlsplit(uri).path))
    assert path.parent == SCHEMAS, uri
    return json.loads(path.read_text(encoding="utf-8"))


def fits(name: str, value: Any) -> None:
    validator = jsonschema_rs.validator_for({"$ref": (SCHEMAS / name).as_uri()},
                                            retriever=_retrieve)
    errors = [f"{list(e.instance_path)}: {e.message}" for e in validator.iter_errors(value)]
    assert not errors, f"does not fit {name}: {errors[:3]}"
