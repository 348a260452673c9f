"""UCP checkout over A2A, the wire: what a message asks for, as the REST request
it stands for, and the REST answer as the data part that answers it.

Pure functions, no A2A SDK (``_a2a`` serves them with it), so that the mapping
can be read and tested on its own. The spec (checkout/a2a.md) fixes the
extension URI, the ``a2a.ucp.checkout`` answer key, the payment keys of a
completion and the example actions ``add_to_checkout`` and
``complete_checkout``; the rest is strabo's convention (docs/merchant.md,
"UCP checkout over A2A"): one data part ``{"action": ..., "id": ...,
"a2a.ucp.checkout": body}`` per REST request, and failures as
``{"a2a.ucp.error": {"status": ..., ...the REST error body}}``.

Nothing here decides anything about a checkout: a body goes to REST as it came,
and REST's answer comes back as it went; only the message's own shape (an
action this merchant knows, the keys that action takes, an id that can be a
path segment) is refused here, with a 400.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strabo.ucpwire import NEW, OLD

EXTENSIONS = {
    OLD: "https://ucp.dev/specification/reference?v=2026-01-11",
    NEW: "https://ucp.dev/2026-04-08/specification/reference",
}
"""The UCP extension URI of each version, as ``X-A2A-Extensions`` names it."""

CHECKOUT = "a2a.ucp.checkout"
"""The key of a checkout, in a request (the REST body) and in an answer."""
ERROR = "a2a.ucp.error"
"""The key of a failure in an answer (strabo's convention)."""

_PAYMENT = {
    NEW: {"a2a.ucp.checkout.payment": "payment", "a2a.ucp.checkout.signals": "signals"},
    # 2026-01-11 clients name the instrument either way (the spec's text says
    # ``payment``, Google's sample ``payment_data``): both are read.
    OLD: {"a2a.ucp.checkout.payment_data": "payment_data",
          "a2a.ucp.checkout.payment": "payment_data",
          "a2a.ucp.checkout.risk_signals": "risk_signals"},
}
"""Per version, each payment key of a completion and the REST body field it fills."""

_MANDATE = "ap2.checkout_mandate"  # the spec's flat name for ``ap2: {checkout_mandate}``

ACTIONS: dict[str, frozenset[str]] = {
    "create_checkout": frozenset({CHECKOUT}),
    "get_checkout": frozenset({"id"}),
    "update_checkout": frozenset({"id", CHECKOUT}),
    "complete_checkout": frozenset({"id", "ap2", _MANDATE}),  # + the payment keys
    "cancel_checkout": frozenset({"id"}),
    "add_to_checkout": frozenset({"id", "product_id", "quantity"}),
}
"""The actions served and the keys each takes besides ``action``."""


class Refused(Exception):
    """A message this merchant answers with an error of its own (never sent to REST)."""

    def __init__(self, status: int, code: str, content: str, **extra: Any) -> None:
        super().__init__(content)
        self.status, self.code, self.content, self.extra = status, code, content, extra

    def data(self) -> dict[str, Any]:
        """The answer's data part."""
        return {ERROR: {"status": self.status, "code": self.code, "content": self.content,
                        **self.extra}}


def invalid(content: str) -> Refused:
    return Refused(400, "invalid_request", content)


def version_of(requested: Iterable[str], served: Sequence[str]) -> str:
    """The version whose extension URI the request activates (the newest, if
    several), among ``served``; 400 ``extension_required`` when none."""
    named = set(requested)
    for version in sorted(served, reverse=True):
        if EXTENSIONS[version] in named:
            return version
    offered = [EXTENSIONS[v] for v in sorted(served, reverse=True)]
    raise Refused(400, "extension_required",
                  "activate the UCP extension: send X-A2A-Extensions with "
                  + " or ".join(offered), extensions=offered)


@dataclass(frozen=True)
class Ask:
    """A message, read: its action, the checkout it names, and its other fields."""

    action: str
    checkout_id: str | None
    fields: dict[str, Any]


def read(data_parts: Sequence[Any], version: str) -> Ask:
    """The request the message's data parts make: the part with ``action``
    first, the others (a completion's payment part) merged into it. A key
    given twice, an action not served or a key it does not take is a 400."""
    objects = [integers(p) for p in data_parts]
    if not objects or not all(isinstance(p, dict) for p in objects):
        raise invalid('send a data part {"action": NAME, ...} (and, to complete, one with '
                      f'the payment); actions: {", ".join(ACTIONS)}')
    asks = [p for p in objects if "action" in p]
    if len(asks) != 1:
        raise invalid(f'send exactly one data part with "action" (got {len(asks)})')
    merged: dict[str, Any] = dict(asks[0])
    for part in objects:
        if part is asks[0]:
            continue
        twice = sorted(set(part) & set(merged))
        if twice:
            raise invalid(f"{', '.join(twice)} given twice")
        merged.update(part)
    action = merged.pop("action")
    if not isinstance(action, str) or action not in ACTIONS:
        raise Refused(400, "unknown_action",
                      f"no action {str(action)[:80]!r} (actions: {', '.join(ACTIONS)})")
    allowed = ACTIONS[action] | (set(_PAYMENT[version]) if action == "complete_checkout"
                                 else set())
    unknown = sorted(set(merged) - allowed)
    if unknown:
        raise invalid(f"{action} does not take {', '.join(unknown)[:200]} "
                      f"(it takes {', '.join(sorted(allowed))})")
    checkout_id = merged.pop("id", None)
    if checkout_id is not None:
        checkout_id = path_segment(checkout_id, "id")
    if CHECKOUT in ACTIONS[action] and not isinstance(merged.get(CHECKOUT), dict):
        raise invalid(f'{action} needs "{CHECKOUT}": the checkout (an object), '
                      "the body REST takes")
    return Ask(action, checkout_id, merged)


def path_segment(value: Any, what: str) -> str:
    """A text that can name a checkout in a REST path and an HTTP header."""
    if not isinstance(value, str) or not value or len(value) > 255:
        raise invalid(f"{what} must be a non-empty string of at most 255 characters")
    if not all("!" <= c <= "~" for c in value) or any(c in value for c in "/?#%"):
        raise invalid(f"{what} must be printable ASCII without spaces, '/', '?', '#' or '%'")
    return value


def header_value(value: Any, what: str, limit: int = 2048) -> str:
    """A text that can go in an HTTP header as it is (printable ASCII)."""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise invalid(f"{what} must be a non-empty string of at most {limit} characters")
    if not all(" " <= c <= "~" for c in value):
        raise invalid(f"{what} must be printable ASCII")
    return value


@dataclass(frozen=True)
class RestCall:
    """The REST request a message stands for; ``keyed`` ones carry the
    messageId as their Idempotency-Key."""

    method: str
    path: str
    body: Any = None
    keyed: bool = False


def rest_call(ask: Ask, version: str, checkout_id: str | None) -> RestCall:
    """The REST request of one of the five mapped actions (not ``add_to_checkout``).
    ``checkout_id`` is the message's ``id`` or its context's checkout."""
    if ask.action == "create_checkout":
        return RestCall("POST", "/checkout-sessions", ask.fields[CHECKOUT], keyed=True)
    if checkout_id is None:
        raise invalid(f'{ask.action} needs "id": no checkout was created in this context')
    path = f"/checkout-sessions/{checkout_id}"
    if ask.action == "get_checkout":
        return RestCall("GET", path)
    if ask.action == "update_checkout":
        return RestCall("PUT", path, ask.fields[CHECKOUT], keyed=True)
    if ask.action == "cancel_checkout":
        return RestCall("POST", f"{path}/cancel", keyed=True)
    assert ask.action == "complete_checkout", ask.action
    return RestCall("POST", f"{path}/complete", completion(ask.fields, version), keyed=True)


def completion(fields: Mapping[str, Any], version: str) -> dict[str, Any]:
    """The REST body of a completion from the message's payment part."""
    body: dict[str, Any] = {}
    for key, name in _PAYMENT[version].items():
        if key in fields:
            if name in body:
                raise invalid(f"{key} names the payment a second time")
            body[name] = fields[key]
    ap2 = fields.get("ap2")
    if _MANDATE in fields:
        if ap2 is not None and not isinstance(ap2, dict):
            raise invalid("ap2 must be an object")
        ap2 = {**(ap2 or {}), "checkout_mandate": fields[_MANDATE]}
    if ap2 is not None:
        body["ap2"] = ap2
    return body


def add_to_cart(version: str, checkout: Mapping[str, Any] | None, product_id: Any,
                quantity: Any, *, title_of: Callable[[str], str | None],
                currency: str) -> tuple[str, dict[str, Any]]:
    """``add_to_checkout`` as ``("create", body)`` when ``checkout`` (REST's
    answer) is None, else ``("update", body)``: its cart with ``quantity``
    more of ``product_id``. The bodies are the ones each version's REST takes
    (a 2026-01-11 body names titles, currency and payment)."""
    product = path_segment(product_id, "product_id")
    if isinstance(quantity, bool) or not isinstance(quantity, int) or quantity < 1:
        raise invalid("quantity must be a whole number, at least 1")
    items: list[dict[str, Any]] = []
    for line in (checkout or {}).get("line_items") or []:
        item = line.get("item") if isinstance(line, dict) else None
        if not isinstance(item, dict):
            continue
        entry: dict[str, Any] = {"id": line.get("id"), "item": {"id": item.get("id")},
                                 "quantity": line.get("quantity")}
        if version == OLD:
            entry["item"]["title"] = item.get("title")
        if line.get("parent_id") is not None:
            entry["parent_id"] = line["parent_id"]
        items.append(entry)
    same = next((e for e in items if e["item"]["id"] == product and "parent_id" not in e
                 and isinstance(e["quantity"], int)), None)
    if same is not None:
        same["quantity"] += quantity
    else:
        added: dict[str, Any] = {"item": {"id": product}, "quantity": quantity}
        if version == OLD:
            added["item"]["title"] = title_of(product) or product
        items.append(added)
    body: dict[str, Any] = {"line_items": items}
    if version == OLD:
        paid = (checkout or {}).get("payment")
        body["currency"] = (checkout or {}).get("currency") or currency
        body["payment"] = ({k: v for k, v in paid.items()
                            if k in ("selected_instrument_id", "instruments")}
                           if isinstance(paid, dict) else {})
    if checkout is None:
        return "create", body
    if version == OLD:
        body["id"] = checkout.get("id")
    return "update", body


def answer(status: int, body: Any, retry_after: str | None = None) -> dict[str, Any]:
    """REST's answer as the answer's data part: a checkout under
    ``a2a.ucp.checkout``; anything else (an error status, or a 2026-04-08
    business outcome, ``ucp.status: "error"``, which REST sends with 200)
    under ``a2a.ucp.error`` with REST's status and body fields."""
    ucp = body.get("ucp") if isinstance(body, dict) else None
    outcome = isinstance(ucp, dict) and ucp.get("status") == "error"
    if 200 <= status < 300 and isinstance(body, dict) and not outcome:
        return {CHECKOUT: body}
    error: dict[str, Any] = dict(body) if isinstance(body, dict) else (
        {"content": str(body)[:500]} if body else {})
    error["status"] = status
    if retry_after is not None:
        error["retry_after"] = int(retry_after) if retry_after.isdigit() else retry_after
    return {ERROR: error}


def checkout_id_of(data: Mapping[str, Any]) -> str | None:
    """The id of the checkout an answer carries, if it carries one."""
    checkout = data.get(CHECKOUT)
    found = checkout.get("id") if isinstance(checkout, dict) else None
    return found if isinstance(found, str) else None


def integers(value: Any) -> Any:
    """A2A data parts carry every number as a double (protobuf's Value): a whole
    number comes back as an integer, as the client wrote it."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integers(v) for v in value]
    return value


__all__ = ["ACTIONS", "CHECKOUT", "ERROR", "EXTENSIONS", "Ask", "Refused", "RestCall",
           "add_to_cart", "answer", "checkout_id_of", "integers", "read", "rest_call",
           "version_of"]
