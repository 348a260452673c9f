"""The JSON Schemas of the UCP checkout attributes (``protocols/ucp/``).

They must be valid schemas whose ``$ref``s resolve, admit every value the recorded
reference merchant traces hold in the matching place (requests and answers), admit
what our agents, proxies and benchmark bind, and turn down malformed values at the
right place inside them.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import jsonschema_rs
import pytest

from langshaw import LangshawProtocol
from langshaw.types import SIMPLE_TYPES
from strabo.proxy import (
    ProxyAnswerError,
    ProxyError,
    ProxyHTTPError,
    ProxyRequestError,
    ProxyUnreachable,
)
from strabo.proxy.errors import http_error
from strabo.ucp import platform_agent
from strabo.ucp.incremental_proxy import ucp_message
from tests.strabo.merchant.traces import TRACE_FILES, TraceCase, load_trace

ROOT = Path(__file__).resolve().parents[3]
PROTOCOLS = ROOT / "protocols"
SCHEMAS = PROTOCOLS / "ucp"
FIXTURES = ROOT / "tests" / "fixtures"

# Attribute -> schema (relative to protocols/ucp), per protocol.
SIMPLE_UCP = {
    "line_items": "line_items.json",
    "currency": "currency.json",
    "buyer": "buyer.json",
    "payment_pref": "payment_pref.json",
    "discount_codes": "discount_codes.json",
    "fulfillment_pref": "fulfillment_pref.json",
    "id": "checkout_id.json",
    "totals": "totals.json",
    "payment": "payment.json",
    "discounts": "discounts.json",
    "fulfillment": "fulfillment.json",
    "reason": "failure_reason.json",
    "payment_data": "payment_data.json",
    "risk_signals": "risk_signals.json",
    "order": "order.json",
}
INCREMENTAL_UCP = {
    **{k: v for k, v in SIMPLE_UCP.items() if k not in ("payment", "discounts", "reason")},
    "payment": "payment_pref.json",  # Create's: what the Platform sends
    "payment_config": "payment.json",
    "status": "status.json",
    "messages": "messages.json",
    "discounts_applied": "discounts_applied.json",
    "order_id": "order_id.json",
    "tracking_number": "tracking.json#/$defs/tracking_number",
    "tracking_url": "tracking.json#/$defs/tracking_url",
    "carrier": "tracking.json#/$defs/carrier",
}
# What the README recommends optional (the merchant may send null or nothing).
OPTIONAL_SIMPLE = {"buyer", "discount_codes", "fulfillment_pref", "discounts", "fulfillment"}

# Checkout fields as the Platform sends them, and as the merchant answers them.
REQUEST_FIELDS = {
    "id": "checkout_id.json",
    "line_items": "line_items.json",
    "currency": "currency.json",
    "buyer": "buyer.json",
    "payment": "payment_pref.json",
    "discounts": "discount_codes.json",
    "fulfillment": "fulfillment_pref.json",
    "payment_data": "payment_data.json",
    "risk_signals": "risk_signals.json",
}
ANSWER_FIELDS = {
    "id": "checkout_id.json",
    "line_items": "line_items.json",
    "currency": "currency.json",
    "buyer": "buyer.json",
    "status": "status.json",
    "totals": "totals.json",
    "messages": "messages.json",
    "payment": "payment.json",
    "order": "order.json",
    "discounts": "discounts.json",
    "fulfillment": "fulfillment.json",
}
# Requests the reference merchant refused for their data (anything else must fit).
REFUSED_REQUESTS = {
    ("merchant-2026-01-11-traces.md", 32): {("line_items", (0, "quantity"))},  # quantity 0
}


def _retrieve(uri: str) -> Any:
    """Schema files are read from protocols/ucp only."""
    path = Path(unquote(urlsplit(uri).path))
    assert urlsplit(uri).scheme == "file" and path.parent == SCHEMAS, f"retrieving {uri}"
    return json.loads(path.read_text(encoding="utf-8"))


@cache
def validator(reference: str) -> Any:
    """A validator for ``file.json`` or ``file.json#/pointer`` in protocols/ucp."""
    name, _, pointer = reference.partition("#")
    uri = (SCHEMAS / name).as_uri() + (f"#{pointer}" if pointer else "")
    return jsonschema_rs.validator_for({"$ref": uri}, retriever=_retrieve)


