"""The UCP Business as a proxy for IncrementalUCP: every change is a PUT.

A UCP update replaces the whole session, while a Langshaw change carries only
what changes: the proxy reads the session, applies the change and writes it
back, then acknowledges the change in its version.

Failure policy (docs/proxy.md): calls are retried as in the SimpleUCP sample.
A change that fails (an error answer, no answer, a malformed binding) is still
acknowledged, with the error in ``messages`` (UCP's place for it) and the
session as it stands. A failed Complete is ``StatusChange(status=
"requires_escalation")``: it lives in the checkout's root scope, where Created
already bound ``messages``, so it cannot say why (the proxy's log line does),
and it happens once per checkout. The rest (a failed Create or Cancel, a second
failed Complete) goes to ``on_error`` and is recorded as an escalation.
"""

from __future__ import annotations

import logging
from typing import Any

from langshaw import LangshawProtocol
from peach import ActionInstance, BindError, Executor
from strabo.proxy import ProxyAnswerError, ProxyError
from strabo.ucp.ap2 import Ap2Signer
from strabo.ucp.checkout import (
    MAPPING,
    RETRY,
    BusinessProxy,
    cart,
    checkout_of,
    shipping_steps,
    ucp_header_hook,
    with_step,
)
from syncserver.bundled import path as bundled_protocol

log = logging.getLogger("strabo.ucp")
PROTOCOL = bundled_protocol("incremental-ucp")
CHANGES = ("line_items", "currency", "buyer", "discount_codes", "fulfillment_pref", "payment_pref")
# Each change, its acknowledgment, and what that takes from the session.
ACKS: dict[str, tuple[str, Any]] = {
    "Update": ("Updated", lambda s: {}),
    "SetBuyer": ("BuyerSet", lambda s: {}),
    "ApplyDiscounts": ("DiscountsApplied",
                       lambda s: {"discounts_applied": _dig(s, "discounts", "applied")}),
    "SetFulfillment": ("FulfillmentSet", lambda s: {"fulfillment": _dig(s, "fulfillment")}),
    "SetPayment": ("PaymentSet", lambda s: {"payment_config": _dig(s, "payment")}),
}


def _dig(session: Any, *path: str) -> Any:
    for name in path:
        session = session.get(name) if isinstance(session, dict) else None
    return session


def ucp_message(error: ProxyError) -> dict[str, Any]:
    """A UCP error message (as in a session's ``messages``) for a proxy error."""
    summary = error.summary()
    return {"type": "error", "code": summary["code"] or f"http_{summary['status']}",
            "content": summary["message"]}


def escalation(error: ProxyError, trigger: ActionInstance) -> dict[str, Any]:
    """StatusChange's bindings for a Complete the merchant failed (its ``messages``
    are Created's: the state fixes them)."""
    return {"status": "requires_escalation", "totals": None}


def incremental_proxy(
    executor: Executor, merchant_url: str, name: str = "business",
    *, ucp_version: str | None = None, ap2: Ap2Signer | None = None
) -> BusinessProxy:
    protocol = LangshawProtocol.load(PROTOCOL)
    proxy = BusinessProxy(
        name, protocol, "Business", executor,
        base_url=merchant_url, internal=["eid", "v"], header_hook=ucp_header_hook,
        ucp_version=ucp_version, ap2=ap2, **RETRY)
    proxy.route("Create->>Created", "POST-/checkout-sessions",
                response={"payment_config": "$.payment"})
    proxy.route("Get", "GET-/checkout-sessions/{id}")
    proxy.route("Put", "PUT-/checkout-sessions/{id}", request=MAPPING)
    proxy.route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete",
                failure="StatusChange", failure_response=escalation)
    proxy.route("Cancel->>Cancelled", "POST-/checkout-sessions/{id}/cancel")

    @proxy.observation(*ACKS)
    async def on_change(action: ActionInstance, performer: str) -> None:
        ack, extract = ACKS[action.name]
        change = {k: v for k, v in action.bindings.items() if k in CHANGES}
        shipping = change.pop("fulfillment_pref", None)
        session = None
        try:
            steps = shipping_steps(shipping) if action.name == "SetFulfillment" else [None]
            session = checkout_of(await proxy.request("Get", {"id": action["id"]}), "Get")
            for step in steps:
                body = {"id": session["id"], "line_items": cart(session), "payment_pref": {},
                        **({"currency": session["currency"]} if "currency" in session else {}),
                        **change}
                session = checkout_of(await proxy.request("Put", with_step(body, step)), "Put")
            answer = {"messages": session.get("messages"), **extract(session)}
        except ProxyError as error:
            log.warning("%s: %s %s not applied, acknowledged with the error: %s",
                        proxy.name, action.name, action.keys, error)
            answer = {"messages": [ucp_message(error)], **extract(session)}
        try:
            instance = proxy.build_action(ack, {**action.bindings, **answer})
        except BindError as exc:
            if exc.path is None and not exc.missing:
                raise
            # The session does not fit the protocol's types: acknowledge with why.
            misfit = ProxyAnswerError(f"{ack}: the merchant's session does not fit: {exc}",
                                      attribute=exc.attribute, path=exc.path)
            log.warning("%s: %s", proxy.name, misfit)
            instance = proxy.build_action(
                ack, {**action.bindings, "messages": [ucp_message(misfit)]})
        await proxy.attempt([instance])

    return proxy
