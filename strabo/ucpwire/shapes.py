"""Shape converters shared by both sides of the UCP 2026-01-11 / 2026-04-08 bridge.

The proxy (``strabo.ucp.versions``) and the bundled merchant
(``strabo.merchant._versions``) translate the same parts in opposite directions,
so each part has its pair here, side by side, where a reader can check that one
undoes the other. Every function is pure: it copies, never mutates its input.

Conventions: ``*_to_new`` makes the 2026-04-08 shape, ``*_to_old`` the 2026-01-11
shape. 2026-04-08 schemas type optional fields as plain strings, never null, so
the ``*_to_new`` side drops ``None`` values the 2026-01-11 merchant sends.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

OLD = "2026-01-11"
NEW = "2026-04-08"

JSON = dict[str, Any]

_UCP_SITE = "https://ucp.dev/"
_REVERSE_DOMAIN = re.compile(r"^[a-z][a-z0-9]*(?:\.[a-z][a-z0-9_]*)+$")
# Total types whose amount is subtractive. 2026-01-11 writes them positive,
# 2026-04-08 negative (types/total.json, exclusiveMaximum 0).
_SUBTRACTIVE = frozenset({"discount", "items_discount"})
_OLD_TOTAL_TYPES = frozenset(
    {"items_discount", "subtotal", "discount", "fulfillment", "tax", "fee", "total"}
)
# 2026-01-11 card instruments carry display fields at top level; 2026-04-08
# moves them under ``display`` (two were renamed on the way).
_DISPLAY = {
    "brand": "brand",
    "last_digits": "last_digits",
    "expiry_month": "expiry_month",
    "expiry_year": "expiry_year",
    "rich_text_description": "description",
    "rich_card_art": "card_art",
}
# Risk signal names a 2026-01-11 agent may use, and their 2026-04-08 registry key.
_SIGNAL_ALIASES = {
    "ip": "dev.ucp.buyer_ip",
    "buyer_ip": "dev.ucp.buyer_ip",
    "ip_address": "dev.ucp.buyer_ip",
    "user_agent": "dev.ucp.user_agent",
}


def present(obj: Mapping[str, Any]) -> JSON:
    """``obj`` without its null fields: 2026-04-08 has no nullable strings."""
    return {k: v for k, v in obj.items() if v is not None}


def obj(value: Any) -> JSON:
    """An object field, or an empty one when it is missing, null or not an object."""
    return value if isinstance(value, dict) else {}


def is_object(value: Any) -> bool:
    return isinstance(value, dict)


def objects(value: Any) -> list[JSON]:
    """The objects of a list field (a null or missing list is empty)."""
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


# ----------------------------------------------------------------- ucp.dev URLs


def url_to_new(url: Any) -> Any:
    """``https://ucp.dev/x`` -> ``https://ucp.dev/2026-04-08/x``: the 2026-04-08
    profile pins its spec and schema links to the version (overview.md)."""
    if not isinstance(url, str) or not url.startswith(_UCP_SITE):
        return url
    rest = url.removeprefix(_UCP_SITE)
    if re.match(r"^\d{4}-\d{2}-\d{2}/", rest):
        return url
    return f"{_UCP_SITE}{NEW}/{rest}"


def url_to_old(url: Any) -> Any:
    """Undo :func:`url_to_new`: 2026-01-11 links are not versioned."""
    if not isinstance(url, str):
        return url
    return url.replace(f"{_UCP_SITE}{NEW}/", _UCP_SITE, 1)


# ---------------------------------------------------------------------- people


def split_name(full_name: str) -> JSON:
    """``full_name`` (gone in 2026-04-08) as first and last name: the last word
    is the last name. A guess, taken only when no first or last name is given."""
    first, _, last = full_name.strip().rpartition(" ")
    if not first:
        return {"first_name": last} if last else {}
    return {"first_name": first, "last_name": last}


def person_to_new(obj: Mapping[str, Any]) -> JSON:
    """A buyer or postal address without ``full_name`` (buyer.json,
    postal_address.json dropped it); the name is split when nothing else names."""
    out = present(obj)
    full = out.pop("full_name", None)
    if isinstance(full, str) and "first_name" not in out and "last_name" not in out:
        out.update(split_name(full))
    return out


def buyer_to_old(buyer: Mapping[str, Any]) -> JSON:
    """A 2026-04-08 buyer with the ``full_name`` 2026-01-11 agents read."""
    out = dict(buyer)
    if out.get("full_name") is None:
        name = " ".join(str(out[k]) for k in ("first_name", "last_name") if out.get(k))
        if name:
            out["full_name"] = name
    return out


def address_to_new(address: Mapping[str, Any]) -> JSON:
    """A postal address or shipping destination in the 2026-04-08 shape. The
    bundled merchant's ``city``/``region`` become the standard locality/region."""
    out = person_to_new(address)
    for quirk, standard in (("city", "address_locality"), ("region", "address_region")):
        value = out.pop(quirk, None)
        if value is not None and standard not in out:
            out[standard] = value
    return out