def problems(reference: str, value: Any) -> set[tuple[Any, ...]]:
    """The instance paths at which ``value`` does not fit (empty if it fits)."""
    return {tuple(e.instance_path) for e in validator(reference).iter_errors(value)}


def fits(reference: str, value: Any, where: str) -> None:
    errors = list(validator(reference).iter_errors(value))
    assert not errors, f"{where} does not fit {reference}: " + "; ".join(
        f"{list(e.instance_path)}: {e.message}" for e in errors[:3]
    )


def schema_files() -> list[Path]:
    return sorted(SCHEMAS.glob("*.json"))


# --------------------------------------------------------------------- the schemas


@pytest.mark.parametrize("path", schema_files(), ids=lambda p: p.name)
def test_each_file_is_a_valid_2020_12_schema_with_title_and_description(path: Path) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    jsonschema_rs.meta.validate(document)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert document.get("title") and "2026-01-11" in document.get("description", "")


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


@pytest.mark.parametrize("path", schema_files(), ids=lambda p: p.name)
def test_every_ref_resolves_to_a_file_next_to_it(path: Path) -> None:
    for ref in _refs(json.loads(path.read_text(encoding="utf-8"))):
        target, _, pointer = ref.partition("#")
        assert "/" not in target and not urlsplit(target).scheme, f"{path.name}: {ref}"
        node = json.loads((SCHEMAS / (target or path.name)).read_text(encoding="utf-8"))
        for part in pointer.split("/")[1:]:
            assert isinstance(node, dict) and part in node, f"{path.name}: {ref} goes nowhere"
            node = node[part]
        assert isinstance(node, dict | bool), f"{path.name}: {ref} is not a schema"
    validator(path.name)  # and the validator resolves them all, through files


def test_the_protocols_attributes_all_have_a_schema_and_agree_with_their_types() -> None:
    for file, mapping in (("atomic-ucp.lsh", SIMPLE_UCP), ("incremental-ucp.lsh", INCREMENTAL_UCP)):
        protocol = LangshawProtocol.load(PROTOCOLS / file)
        assert set(protocol.sayso) == set(mapping), file
        for attribute, reference in mapping.items():
            validator(reference)
            declared = protocol.type_of(attribute)
            if declared is not None and declared.type and declared.type not in SIMPLE_TYPES:
                assert declared.type == f"ucp/{reference}", f"{file}: {attribute}"


def test_no_attribute_schema_admits_null() -> None:
    for reference in {*SIMPLE_UCP.values(), *INCREMENTAL_UCP.values()}:
        assert problems(reference, None), reference


# ---------------------------------------------------------------------- the traces


def _cases() -> list[tuple[str, TraceCase]]:
    return [(name, case) for name in TRACE_FILES for case in load_trace(name)]


def _json(text: str | None) -> Any:
    try:
        return json.loads(text) if text is not None else None
    except json.JSONDecodeError:
        return None


def _checkout_answers() -> Iterator[tuple[TraceCase, dict[str, Any]]]:
    """The traced answers that are checkout sessions (not orders nor errors)."""
    for _, case in _cases():
        body: Any = case.response_json() if case.response_is_json else None
        if isinstance(body, dict) and {"id", "line_items", "status"} <= set(body) and (
            "checkout_id" not in body
        ):
            yield case, body


def test_every_traced_checkout_request_fits_save_the_refused_one() -> None:
    checked = 0
    for name, case in _cases():
        body = _json(case.request_body)
        if not case.path.startswith("/checkout-sessions") or not isinstance(body, dict):
            continue
        found = set()
        for field, reference in REQUEST_FIELDS.items():
            if field in body:
                checked += 1
                found |= {(field, path) for path in problems(reference, body[field])}
        assert found == REFUSED_REQUESTS.get((name, case.number), set()), case.label
    assert checked > 300


