"""The bundled merchant speaking UCP 2026-04-08 on top of its 2026-01-11 core.

The merchant's models and traces are 2026-01-11 (``wire.py``, docs/merchant.md).
To serve 2026-04-08 as well, its endpoints can keep computing 2026-01-11 answers
and translate at the edge: requests in with :func:`request_to_old`, answers out
with :func:`checkout_to_new`, :func:`order_to_new`, :func:`profile_to_new` and
:func:`error_to_new`. Keeping one core means one set of business rules and one
conformance suite; the translation is the only thing that knows two shapes.

Pure functions; ``_versioning`` applies them to each request of a merchant
serving 2026-04-08 (``create_app(ucp_version=...)``). The shape pairs they share
with the proxy side are in ``strabo.ucpwire.shapes``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from strabo.ucpwire import JSON, NEW, OLD
from strabo.ucpwire import shapes as s

SUPPORTED = (OLD, NEW)
"""The protocol versions this merchant can answer in, oldest first."""

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# 2026-01-11 business error codes (``_errors.py``) and their 2026-04-08 names
# (types/error_code.json lists the standard ones; free codes are allowed).
_CODES = {"RESOURCE_NOT_FOUND": "not_found", "OUT_OF_STOCK": "out_of_stock",
          "INVALID_REQUEST": "invalid_request", "PAYMENT_FAILED": "payment_failed"}


# ------------------------------------------------------------------- versions


def platform_version(agent_profile: Any) -> str | None:
    """The protocol version a platform declares: its profile's ``ucp.version``
    (2026-04-08 moved it there from the UCP-Agent header). None if unreadable."""
    ucp = agent_profile.get("ucp") if isinstance(agent_profile, dict) else None
    version = ucp.get("version") if isinstance(ucp, dict) else None
    return version if isinstance(version, str) and _DATE.match(version) else None


def accepted_version(requested: str | None, *, serving: str) -> str | None:
    """The version to answer a request in, or None for ``version_unsupported``.

    ``serving`` is the merchant's current version (its ``--ucp-version``). At
    2026-04-08 only the listed versions are accepted, each answered in its own
    shape (overview.md, *Request-Time Validation*). At 2026-01-11 any version not
    newer is processed and answered as 2026-01-11 (its *Version Negotiation*).
    A platform that declares nothing is answered in ``serving``."""
    if requested is None:
        return serving
    if serving >= NEW:
        return requested if requested in SUPPORTED and requested <= serving else None
    return serving if requested <= serving else None


def version_unsupported(requested: str, *, serving: str,
                        continue_url: str | None = None) -> tuple[int, JSON]:
    """The 2026-04-08 REST answer to an unsupported version: 422 with
    ``{"code", "content"}`` (overview.md, *Error Handling*, REST binding)."""
    offered = [v for v in SUPPORTED if v <= serving]
    body: JSON = {"code": "version_unsupported",
                  "content": f"Protocol version {requested} is not supported. This business "
                             f"supports versions {' and '.join(offered)}."}
    if continue_url:
        body["continue_url"] = continue_url
    return 422, body


# ------------------------------------------------------------------ answers out


def profile_to_new(profile: Mapping[str, Any], *,
                   supported_versions: Mapping[str, str] | None = None) -> JSON:
    """The 2026-01-11 discovery profile (``_discovery.profile``) as 2026-04-08.

    ``supported_versions`` maps each older version still served to the URI of a
    profile for it (ucp.json#/$defs/business_schema); pass ``{OLD: url}`` when
    the merchant also answers 2026-01-11 agents, and serve the 2026-01-11
    profile at that URL."""
    ucp = s.obj(profile.get("ucp"))
    services: JSON = {}
    for name, service in (ucp.get("services") or {}).items():
        entries = []
        for transport in ("rest", "mcp", "a2a", "embedded"):
            binding = service.get(transport)
            if not isinstance(binding, dict):
                continue
            entry = {"version": NEW, "spec": s.url_to_new(service.get("spec")),
                     "transport": transport}
            if binding.get("schema") is not None:
                entry["schema"] = s.url_to_new(binding["schema"])
            if binding.get("endpoint") is not None:
                entry["endpoint"] = binding["endpoint"]
            entries.append(s.present(entry))
        services[name] = entries
    payment = s.obj(profile.get("payment"))
    new_ucp: JSON = {"version": NEW}
    if supported_versions:
        new_ucp["supported_versions"] = dict(supported_versions)
    new_ucp.update({"services": services,
                    "capabilities": s.capabilities_to_new(ucp.get("capabilities")),
                    "payment_handlers": s.handlers_to_new(s.objects(payment.get("handlers")))})
    out: JSON = {"ucp": new_ucp}
    for key, value in profile.items():
        if key not in ("ucp", "payment") and value is not None:
            out[key] = value
    return out


def checkout_to_new(checkout: Mapping[str, Any], *,
                    profile: Mapping[str, Any] | None = None) -> JSON:
    """A 2026-01-11 checkout answer as 2026-04-08 (checkout.json and its
    extensions): payment handlers move into ``ucp.payment_handlers`` (the
    session's own, or the profile's when the session lists none, as the
    merchant's do), nulls go, discount totals turn negative, names lose
    ``full_name``."""
    old_ucp = s.obj(checkout.get("ucp"))
    payment = s.obj(checkout.get("payment"))
    handlers = s.objects(payment.get("handlers"))
    if not handlers and profile is not None:
        handlers = s.objects((profile.get("payment") or {}).get("handlers"))
    out: JSON = {"ucp": {"version": NEW,
                         "capabilities": s.capabilities_to_new(old_ucp.get("capabilities")),
                         "payment_handlers": s.handlers_to_new(handlers)}}
    for key, value in checkout.items():
        if value is None or key in ("ucp", "payment"):
            continue
        if key == "totals":
            out[key] = s.totals_to_new(value)
        elif key == "line_items":
            out[key] = [s.line_item_to_new(li) for li in s.objects(value)]
        elif key == "buyer" and isinstance(value, dict):
            out[key] = s.person_to_new(value)
        elif key == "fulfillment" and isinstance(value, dict):
            out[key] = s.fulfillment_to_new(value)
        elif key == "discounts" and isinstance(value, dict):
            discounts = s.present(value)
            if "applied" in discounts:
                discounts["applied"] = [s.present(a) for a in s.objects(discounts["applied"])]
            if discounts:
                out[key] = discounts
        elif key == "messages":
            out[key] = [s.present(m) for m in s.objects(value)]
        elif key == "order" and isinstance(value, dict):
            out[key] = s.present(value)
        else:
            out[key] = value
    chosen = payment.get("selected_instrument_id")
    instruments = s.objects(payment.get("instruments"))
    if instruments:
        out["payment"] = {"instruments": [
            s.instrument_to_new(i, selected=i.get("id") == chosen) for i in instruments]}
    return out


def order_to_new(order: Mapping[str, Any], *, currency: str | None = None) -> JSON:
    """A 2026-01-11 order as 2026-04-08 (order.json): ``currency`` is now
    required (the checkout's, when the order lacks one), totals signed, an
    adjustment's ``amount`` becomes its ``totals``."""
    old_ucp = s.obj(order.get("ucp"))
    out: JSON = {"ucp": {"version": NEW,
                         "capabilities": s.capabilities_to_new(old_ucp.get("capabilities"))}}
    for key, value in order.items():
        if value is None or key == "ucp":
            continue
        if key == "totals":
            out[key] = s.totals_to_new(value)
        elif key == "line_items":
            out[key] = [s.line_item_to_new(li) for li in s.objects(value)]
        elif key == "fulfillment" and isinstance(value, dict):
            out[key] = _order_fulfillment(value)
        elif key == "adjustments":
            out[key] = [_adjustment(a) for a in s.objects(value)]
        else:
            out[key] = value
    if "currency" not in out and currency is not None:
        out["currency"] = currency
    return out


def _order_fulfillment(fulfillment: Mapping[str, Any]) -> JSON:
    out = s.present(fulfillment)
    if "expectations" in out:
        out["expectations"] = [
            {**s.present(e), **({"destination": s.address_to_new(e["destination"])}
                                if isinstance(e.get("destination"), dict) else {})}
            for e in s.objects(out["expectations"])]
    if "events" in out:
        out["events"] = [s.present(e) for e in s.objects(out["events"])]
    return out


def _adjustment(adjustment: Mapping[str, Any]) -> JSON:
    out = {k: v for k, v in s.present(adjustment).items() if k != "amount"}
    if isinstance(adjustment.get("amount"), int):
        out["totals"] = [{"type": "total", "amount": adjustment["amount"]}]
    return out


def error_to_new(status: int, body: Any) -> tuple[int, JSON]:
    """A 2026-01-11 error answer as the 2026-04-08 one, with its status.

    A missing resource or a refused request is a business outcome, HTTP 200 with
    ``ucp.status: "error"`` and messages (types/error_response.json; checkout.md
    *Error Handling*). Protocol errors keep their status with ``{"code",
    "content"}``: 409 (idempotency, a finished checkout), 5xx, and a 422
    request validation, which becomes 400 (422 is for profiles now)."""
    detail = body.get("detail") if isinstance(body, dict) else body
    code = body.get("code") if isinstance(body, dict) else None
    if isinstance(detail, dict):  # the 2026-01-11 version failure
        errors = s.objects(detail.get("errors"))
        first = errors[0] if errors else {}
        return 422, {"code": "version_unsupported",
                     "content": str(first.get("message", "version not supported"))}
    if isinstance(detail, list):  # FastAPI-style validation list
        parts = [".".join(str(x) for x in e.get("loc", ())) + ": " + str(e.get("msg", ""))
                 for e in s.objects(detail)]
        return 400, {"code": "invalid_request", "content": "; ".join(parts) or "invalid request"}
    content = str(detail) if detail is not None else "error"
    name = _CODES.get(code, code.lower()) if isinstance(code, str) else None
    if status in (400, 402, 403, 404) and name is not None:
        severity = "unrecoverable" if status == 404 else "recoverable"
        return 200, {"ucp": {"version": NEW, "status": "error"},
                     "messages": [{"type": "error", "code": name, "content": content,
                                   "severity": severity}]}
    return status, {"code": name or ("internal_error" if status >= 500 else "error"),
                    "content": content}


# ------------------------------------------------------------------ requests in


def request_to_old(
    operation: str,
    body: Any,
    *,
    checkout_id: str | None = None,
    session: Mapping[str, Any] | None = None,
    title_of: Callable[[str], str | None] | None = None,
    default_currency: str = "USD",
) -> Any:
    """A 2026-04-08 request body as the 2026-01-11 one the endpoints parse.

    ``checkout_id`` is the path's id (a 2026-01-11 update carries it in the body
    too); ``session`` the checkout as stored (2026-01-11), which gives the
    currency and the fulfillment method types a 2026-04-08 update may leave
    out; ``title_of`` a product's title (2026-04-08 requests omit item titles,
    which the 2026-01-11 core requires)."""
    if not isinstance(body, dict):
        return body
    if operation in ("create", "update"):
        return _checkout_request(operation, body, checkout_id, session, title_of,
                                 default_currency)
    if operation == "complete":
        return _complete_request(body)
    return body


def _checkout_request(
    operation: str, body: Mapping[str, Any], checkout_id: str | None,
    session: Mapping[str, Any] | None, title_of: Callable[[str], str | None] | None,
    default_currency: str,
) -> JSON:
    out: JSON = {}
    if operation == "update" and checkout_id is not None:
        out["id"] = checkout_id
    context = s.obj(body.get("context"))
    for key, value in body.items():
        if key in ("context", "signals", "attribution", "id") or value is None:
            continue
        if key == "line_items":
            out[key] = [_line_item(li, title_of) for li in s.objects(value)]
        elif key == "payment" and isinstance(value, dict):
            instruments = s.objects(value.get("instruments"))
            chosen = next((i.get("id") for i in instruments if i.get("selected") is True), None)
            out[key] = ({"selected_instrument_id": chosen,
                         "instruments": [s.instrument_to_old(i) for i in instruments]}
                        if instruments else {})
        elif key == "fulfillment" and isinstance(value, dict):
            out[key] = _fulfillment(value, session)
        else:
            out[key] = value
    currency = context.get("currency") or (session or {}).get("currency") or default_currency
    out["currency"] = currency
    out.setdefault("payment", {})
    return out


def _line_item(item: Mapping[str, Any], title_of: Callable[[str], str | None] | None) -> JSON:
    out = dict(item)
    product = dict(out.get("item") or {})
    if "title" not in product and title_of is not None and isinstance(product.get("id"), str):
        title = title_of(product["id"])
        if title is not None:
            product["title"] = title
    out["item"] = product
    return out


def _fulfillment(fulfillment: Mapping[str, Any], session: Mapping[str, Any] | None) -> JSON:
    """Methods without ``type`` (optional in a 2026-04-08 update) get the stored
    method's type, matched by id."""
    known = {m.get("id"): m for m in
             s.objects(((session or {}).get("fulfillment") or {}).get("methods"))}
    out = dict(fulfillment)
    methods = []
    for method in s.objects(fulfillment.get("methods")):
        m = dict(method)
        if "type" not in m and isinstance(known.get(m.get("id"), {}).get("type"), str):
            m["type"] = known[m["id"]]["type"]
        methods.append(m)
    if "methods" in out:
        out["methods"] = methods
    return out


def _complete_request(body: Mapping[str, Any]) -> JSON:
    """The selected instrument (or the only one) as ``payment_data``, ``signals``
    as ``risk_signals``. With no instrument, ``payment_data`` stays absent and
    the core's validation answers, as it would for a 2026-01-11 agent."""
    payment = s.obj(body.get("payment"))
    instruments = s.objects(payment.get("instruments"))
    chosen = [i for i in instruments if i.get("selected") is True]
    pick = chosen[0] if chosen else (instruments[0] if len(instruments) == 1 else None)
    out: JSON = {k: v for k, v in body.items()
                 if k not in ("payment", "signals", "attribution", "context")}
    if pick is not None:
        out["payment_data"] = s.instrument_to_old(pick)
    signals = body.get("signals")
    out["risk_signals"] = dict(signals) if isinstance(signals, dict) else {}
    return out


__all__ = [
    "SUPPORTED",
    "accepted_version",
    "checkout_to_new",
    "error_to_new",
    "order_to_new",
    "platform_version",
    "profile_to_new",
    "request_to_old",
    "version_unsupported",
]
