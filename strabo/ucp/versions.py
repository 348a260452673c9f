"""Which UCP version to speak with a merchant, and translation to and from it.

The Langshaw protocols' UCP types (``protocols/ucp/*.json``) are those of UCP
2026-01-11, and so are the bodies the Business proxies build. A merchant may speak
2026-04-08 instead, whose checkout REST binding moved and reshaped many fields
(docs/ucp-versions.md has the table). Rather than a second set of protocol types,
the proxy keeps building 2026-01-11 bodies and translates at the wire:
:func:`request_to_new` and :func:`headers_to_new` on the way out,
:func:`answer_to_old` on the way back. All functions here are pure.

:func:`negotiate` reads a merchant's discovery profile and picks the newest
version both sides support; :class:`UnsupportedVersion` and
:class:`MalformedProfile` are ProxyErrors, so a proxy's failure policy handles
them like any other failed request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from strabo.proxy import ProxyError, ProxyHTTPError
from strabo.ucpwire import JSON, NEW, OLD
from strabo.ucpwire import shapes as s

SUPPORTED = (OLD, NEW)
"""The UCP versions strabo speaks, oldest first."""

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
OPERATIONS = (
    ("POST", re.compile(r"^/checkout-sessions/?$"), "create"),
    ("GET", re.compile(r"^/checkout-sessions/([^/]+)$"), "get"),
    ("PUT", re.compile(r"^/checkout-sessions/([^/]+)$"), "update"),
    ("POST", re.compile(r"^/checkout-sessions/([^/]+)/complete$"), "complete"),
    ("POST", re.compile(r"^/checkout-sessions/([^/]+)/cancel$"), "cancel"),
    ("GET", re.compile(r"^/orders/([^/]+)$"), "order"),
    ("GET", re.compile(r"^/\.well-known/ucp$"), "discovery"),
)
"""Method and URL path -> the UCP operation a request is (the group: the
session's or order's id); the checkout tools are the first five."""


class MalformedProfile(ProxyError):
    """A discovery profile whose version fields cannot be read: no ``ucp`` object,
    a ``version`` that is not ``YYYY-MM-DD``, or ``supported_versions`` that is not
    a map of such dates to URIs (ucp.json#/$defs/business_schema)."""

    default_code = "profile_malformed"


class UnsupportedVersion(ProxyError):
    """No UCP version both strabo and the merchant support. ``offered`` is what the
    profile advertises (or, for a pre-2026-04-08 profile, implies)."""

    default_code = "version_unsupported"

    def __init__(self, offered: list[str]) -> None:
        self.offered = offered
        super().__init__(
            f"the merchant supports UCP {', '.join(offered) or 'no version'}; "
            f"strabo supports {', '.join(SUPPORTED)}: no version in common"
        )


class BusinessOutcomeError(ProxyHTTPError):
    """A 2026-04-08 answer that carries no resource, only error ``messages``
    (``ucp.status`` is ``error``, HTTP 200; types/error_response.json). The
    2026-01-11 merchant said the same with a 4xx, which is what the proxy's
    failure policies expect, so it is raised like one: ``code`` and ``message``
    are the first error message's."""

    def __init__(self, body: JSON, *, route: str | None = None) -> None:
        errors = [m for m in s.objects(body.get("messages")) if m.get("type") == "error"]
        first = errors[0] if errors else {}
        code, content = first.get("code"), first.get("content")
        code = code if isinstance(code, str) else "error"
        content = content if isinstance(content, str) else "error"
        super().__init__(200, content, code=code, body=body, route=route)
        self.continue_url = body.get("continue_url")


# ------------------------------------------------------------------ negotiation


def _profile_versions(profile: Any) -> tuple[str, dict[str, str]]:
    if not isinstance(profile, dict) or not isinstance(profile.get("ucp"), dict):
        raise MalformedProfile("discovery profile: no 'ucp' object")
    ucp = profile["ucp"]
    current = ucp.get("version")
    if not isinstance(current, str) or not _DATE.match(current):
        raise MalformedProfile(f"discovery profile: ucp.version must be YYYY-MM-DD, "
                               f"not {current!r}")
    older = ucp.get("supported_versions", {})
    if not isinstance(older, dict) or not all(
        isinstance(k, str) and _DATE.match(k) and isinstance(v, str) and v
        for k, v in older.items()
    ):
        raise MalformedProfile("discovery profile: ucp.supported_versions must map "
                               "YYYY-MM-DD versions to profile URIs")
    return current, older


def offered_versions(profile: Any) -> list[str]:
    """The versions a merchant's profile lets a platform use, sorted.

    From 2026-04-08 (overview.md, *Protocol Version*) that is ``ucp.version`` and
    the keys of ``ucp.supported_versions``. Before (2026-01-11 and 2026-01-23,
    *Version Negotiation*) a merchant processed any version not newer than its
    own, so a profile at such a version offers every version of ours up to it."""
    current, older = _profile_versions(profile)
    offered = {current, *older}
    if current < NEW:
        offered.update(v for v in SUPPORTED if v <= current)
    return sorted(offered)


def negotiate(profile: Any) -> str:
    """The newest version in both :data:`SUPPORTED` and the merchant's offer.

    Raises :class:`MalformedProfile` for a profile whose version fields cannot be
    read and :class:`UnsupportedVersion` when there is no common version."""
    offered = offered_versions(profile)
    common = [v for v in offered if v in SUPPORTED]
    if not common:
        raise UnsupportedVersion(offered)
    return max(common)


def profile_url_for(profile: Any, version: str) -> str | None:
    """Where the profile describing ``version`` lives: None when it is ``profile``
    itself, else the ``supported_versions`` URI, whose capabilities and payment
    handlers are the ones that hold at that version."""
    current, older = _profile_versions(profile)
    if version == current or current < NEW:
        return None
    return older.get(version)


def operation_of(method: str, path: str) -> str:
    """The UCP operation a request is (create, get, update, complete, cancel,
    order, discovery), from its method and URL path; ``other`` if none."""
    path = path.split("?", 1)[0]
    for verb, pattern, name in OPERATIONS:
        if method.upper() == verb and pattern.match(path):
            return name
    return "other"


# --------------------------------------------------------------- requests out


def headers_to_new(headers: Mapping[str, str]) -> dict[str, str]:
    """2026-01-11 request headers as 2026-04-08 wants them.

    ``Request-Signature`` is gone (rest.openapi.json has the optional RFC 9421
    ``Signature``/``Signature-Input``/``Content-Digest`` instead), and
    ``UCP-Agent`` carries only ``profile``: the platform's version is the
    ``ucp.version`` of that profile, not a header parameter."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower == "request-signature":
            continue
        if lower == "ucp-agent":
            match = re.search(r'profile\s*=\s*"([^"]*)"', value)
            value = f'profile="{match.group(1)}"' if match else value
        out[name] = value
    return out


def request_to_new(operation: str, body: Any, *, session: Mapping[str, Any] | None = None) -> Any:
    """A request body the proxy built (2026-01-11) in the 2026-04-08 shape.

    ``session`` is the checkout as last answered (either shape): an update's
    fulfillment methods and groups need the ids 2026-04-08 requires
    (types/fulfillment_method.json, fulfillment_group.json) and 2026-01-11
    requests leave out. Bodies of other operations pass unchanged."""
    if not isinstance(body, dict):
        return body
    if operation in ("create", "update"):
        return _checkout_request_to_new(operation, body, session)
    if operation == "complete":
        return _complete_request_to_new(body)
    return body


def _checkout_request_to_new(
    operation: str, body: Mapping[str, Any], session: Mapping[str, Any] | None
) -> JSON:
    out: JSON = {}
    for key, value in body.items():
        if value is None or key == "id":  # the id is in the path; create has none
            continue
        if key == "currency":  # the merchant decides it now; the buyer's wish is context
            out.setdefault("context", {})["currency"] = value
        elif key == "context" and isinstance(value, dict):
            out["context"] = {**value, **out.get("context", {})}
        elif key == "line_items":
            out[key] = [_line_item_request(li) for li in s.objects(value)]
        elif key == "buyer" and isinstance(value, dict):
            out[key] = s.person_to_new(value)
        elif key == "payment" and isinstance(value, dict):
            payment = _payment_request_to_new(value)
            if payment:
                out[key] = payment
        elif key == "discounts" and isinstance(value, dict):
            out[key] = {k: v for k, v in value.items() if k == "codes" and v is not None}
        elif key == "fulfillment" and isinstance(value, dict):
            out[key] = _fulfillment_request(operation, value, out.get("line_items", []), session)
        else:
            out[key] = value
    return out


def _line_item_request(item: Mapping[str, Any]) -> JSON:
    """item.title and the totals are the merchant's (``ucp_request: omit``)."""
    out = {k: v for k, v in item.items() if v is not None and k != "totals"}
    if isinstance(out.get("item"), dict):
        out["item"] = {k: v for k, v in out["item"].items() if k == "id"}
    return out


def _payment_request_to_new(payment: Mapping[str, Any]) -> JSON:
    """``selected_instrument_id`` became a ``selected`` flag on each instrument;
    ``handlers`` moved to the answer's ``ucp.payment_handlers``."""
    chosen = payment.get("selected_instrument_id")
    instruments = [s.instrument_to_new(i, selected=i.get("id") == chosen)
                   for i in s.objects(payment.get("instruments"))]
    return {"instruments": instruments} if instruments else {}


def _fulfillment_request(
    operation: str, fulfillment: Mapping[str, Any], line_items: list[JSON],
    session: Mapping[str, Any] | None,
) -> JSON:
    out = s.fulfillment_to_new(fulfillment)
    if operation != "update":
        return out
    known = s.objects(((session or {}).get("fulfillment") or {}).get("methods"))
    all_items = [li["id"] for li in line_items if isinstance(li.get("id"), str)]
    for index, method in enumerate(s.objects(out.get("methods"))):
        twin = known[index] if index < len(known) else {}
        if "id" not in method and twin.get("id") is not None:
            method["id"] = twin["id"]
        if "line_item_ids" not in method:
            method["line_item_ids"] = twin.get("line_item_ids") or all_items
        twin_groups = s.objects(twin.get("groups"))
        for g_index, group in enumerate(s.objects(method.get("groups"))):
            twin_id = twin_groups[g_index].get("id") if g_index < len(twin_groups) else None
            if "id" not in group and twin_id is not None:
                group["id"] = twin_id
    return out


def _complete_request_to_new(body: Mapping[str, Any]) -> JSON:
    """``{payment_data, risk_signals}`` became a checkout body: ``payment`` with
    the instrument marked selected, and ``signals`` (rest.openapi.json,
    complete_checkout)."""
    out: JSON = {}
    for key, value in body.items():
        if value is None:
            continue
        if key == "payment_data" and isinstance(value, dict):
            out["payment"] = {"instruments": [s.instrument_to_new(value, selected=True)]}
        elif key == "risk_signals":
            signals = s.signals_to_new(value)
            if signals:
                out["signals"] = signals
        else:
            out[key] = value
    return out


# ----------------------------------------------------------------- answers back


def is_error_envelope(body: Any) -> bool:
    """Whether a 2026-04-08 answer is the no-resource error shape."""
    return (isinstance(body, dict) and isinstance(body.get("ucp"), dict)
            and body["ucp"].get("status") == "error")


def answer_to_old(operation: str, body: Any, *, route: str | None = None) -> Any:
    """A 2026-04-08 answer in the 2026-01-11 shape the protocols' types expect.

    Raises :class:`BusinessOutcomeError` for an error envelope, which 2026-01-11
    sent as a 4xx."""
    if is_error_envelope(body):
        raise BusinessOutcomeError(body, route=route)
    if not isinstance(body, dict):
        return body
    if operation == "discovery":
        return profile_to_old(body)
    if operation == "order":
        return order_to_old(body)
    if operation in ("create", "get", "update", "complete", "cancel"):
        return checkout_to_old(body)
    return body


def http_error_to_old(error: ProxyHTTPError) -> ProxyHTTPError:
    """A 2026-04-08 protocol error (``{"code", "content"}``, overview.md *Error
    Handling*) re-read so that ``message`` is its content, as 2026-01-11's
    ``{"detail", "code"}`` gave."""
    body = error.body
    if not isinstance(body, dict) or not isinstance(body.get("content"), str):
        return error
    code = body.get("code") if isinstance(body.get("code"), str) else error.code
    again = ProxyHTTPError(error.status, body["content"], code=code, body=body, route=error.route)
    again.attempts, again.elapsed, again.gave_up = error.attempts, error.elapsed, error.gave_up
    return again


def _ucp_to_old(ucp: Any) -> JSON:
    ucp = ucp if isinstance(ucp, dict) else {}
    return {"version": OLD, "capabilities": s.capabilities_to_old(ucp.get("capabilities"))}


def checkout_to_old(body: Mapping[str, Any]) -> JSON:
    """A 2026-04-08 checkout as 2026-01-11: capabilities as a list, payment
    handlers back under ``payment``, the selected instrument as an id, discount
    totals positive, ``full_name`` on the buyer, 2026-04-08-only fields dropped."""
    ucp = s.obj(body.get("ucp"))
    out: JSON = {}
    for key, value in body.items():
        if key in ("context", "signals", "attribution"):
            continue
        if key == "ucp":
            out[key] = _ucp_to_old(value)
        elif key == "totals":
            out[key] = s.totals_to_old(value)
        elif key == "line_items":
            out[key] = [s.line_item_to_old(li) for li in s.objects(value)]
        elif key == "buyer" and isinstance(value, dict):
            out[key] = s.buyer_to_old(value)
        elif key == "messages":
            out[key] = s.messages_to_old(value)
        elif key == "fulfillment" and isinstance(value, dict):
            out[key] = s.fulfillment_to_old(value)
        elif key != "payment":
            out[key] = value
    payment = s.obj(body.get("payment"))
    instruments = s.objects(payment.get("instruments"))
    chosen = next((i.get("id") for i in instruments if i.get("selected") is True), None)
    out["payment"] = {
        "handlers": s.handlers_to_old(ucp.get("payment_handlers")),
        "selected_instrument_id": chosen,
        "instruments": [s.instrument_to_old(i) for i in instruments] or None,
    }
    return out


def order_to_old(body: Mapping[str, Any]) -> JSON:
    """A 2026-04-08 order as 2026-01-11: totals unsigned, an adjustment's
    ``totals`` back to its single ``amount``."""
    out = dict(body)
    out["ucp"] = _ucp_to_old(body.get("ucp"))
    if "totals" in out:
        out["totals"] = s.totals_to_old(out["totals"])
    if "line_items" in out:
        out["line_items"] = [s.line_item_to_old(li) for li in s.objects(out["line_items"])]
    if isinstance(out.get("adjustments"), list):
        adjustments = []
        for adjustment in s.objects(out["adjustments"]):
            a = {k: v for k, v in adjustment.items() if k != "totals"}
            total = next((t for t in s.objects(adjustment.get("totals"))
                          if t.get("type") == "total"), None)
            if total is not None:
                a["amount"] = total.get("amount")
            adjustments.append(a)
        out["adjustments"] = adjustments
    return out


def profile_to_old(profile: Mapping[str, Any]) -> JSON:
    """A 2026-04-08 discovery profile as 2026-01-11: services with a ``rest``
    object, capabilities as a list, payment handlers under ``payment``."""
    ucp = s.obj(profile.get("ucp"))
    services: JSON = {}
    for name, entries in (ucp.get("services") or {}).items():
        rest = next((e for e in s.objects(entries) if e.get("transport") == "rest"), None)
        if rest is None:
            continue
        services[name] = {"version": OLD, "spec": s.url_to_old(rest.get("spec")),
                          "rest": {"schema": s.url_to_old(rest.get("schema")),
                                   "endpoint": rest.get("endpoint")}}
    out: JSON = {k: v for k, v in profile.items() if k != "ucp"}
    out["ucp"] = {"version": OLD, "services": services,
                  "capabilities": s.capabilities_to_old(ucp.get("capabilities"))}
    out["payment"] = {"handlers": s.handlers_to_old(ucp.get("payment_handlers"))}
    return out


__all__ = [
    "NEW",
    "OLD",
    "SUPPORTED",
    "BusinessOutcomeError",
    "MalformedProfile",
    "UnsupportedVersion",
    "answer_to_old",
    "checkout_to_old",
    "headers_to_new",
    "http_error_to_old",
    "is_error_envelope",
    "negotiate",
    "offered_versions",
    "operation_of",
    "order_to_old",
    "profile_to_old",
    "profile_url_for",
    "request_to_new",
]
