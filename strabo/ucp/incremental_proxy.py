"""The UCP Business as a proxy for IncrementalUCP: every change is a PUT.

A UCP update replaces the whole session, while a Langshaw change carries only
what changes: the proxy reads the session, applies the change and writes it
back, then acknowledges the change in its version.

Failure policy (docs/proxy.md): calls are retried as in the SimpleUCP sample.
A change that fails (an error answer, no answer, a malformed binding) is still
acknowledged, with the error in ``messages`` (UCP's place for it) and the
session as it stands. A Complete that fails, or whose answer does not fit
Completed, is a ``StatusChange`` whose status says whether an order may exist
(:func:`status_after`): ``requires_escalation`` when the session is still open
(no order: the buyer may go on with the merchant), else the session's status
(``completed``: the merchant placed an order its answer does not describe;
``canceled``), or ``complete_in_progress`` when the outcome is unknown (no
answer, the session unreadable). StatusChange lives in the checkout's root scope, where Created
already bound ``messages``, so it cannot say why (the proxy's log line does),
and it happens once per checkout and ends it: after Complete the Platform may
not Cancel (``nono Complete Cancel``). Completed and Cancelled live there too,
and carry no ``messages`` for the same reason. The rest (a failed Create or
Cancel) goes to ``on_error`` and is recorded as an escalation.
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


OPEN = frozenset({"incomplete", "ready_for_complete", "requires_escalation"})
ENDED = frozenset({"completed", "canceled", "complete_in_progress"})


def status_after(said: Any, session: dict[str, Any] | None) -> str:
    """StatusChange's status for a Complete that cannot be said as Completed:
    what the answer said (``said``) or the session read afterwards says, when
    the checkout has ended or may yet (an order may exist: the Platform must
    not cancel); ``requires_escalation`` for a session still open (no order);
    ``complete_in_progress`` when nothing can tell (the outcome is unknown)."""
    if said in ENDED:
        return str(said)
    status = session.get("status") if session is not None else None
    if status in ENDED:
        return str(status)
    return "requires_escalation" if status in OPEN else "complete_in_progress"


def escalation(error: ProxyError, trigger: ActionInstance) -> dict[str, Any]:
    """StatusChange's bindings for a Complete the merchant failed (its ``messages``
    are Created's: the state fixes them); the status is :func:`status_after`'s,
    which the proxy's Complete handler leaves in ``trigger``'s bindings."""
    return {"status": trigger.get("status") or "requires_escalation", "totals": None}


def incremental_proxy(
    executor: Executor, merchant_url: str, name: str = "business",
    *, ucp_version: str | None = None, ap2: Ap2Signer | None = None,
    transport: str = "rest"
) -> BusinessProxy:
    protocol = LangshawProtocol.load(PROTOCOL)
    proxy = BusinessProxy(
        name, protocol, "Business", executor,
        base_url=merchant_url, internal=["eid", "v"], header_hook=ucp_header_hook,
        exclude=["Complete"], ucp_version=ucp_version,
        ucp_transport=transport, ap2=ap2, **RETRY)
    proxy.route("Create->>Created", "POST-/checkout-sessions",
                response={"payment_config": "$.payment"})
    proxy.route("Get", "GET-/checkout-sessions/{id}")
    proxy.route("Put", "PUT-/checkout-sessions/{id}", request=MAPPING)
    proxy.route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete",
                failure="StatusChange", failure_response=escalation)
    proxy.route("Cancel->>Cancelled", "POST-/checkout-sessions/{id}/cancel")

    async def session_status(checkout: Any) -> dict[str, Any] | None:
        try:
            return checkout_of(await proxy.request("Get", {"id": checkout}), "Get")
        except ProxyError as error:
            log.warning("%s: cannot read session %s: %s", proxy.name, checkout, error)
            return None

    @proxy.observation("Complete")
    async def on_complete(action: ActionInstance, performer: str) -> None:
        """Completed with the order; else StatusChange with :func:`status_after`,
        so that the Platform never cancels a checkout whose order may exist."""
        if performer == proxy.name:
            return
        route = proxy.routes["Complete"]
        try:
            answer = await proxy.request("Complete", action.bindings)
        except ProxyError as error:
            status = status_after(None, await session_status(action["id"]))
            await proxy.fail(route, _with_status(action, status), error)
            return

        async def misfit(problem: Any, attribute: str | None, path: str | None) -> None:
            """The merchant answered, and the order may exist: fail with the status
            the answer or the session gives."""
            said = answer.get("status") if isinstance(answer, dict) else None
            status = status_after(said, None if said in ENDED else
                                  await session_status(action["id"]))
            order = proxy.placed.get(action["id"])
            placed = f" (the merchant placed order {order})" if order else ""
            error = ProxyAnswerError(f"Completed: the answer does not fit{placed}: {problem}",
                                     attribute=attribute, path=path, route=route.name)
            await proxy.fail(route, _with_status(action, status), error)

        try:  # a response path the answer cannot be read along (a route changed)
            found = route.extract(answer, route.response_map)
        except ProxyAnswerError as unread:
            await misfit(unread, unread.attribute, unread.path)
            return
        data = {**action.bindings, **{k: v for k, v in found.items() if k not in proxy.internal}}
        try:
            proxy.build_action("Completed", data)
        except BindError as exc:
            if exc.path is None and not exc.missing:  # not the answer's fault: reply says
                await proxy.reply(route, action, data)
                return
            await misfit(exc, exc.attribute, exc.path)
            return
        await proxy.reply(route, action, data)

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


def _with_status(action: ActionInstance, status: str) -> ActionInstance:
    """``action`` carrying ``status`` for :func:`escalation` (not an attribute of
    Complete: it goes nowhere else)."""
    return ActionInstance(action.action, {**action.bindings, "status": status})
