"""The tool-style A2A dialect: checkout with a business agent whose actions are
its model's tools, as Google's UCP samples' ``a2a/business_agent`` (UCP
2026-01-11) has them, rather than strabo's REST-shaped actions.

:mod:`strabo.ucp.a2a_transport` speaks strabo's convention (``create_checkout``
with the whole body, ``update_checkout``, ``cancel_checkout``, ``id`` in every
message, ``a2a.ucp.error`` answers) to an agent whose card names those actions,
and this dialect to one whose card does not (:func:`dialect_of`), unless a
proxy's ``a2a_dialect`` forces one (:func:`forced`). Here the context names the
checkout (no ids), there is no cancel and no update with a body, and a failed
tool answers with the model's text only. Measured against
Google's agent (its model a scripted stand-in; docs/proxy.md, *Google's A2A
business agent*):

- create -> one ``add_to_checkout`` data part per line item (``product_id``,
  ``quantity``), all in one message, in a new context;
- update -> ``update_customer_details`` with the buyer's names and email and the
  shipping address (a destination the body's ``fulfillment`` carries, else
  address fields in ``buyer``), which also picks the shipping and readies the
  checkout; an update carrying none of these -> ``get_checkout``;
- complete -> ``complete_checkout`` with the payment instrument and the risk
  signals (``{}`` when none: the agent needs the key) in the same message;
- get -> ``get_checkout``; cancel -> not sent: a 501 ``not_supported``;
- an answer: the data part holding ``a2a.ucp.checkout`` (found by key); none,
  only text: the tool failed, a 422 ``tool_failed`` with the text as message.

Pure functions: the client (:class:`strabo.ucp.a2a_transport.A2aCheckout`)
sends and reads.
"""

from __future__ import annotations

from typing import Any

CHECKOUT = "a2a.ucp.checkout"
SESSION, TOOL, AUTO = "session", "tool", "auto"
DIALECTS = (SESSION, TOOL)
CHOICES = (AUTO, *DIALECTS)
"""What a proxy's ``a2a_dialect`` (and ``strabo demo --a2a-dialect``) takes:
``auto``, the card's (:func:`dialect_of`), or one forced."""
SESSION_ACTIONS = ("create_checkout", "get_checkout", "update_checkout", "complete_checkout",
                   "cancel_checkout")
"""strabo's actions, which the bundled merchant's card lists (extension
``params.actions``)."""
NAMES = ("first_name", "last_name")
ADDRESS = ("street_address", "extended_address", "address_locality", "address_region",
           "postal_code", "address_country")
"""UCP's PostalAddress fields that ``update_customer_details`` takes."""
SAFE = frozenset({"get_checkout", "update_customer_details"})
"""Tools whose replay changes nothing (a read; the same details set again): the
only ones resent after they may have arrived. The agent is not idempotent (a
replayed messageId runs again): a second ``add_to_checkout`` adds the products
twice, a second ``complete_checkout`` pays twice."""
Plan = tuple[str, list[dict[str, Any]]] | tuple[int, dict[str, Any]]
"""A request's tool and data parts, or the answer to give without sending."""


def forced(dialect: str | None) -> str | None:
    """The dialect an ``a2a_dialect`` option forces: None for ``auto`` (or None),
    the card's to say; ValueError for a value not in :data:`CHOICES`."""
    if dialect is None or dialect == AUTO:
        return None
    if dialect not in DIALECTS:
        raise ValueError(f"the A2A dialect must be one of {', '.join(CHOICES)}, "
                         f"not {dialect!r}")
    return dialect


def dialect_of(card: Any) -> str:
    """Which dialect the agent of ``card`` speaks: ``session`` (strabo's) when a
    UCP extension's ``params.actions`` or a skill's description names
    ``create_checkout``, or when the card lists no skills; else ``tool``."""
    return card_dialect(card)[0]


def card_dialect(card: Any) -> tuple[str, str]:
    """:func:`dialect_of` and why, in words (for the warning given when a forced
    dialect is not the card's)."""
    if not isinstance(card, dict):
        return SESSION, "it is not an agent card"
    capabilities = card.get("capabilities")
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    for extension in extensions if isinstance(extensions, list) else []:
        params = extension.get("params") if isinstance(extension, dict) else None
        actions = params.get("actions") if isinstance(params, dict) else None
        if isinstance(actions, list) and "create_checkout" in actions:
            return SESSION, "an extension's params.actions lists create_checkout"
    skills = card.get("skills")
    if not isinstance(skills, list) or not skills:
        return SESSION, "it lists no skills"
    said = " ".join(str(s.get("description", "")) for s in skills if isinstance(s, dict))
    if "create_checkout" in said:
        return SESSION, "a skill's description names create_checkout"
    return TOOL, "its skills and extensions name no create_checkout"


def _data(**data: Any) -> dict[str, Any]:
    return {"kind": "data", "data": data}


def _refusal(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"code": code, "message": message, "content": message}