def test_every_traced_checkout_answer_fits() -> None:
    answers = nulls = 0
    for case, body in _checkout_answers():
        answers += 1
        for field, reference in ANSWER_FIELDS.items():
            if body.get(field) is not None:
                fits(reference, body[field], f"{case.label} {field}")
            else:
                nulls += 1
        applied = (body.get("discounts") or {}).get("applied")
        if applied is not None:
            fits("discounts_applied.json", applied, f"{case.label} discounts.applied")
    assert answers > 50 and nulls > 0


def test_what_the_merchant_leaves_null_or_out_is_what_the_readme_says() -> None:
    nulls: set[str] = set()
    absent: set[str] = set()
    for _, body in _checkout_answers():
        nulls |= {f for f in ANSWER_FIELDS if f in body and body[f] is None}
        absent |= {f for f in ANSWER_FIELDS if f not in body}
        if isinstance(body.get("discounts"), dict) and body["discounts"].get("applied") is None:
            nulls.add("discounts.applied")
    assert nulls == {"buyer", "fulfillment", "messages", "order", "discounts.applied"}
    assert absent == {"discounts", "fulfillment"}  # the cancel answers


def test_traced_orders_and_discovery_fit_where_they_share_a_shape() -> None:
    orders = 0
    for _, case in _cases():
        body: Any = case.response_json() if case.response_is_json else None
        if case.is_webhook_log:
            events = [event["body"] for event in body]
            bodies = [event["order"] for event in events]
        elif case.path.startswith("/orders/") and case.status == 200:
            bodies = [body]
        else:
            bodies = []
        for order in bodies:
            orders += 1
            fits("order.json", order, f"{case.label} order")
            fits("order_id.json", order["id"], f"{case.label} order id")
            fits("totals.json", order["totals"], f"{case.label} order totals")
        if case.path == "/.well-known/ucp":
            fits("payment.json", body["payment"], f"{case.label} payment")
    assert orders >= 3


def test_what_the_proxy_binds_for_traced_merchant_errors_fits() -> None:
    errors = 0
    for _, case in _cases():
        if case.is_webhook_log or case.status < 400 or case.response_body is None:
            continue
        response = httpx.Response(
            case.status, content=case.response_body.encode(), headers=case.response_headers
        )
        error = http_error(response, route="Create->>Created")
        fits("failure_reason.json", error.summary(), f"{case.label} reason")
        fits("messages.json", [ucp_message(error)], f"{case.label} messages")
        errors += 1
    assert errors > 30