# ---------------------------------------------------------------------- totals


def total_to_new(total: Mapping[str, Any]) -> JSON:
    out = present(total)
    amount = out.get("amount")
    if out.get("type") in _SUBTRACTIVE and isinstance(amount, int) and amount > 0:
        out["amount"] = -amount
    return out


def total_to_old(total: Mapping[str, Any]) -> JSON:
    """One total in 2026-01-11 terms: subtractive amounts positive, no ``lines``,
    and a type from the closed 2026-01-11 enum (an open 2026-04-08 type becomes
    ``fee`` or ``discount`` by its sign, keeping its display_text)."""
    out = {k: v for k, v in total.items() if k != "lines"}
    amount = out.get("amount")
    kind = out.get("type")
    if kind not in _OLD_TOTAL_TYPES and isinstance(amount, int):
        out["type"] = "discount" if amount < 0 else "fee"
    if out.get("type") in _SUBTRACTIVE and isinstance(amount, int):
        out["amount"] = abs(amount)
    return out


def totals_to_new(totals: Any) -> Any:
    return [total_to_new(t) for t in objects(totals)] if isinstance(totals, list) else totals


def totals_to_old(totals: Any) -> Any:
    return [total_to_old(t) for t in objects(totals)] if isinstance(totals, list) else totals


def line_item_to_new(item: Mapping[str, Any]) -> JSON:
    out = present(item)
    if is_object(out.get("item")):
        out["item"] = present(out["item"])
    if "totals" in out:
        out["totals"] = totals_to_new(out["totals"])
    return out


def line_item_to_old(item: Mapping[str, Any]) -> JSON:
    out = dict(item)
    if "totals" in out:
        out["totals"] = totals_to_old(out["totals"])
    return out


# ----------------------------------------------------------------- fulfillment


def fulfillment_to_new(fulfillment: Mapping[str, Any]) -> JSON:
    """Nulls dropped, addresses without full_name, option totals signed."""
    out = present(fulfillment)
    methods = []
    for method in objects(out.get("methods")):
        m = present(method)
        if "destinations" in m:
            m["destinations"] = [address_to_new(d) for d in objects(m["destinations"])]
        if "groups" in m:
            groups = []
            for group in objects(m["groups"]):
                g = present(group)
                if "options" in g:
                    g["options"] = [
                        {**present(o), **({"totals": totals_to_new(o["totals"])}
                                          if "totals" in o else {})}
                        for o in objects(g["options"])
                    ]
                groups.append(g)
            m["groups"] = groups
        methods.append(m)
    if "methods" in out:
        out["methods"] = methods
    if "available_methods" in out:
        out["available_methods"] = [present(a) for a in objects(out["available_methods"])]
    return out


def fulfillment_to_old(fulfillment: Mapping[str, Any]) -> JSON:
    """Option totals back to 2026-01-11 signs; the rest already fits."""
    out = dict(fulfillment)
    methods = []
    for method in objects(out.get("methods")):
        m = dict(method)
        if "groups" in m:
            m["groups"] = [
                {**g, "options": [{**o, "totals": totals_to_old(o["totals"])} if "totals" in o
                                  else o for o in objects(g["options"])]}
                if "options" in g else g
                for g in objects(m["groups"])
            ]
        methods.append(m)
    if "methods" in out:
        out["methods"] = methods
    return out


# --------------------------------------------------------------------- payment


def instrument_to_new(instrument: Mapping[str, Any], *, selected: bool) -> JSON:
    """A 2026-01-11 instrument (card display fields at top level) as a 2026-04-08
    selected_payment_instrument (types/payment_instrument.json)."""
    out: JSON = {}
    display: JSON = dict(instrument.get("display") or {})
    for key, value in instrument.items():
        if value is None or key == "display":
            continue
        if key in _DISPLAY:
            display[_DISPLAY[key]] = value
        elif key == "billing_address" and is_object(value):
            out[key] = address_to_new(value)
        elif key == "credential" and is_object(value):
            out[key] = present(value)
        else:
            out[key] = value
    if display:
        out["display"] = display
    out["selected"] = selected
    return out


def instrument_to_old(instrument: Mapping[str, Any]) -> JSON:
    """Undo :func:`instrument_to_new`; display fields 2026-01-11 has no place for
    stay under ``display``."""
    out = {k: v for k, v in instrument.items() if k not in ("display", "selected")}
    rest: JSON = {}
    back = {new: old for old, new in _DISPLAY.items()}
    for key, value in (instrument.get("display") or {}).items():
        if key in back:
            out[back[key]] = value
        else:
            rest[key] = value
    if rest:
        out["display"] = rest
    return out