def plan(tool: str, body: Any, payment_keys: tuple[str, str],
         last: dict[str, Any] | None = None) -> Plan:
    """The tool and parts of the message REST's ``tool`` (the session dialect's
    name) stands for, or the answer to give without sending. ``last`` is the
    checkout's last known state (a complete of a checkout known not to be
    ready is refused here: the agent would complete it, address or not)."""
    given = body if isinstance(body, dict) else {}
    if tool == "create_checkout":
        items = given.get("line_items")
        parts = [_data(action="add_to_checkout", product_id=line["item"]["id"],
                       quantity=line.get("quantity", 1))
                 for line in items if isinstance(line, dict) and isinstance(
                     line.get("item"), dict) and isinstance(line["item"].get("id"), str)
                 ] if isinstance(items, list) else []
        if not parts or len(parts) != len(items or []):
            return _refusal(400, "invalid_line_items", "a checkout over a tool-style A2A agent "
                            "needs line items each naming a product (item.id)")
        return "add_to_checkout", parts
    if tool == "update_checkout":
        details = details_of(given)
        if not details:
            return "get_checkout", [_data(action="get_checkout")]
        return "update_customer_details", [_data(action="update_customer_details", **details)]
    if tool == "complete_checkout":
        status = last.get("status") if isinstance(last, dict) else None
        if status is not None and status != "ready_for_complete":
            return _refusal(409, "not_ready", f"the checkout is {status}, not ready_for_complete:"
                            " not completed (the agent would complete it without a buyer or "
                            "an address); send the buyer's details first")
        pay, signals = payment_keys
        payment = given.get("payment_data", given.get("payment"))
        risk = given.get("risk_signals", given.get("signals"))
        return "complete_checkout", [_data(action="complete_checkout"),
                                     {"kind": "data", "data": {
                                         pay: payment, signals: risk if risk is not None else {}}}]
    if tool == "get_checkout":
        return "get_checkout", [_data(action="get_checkout")]
    if tool == "cancel_checkout":
        return _refusal(501, "not_supported", "the merchant's A2A agent has no cancel (a "
                        "tool-style agent: its tools are add, remove, update, get, start "
                        "payment, customer details, complete): the checkout is left as it is")
    return _refusal(501, "not_supported", f"{tool} has no tool-style A2A equivalent")


def details_of(body: dict[str, Any]) -> dict[str, Any]:
    """``update_customer_details``'s arguments from an update's body: the buyer's
    names (``full_name`` split when need be) and email, and the address fields of
    the first destination in ``fulfillment`` that has any, else of ``buyer``;
    empty when the body says none of them."""
    given = body.get("buyer")
    buyer: dict[str, Any] = given if isinstance(given, dict) else {}
    address: dict[str, Any] = {}
    fulfillment = body.get("fulfillment")
    methods = fulfillment.get("methods") if isinstance(fulfillment, dict) else None
    for method in methods if isinstance(methods, list) else []:
        destinations = method.get("destinations") if isinstance(method, dict) else None
        for place in destinations if isinstance(destinations, list) else []:
            if isinstance(place, dict) and any(place.get(k) for k in ADDRESS) and not address:
                address = place
    address = address or buyer
    details: dict[str, Any] = {k: address[k] for k in ADDRESS if address.get(k)}
    names = {k: buyer.get(k) or address.get(k) for k in NAMES}
    full = buyer.get("full_name") or address.get("full_name")
    if isinstance(full, str) and full.strip() and not all(names.values()):
        first, _, rest = full.strip().partition(" ")
        names = {"first_name": names["first_name"] or first,
                 "last_name": names["last_name"] or rest or first}
    details.update({k: v for k, v in names.items() if v})
    if buyer.get("email"):
        details["email"] = buyer["email"]
    if details and "address_country" not in details and any(k in details for k in ADDRESS):
        details["address_country"] = None  # the tool's default: "US"
    return details


def answer_of(result: Any) -> tuple[int, dict[str, Any]]:
    """A ``message/send`` result as REST's answer: the checkout of the data part
    holding ``a2a.ucp.checkout``, wherever it is among the parts; no such part,
    the model's text: the tool failed (422 ``tool_failed``, the text its message)."""
    parts = result.get("parts") if isinstance(result, dict) else None
    texts: list[str] = []
    for part in parts if isinstance(parts, list) else []:
        data = part.get("data") if isinstance(part, dict) else None
        if isinstance(data, dict) and isinstance(data.get(CHECKOUT), dict):
            return 200, data[CHECKOUT]
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    said = " ".join(t.strip() for t in texts if t.strip())[:500]
    if not said:
        return 502, {"code": "malformed_answer", "message": "the A2A answer holds no "
                     f"{CHECKOUT} data part and no text", "content": "no checkout, no text"}
    return _refusal(422, "tool_failed", said)


def holds(checkout: Any, body: Any) -> bool:
    """Whether ``checkout`` has every line item a create's ``body`` asked for
    (at least the quantity): what tells that an unanswered add arrived."""
    have: dict[str, int] = {}
    lines = checkout.get("line_items") if isinstance(checkout, dict) else None
    for line in lines if isinstance(lines, list) else []:
        item = line.get("item") if isinstance(line, dict) else None
        if isinstance(item, dict) and isinstance(line.get("quantity"), int):
            have[str(item.get("id"))] = have.get(str(item.get("id")), 0) + line["quantity"]
    asked = body.get("line_items") if isinstance(body, dict) else None
    wanted = [(li["item"]["id"], li.get("quantity", 1)) for li in asked or []
              if isinstance(li, dict) and isinstance(li.get("item"), dict)]
    # a quantity that is no count (text, None, 1.5) cannot be found held
    return bool(wanted) and all(type(q) is int and have.get(str(i), 0) >= q
                                for i, q in wanted)


__all__ = ["ADDRESS", "AUTO", "CHOICES", "DIALECTS", "SAFE", "SESSION", "SESSION_ACTIONS", "TOOL",
           "answer_of", "card_dialect", "details_of", "dialect_of", "forced", "holds", "plan"]
