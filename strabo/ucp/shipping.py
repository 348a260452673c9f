"""Choosing shipping among what the merchant offers.

A UCP merchant offers fulfillment in steps: asked for a method (``shipping``),
it answers the method's ``destinations``; given a destination, the ``groups``
of line items and each group's ``options``, priced. Ids are the merchant's own
(the bundled merchant's ``addr_1``, the Node.js sample's ``dest_1``), so a
Platform cannot know them in advance: it reads them from the merchant's answer
(the ``fulfillment`` that Created and FulfillmentSet carry) and picks.

:func:`next_choice` is that pick, as a pure function: the first destination
offered, then the cheapest option of each group. Its answer is the next
``fulfillment_pref`` to send, or None once everything is chosen (or nothing is
offered to choose from).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["ASK", "chosen", "next_choice", "price"]

ASK: dict[str, Any] = {"methods": [{"type": "shipping"}]}
"""The first preference: shipping, before anything is offered."""


def next_choice(fulfillment: Any) -> dict[str, Any] | None:
    """The preference that chooses the next step among what ``fulfillment`` (the
    merchant's answer) offers, keeping what the merchant has selected already;
    None when nothing is left to choose or nothing is offered."""
    method = _first(fulfillment)
    if method is None:
        return None
    kind = method.get("type") if isinstance(method.get("type"), str) else "shipping"
    destination = method.get("selected_destination_id")
    if not isinstance(destination, str) or destination == "":
        offered = [d["id"] for d in _dicts(method.get("destinations")) if _id(d.get("id"))]
        if not offered:
            return None
        return {"methods": [{"type": kind, "selected_destination_id": offered[0]}]}
    groups = _dicts(method.get("groups"))
    if not groups or all(_id(g.get("selected_option_id")) for g in groups):
        return None
    picks = []
    for group in groups:
        option = group.get("selected_option_id") or _cheapest(group.get("options"))
        if not _id(option):
            return None  # a group with nothing to pick: the merchant must say more
        picks.append({"selected_option_id": option})
    return {"methods": [{"type": kind, "selected_destination_id": destination,
                         "groups": picks}]}


def chosen(fulfillment: Any) -> tuple[str | None, list[str]]:
    """The destination and options the merchant's ``fulfillment`` has selected."""
    method = _first(fulfillment)
    if method is None:
        return None, []
    destination = method.get("selected_destination_id")
    options = [g["selected_option_id"] for g in _dicts(method.get("groups"))
               if _id(g.get("selected_option_id"))]
    return (destination if _id(destination) else None), options


def price(option: Any) -> float:
    """An option's total in minor units: its ``totals`` entry of type total (or
    the sum of its totals); infinite when it has none (never the cheapest)."""
    if not isinstance(option, dict):
        return math.inf
    totals = [t for t in _dicts(option.get("totals")) if _amount(t.get("amount"))]
    final = [t["amount"] for t in totals if t.get("type") == "total"]
    try:  # an integer too large for a float is no price to choose
        if final:
            return float(final[0])
        return float(sum(t["amount"] for t in totals)) if totals else math.inf
    except OverflowError:
        return math.inf


def _cheapest(options: Any) -> str | None:
    offered = [o for o in _dicts(options) if _id(o.get("id"))]
    if not offered:
        return None
    best = min(offered, key=price)  # the first of equals: the merchant's order
    return str(best["id"])


def _first(fulfillment: Any) -> dict[str, Any] | None:
    methods = fulfillment.get("methods") if isinstance(fulfillment, dict) else None
    first = _dicts(methods)[:1]
    return first[0] if first else None


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _id(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _amount(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
