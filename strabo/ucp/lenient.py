"""Reading past a merchant's known, harmless deviations from UCP 2026-01-11.

Some merchants answer in the shape of an earlier UCP draft. Google's Node.js
sample merchant (github.com/Universal-Commerce-Protocol/samples, rest/nodejs)
is the one met so far: its ``complete`` answers a top-level ``order_id`` and
``order_permalink_url`` instead of ``order: {id, permalink_url}``, and its
shipping options price themselves with the numbers ``total``, ``subtotal`` and
``tax`` instead of a ``totals`` list. Refused, such an answer stopped the
checkout after the merchant had placed the order.

Both carry what UCP asks for, under other names; nothing is invented. So the
Business proxies read them as UCP has them, and log each deviation (the
merchant should be fixed). An answer that lacks what UCP asks for (an
``order_id`` with no permalink) is left as it is: it still does not fit, and
the proxies say so in the protocol (docs/proxy.md, "A merchant that does not
fit"). Pure functions: :class:`strabo.ucp.checkout.BusinessProxy` applies them
to every answer.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

__all__ = ["order_placed", "read"]

_PRICES = ("subtotal", "tax", "total")


def read(answer: Any) -> tuple[Any, list[str]]:
    """``answer`` as UCP 2026-01-11 has it, and the deviations read past (empty:
    ``answer`` itself, unchanged). Never raises: anything it does not know is
    left for the protocol's types to judge."""
    if not isinstance(answer, dict):
        return answer, []
    deviations: list[str] = []
    fixed = answer
    order = _order(answer)
    if order is not None:
        fixed = {**fixed, "order": order}
        deviations.append("a top-level order_id and order_permalink_url instead of "
                          "order {id, permalink_url}")
    fulfillment = _fulfillment(answer.get("fulfillment"))
    if fulfillment is not None:
        fixed = {**fixed, "fulfillment": fulfillment}
        deviations.append("shipping options priced with total/subtotal/tax numbers "
                          "instead of a totals list")
    return fixed, deviations


def order_placed(answer: Any) -> str | None:
    """The id of the order the answer says was placed, in UCP's shape or the
    draft's top-level ``order_id``; None when it names none."""
    if not isinstance(answer, dict):
        return None
    order = answer.get("order")
    if isinstance(order, dict) and _text(order.get("id")):
        return str(order["id"])
    return str(answer["order_id"]) if _text(answer.get("order_id")) else None


def _order(answer: dict[str, Any]) -> dict[str, Any] | None:
    """UCP's order from the draft's fields, when both are there and ``order`` is not."""
    if answer.get("order") is not None:
        return None
    oid, url = answer.get("order_id"), answer.get("order_permalink_url")
    if not (_text(oid) and _text(url)):
        return None
    return {"id": oid, "permalink_url": url}


def _fulfillment(fulfillment: Any) -> dict[str, Any] | None:
    """``fulfillment`` with its options' numeric prices as totals lists, or None
    when no option needs it."""
    if not isinstance(fulfillment, dict) or not isinstance(fulfillment.get("methods"), list):
        return None
    if not any(True for _ in _priced_options(fulfillment)):
        return None  # the usual case: nothing to fix, nothing copied
    fixed = copy.deepcopy(fulfillment)
    for option in list(_priced_options(fixed)):
        option["totals"] = [{"type": kind, "amount": option.pop(kind)}
                            for kind in _PRICES if _amount(option.get(kind))]
    return fixed


def _priced_options(fulfillment: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The shipping options priced with numbers instead of a ``totals`` list."""
    for method in fulfillment["methods"]:
        groups = method.get("groups") if isinstance(method, dict) else None
        for group in groups if isinstance(groups, list) else []:
            options = group.get("options") if isinstance(group, dict) else None
            for option in options if isinstance(options, list) else []:
                if (isinstance(option, dict) and "totals" not in option
                        and _amount(option.get("total"))):
                    yield option


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _amount(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