def handler_to_new(handler: Mapping[str, Any]) -> JSON:
    """A 2026-01-11 payment handler as an entry of a 2026-04-08 ``payment_handlers``
    registry (payment_handler.json): ``name`` becomes the registry key (the
    caller's job), ``config_schema`` the entity ``schema``, and the instrument
    types named by ``instrument_schemas`` the ``available_instruments``."""
    out: JSON = {}
    for key in ("id", "version", "spec"):
        if handler.get(key) is not None:
            out[key] = handler[key]
    if handler.get("config_schema") is not None:
        out["schema"] = handler["config_schema"]
    available = handler.get("available_instruments")
    if available is None:
        kinds = [_instrument_kind(u) for u in handler.get("instrument_schemas") or []]
        available = [{"type": k} for k in dict.fromkeys(k for k in kinds if k)] or None
    if available:
        out["available_instruments"] = available
    if handler.get("config") is not None:
        out["config"] = handler["config"]
    return out


def _instrument_kind(schema_url: Any) -> str | None:
    if not isinstance(schema_url, str):
        return None
    name = schema_url.rsplit("/", 1)[-1]
    return name.removesuffix("_payment_instrument.json") if name.endswith(
        "_payment_instrument.json") else None


def handlers_to_new(handlers: Iterable[Mapping[str, Any]]) -> JSON:
    """2026-01-11 handler list -> 2026-04-08 registry keyed by handler name."""
    registry: JSON = {}
    for handler in handlers:
        name = handler.get("name")
        if isinstance(name, str):
            registry.setdefault(name, []).append(handler_to_new(handler))
    return registry


def handlers_to_old(registry: Any) -> list[JSON]:
    """2026-04-08 ``payment_handlers`` registry -> the 2026-01-11 handler list."""
    handlers: list[JSON] = []
    if not is_object(registry):
        return handlers
    for name, entries in registry.items():
        for entry in objects(entries):
            out: JSON = {"id": entry.get("id"), "name": name}
            for key in ("version", "spec"):
                if key in entry:
                    out[key] = entry[key]
            if "schema" in entry:
                out["config_schema"] = entry["schema"]
            for key in ("config", "available_instruments"):
                if key in entry:
                    out[key] = entry[key]
            handlers.append(out)
    return handlers


def signals_to_new(risk_signals: Any) -> JSON:
    """2026-01-11 ``risk_signals`` (free keys) as 2026-04-08 ``signals``, whose keys
    must be reverse-domain names (types/signals.json): known aliases are renamed,
    namespaced keys kept, the rest dropped (there is no lawful name for them)."""
    out: JSON = {}
    for key, value in (risk_signals or {}).items():
        if value is None:
            continue
        if key in _SIGNAL_ALIASES:
            out[_SIGNAL_ALIASES[key]] = str(value)
        elif isinstance(key, str) and _REVERSE_DOMAIN.match(key):
            out[key] = value
    return out


# --------------------------------------------------------------- capabilities


def capabilities_to_new(capabilities: Any) -> JSON:
    """2026-01-11 capability list -> 2026-04-08 registry keyed by name. UCP's own
    capabilities (``dev.ucp.*``) take the protocol version their shape now has."""
    registry: JSON = {}
    for cap in objects(capabilities):
        name = cap.get("name")
        if not isinstance(name, str):
            continue
        entry = {k: v for k, v in present(cap).items() if k not in ("name", "schema_")}
        if name.startswith("dev.ucp."):
            entry["version"] = NEW
        for key in ("spec", "schema"):
            if key in entry:
                entry[key] = url_to_new(entry[key])
        registry.setdefault(name, []).append(entry)
    return registry


def capabilities_to_old(registry: Any) -> list[JSON]:
    caps: list[JSON] = []
    if not is_object(registry):
        return caps
    for name, entries in registry.items():
        for entry in objects(entries):
            cap: JSON = {"name": name, **entry}
            if name.startswith("dev.ucp."):
                cap["version"] = OLD
            for key in ("spec", "schema"):
                if key in cap:
                    cap[key] = url_to_old(cap[key])
            caps.append(cap)
    return caps


def messages_to_old(messages: Any) -> Any:
    """2026-04-08 added severity ``unrecoverable``; 2026-01-11's nearest is
    ``requires_buyer_input`` (the buyer must take over)."""
    if not isinstance(messages, list):
        return messages
    return [
        {**m, "severity": "requires_buyer_input"} if m.get("severity") == "unrecoverable" else m
        for m in objects(messages)
    ]