@pytest.mark.parametrize(
    "error",
    [
        ProxyError("malformed", code="malformed_answer"),
        ProxyUnreachable("POST /checkout-sessions: no answer (ConnectError)"),
        ProxyRequestError("fulfillment_pref must be an object", attribute="fulfillment_pref"),
        ProxyAnswerError("totals: not an array", attribute="totals", path="totals"),
        ProxyHTTPError(500, "Internal Server Error"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_what_the_proxy_binds_for_other_failures_fits(error: ProxyError) -> None:
    fits("failure_reason.json", error.summary(), "reason")
    fits("messages.json", [ucp_message(error)], "messages")
    fits("status.json", "requires_escalation", "escalation status")


# ---------------------------------------------------------------- what we bind


def test_the_platform_agents_sample_values_fit() -> None:
    fits("line_items.json", platform_agent.SAMPLE_LINE_ITEMS, "SAMPLE_LINE_ITEMS")
    fits("buyer.json", platform_agent.SAMPLE_BUYER, "SAMPLE_BUYER")
    fits("fulfillment_pref.json", platform_agent.SAMPLE_FULFILLMENT_PREF, "SAMPLE_FULFILLMENT_PREF")
    fits("payment_data.json", platform_agent.SAMPLE_PAYMENT_DATA, "SAMPLE_PAYMENT_DATA")
    # What it binds besides (platform_agent, incremental_platform).
    for reference, value in [
        ("currency.json", "USD"),
        ("payment_pref.json", {}),
        ("discount_codes.json", {"codes": ["10OFF"]}),
        ("risk_signals.json", {"ip": "127.0.0.1"}),
    ]:
        fits(reference, value, reference)


def test_the_llm_scenarios_values_fit() -> None:
    # Imported by name: samples/ are not type-checked (pyproject's mypy packages).
    scenarios = importlib.import_module("samples.llm.scenarios")
    fits("payment_data.json", scenarios.payment_data(), "scenarios.payment_data()")
    script = json.loads((FIXTURES / "llm" / "ucp.json").read_text(encoding="utf-8"))
    calls = [
        block
        for answer in script["answers"]
        for block in answer["content"]
        if block["name"] in ("Create", "Complete")
    ]
    assert calls
    for call in calls:
        for attribute, value in call["input"].items():
            fits(SIMPLE_UCP[attribute], value, f"{call['name']} {attribute}")


def _bench_steps() -> list[tuple[str, str, dict[str, Any]]]:
    saved = list(sys.path)  # bench/syncserver.py rewrites sys.path[0] when imported
    try:
        from bench import syncserver
    finally:
        sys.path[:] = saved
    steps: list[tuple[str, str, dict[str, Any]]] = syncserver.steps("c1")
    return steps


def test_the_benchmarks_bindings_fit_or_are_optional_attributes_left_null() -> None:
    protocol = LangshawProtocol.load(PROTOCOLS / "atomic-ucp.lsh")
    for _, action, bindings in _bench_steps():
        for attribute, value in bindings.items():
            if attribute in protocol.keys or attribute in protocol.actions:
                continue
            if value is None:  # to be left absent once the attribute is optional
                assert attribute in OPTIONAL_SIMPLE, f"{action} binds {attribute} null"
            else:
                fits(SIMPLE_UCP[attribute], value, f"bench {action} {attribute}")


# ------------------------------------------------------------------- wrong values


@pytest.mark.parametrize(
    ("reference", "value", "where"),
    [
        ("fulfillment_pref.json", "express", ()),  # the bug: a plain string
        ("fulfillment_pref.json", {"type": "shipping"}, ()),  # no methods
        ("fulfillment_pref.json", {"methods": [{"type": ""}]}, ("methods", 0, "type")),
        ("fulfillment_pref.json", {"methods": [{}]}, ("methods", 0)),
        (
            "fulfillment_pref.json",
            {"methods": [{"type": "shipping", "selected_destination_id": 7}]},
            ("methods", 0, "selected_destination_id"),
        ),
        ("line_items.json", [{"item": {"id": "roses"}, "quantity": 0}], (0, "quantity")),
        ("line_items.json", [{"item": {"id": "roses"}, "quantity": 1.5}], (0, "quantity")),
        ("line_items.json", [{"item": {"title": "Roses"}, "quantity": 1}], (0, "item")),
        ("line_items.json", {"item": {"id": "roses"}, "quantity": 1}, ()),
        ("currency.json", "usd", ()),
        ("currency.json", "US Dollar", ()),
        ("buyer.json", {"email": 42}, ("email",)),
        ("buyer.json", "John Doe", ()),
        ("discount_codes.json", ["10OFF"], ()),
        ("discount_codes.json", {"codes": "10OFF"}, ("codes",)),
        ("checkout_id.json", "", ()),
        ("status.json", "done", ()),
        ("totals.json", [{"type": "total", "amount": -1}], (0, "amount")),
        ("totals.json", [{"type": "total", "amount": "35.00"}], (0, "amount")),
        ("payment_data.json", {"token": "ok"}, ()),
        ("payment_data.json", {"id": "i", "handler_id": "h", "type": "card", "credential": {}},
         ("credential",)),
        ("order.json", {"id": "o1"}, ()),
        ("risk_signals.json", "127.0.0.1", ()),
        ("messages.json", [{"type": "error", "content": "no code"}], (0,)),
        ("messages.json", [{"type": "fatal", "code": "x", "content": "y"}], (0, "type")),
        ("failure_reason.json", "out of stock", ()),
        ("failure_reason.json", {"status": "400", "code": None, "message": "m"}, ("status",)),
        ("tracking.json#/$defs/tracking_url", 42, ()),
    ],
)
def test_wrong_values_are_turned_down_where_they_are_wrong(
    reference: str, value: Any, where: tuple[Any, ...]
) -> None:
    assert problems(reference, value) == {where}
