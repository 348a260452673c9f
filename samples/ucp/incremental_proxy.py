"""The UCP Business as a proxy for IncrementalUCP: every change is a PUT.

A UCP update replaces the whole session, while a Langshaw change carries only
what changes: the proxy reads the session, applies the change and writes it
back, then acknowledges the change in its version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langshaw import LangshawProtocol
from peach import ActionInstance, Executor
from proxy import ProxyAdapter, ProxyError
from samples.ucp.business_proxy import MAPPING, shipping_steps, ucp_header_hook

PROTOCOL = Path(__file__).resolve().parents[2] / "protocols" / "incremental-ucp.lsh"
CHANGES = ("line_items", "currency", "buyer", "discount_codes", "fulfillment_pref", "payment_pref")
# Each change, its acknowledgment, and what that takes from the session.
ACKS: dict[str, tuple[str, Any]] = {
    "Update": ("Updated", lambda s: {}),
    "SetBuyer": ("BuyerSet", lambda s: {}),
    "ApplyDiscounts": ("DiscountsApplied",
                       lambda s: {"discounts_applied": s["discounts"]["applied"]}),
    "SetFulfillment": ("FulfillmentSet", lambda s: {"fulfillment": s["fulfillment"]}),
    "SetPayment": ("PaymentSet", lambda s: {"payment_config": s["payment"]}),
}


def incremental_proxy(
    executor: Executor, merchant_url: str, name: str = "business"
) -> ProxyAdapter:
    protocol = LangshawProtocol.load(PROTOCOL)
    proxy = ProxyAdapter(
        name, protocol, "Business", executor,
        base_url=merchant_url, internal=["eid", "v"], header_hook=ucp_header_hook)
    proxy.route("Create->>Created", "POST-/checkout-sessions",
                response={"payment_config": "$.payment"})
    proxy.route("Get", "GET-/checkout-sessions/{id}")
    proxy.route("Put", "PUT-/checkout-sessions/{id}", request=MAPPING)
    proxy.route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete")
    proxy.route("Cancel->>Cancelled", "POST-/checkout-sessions/{id}/cancel")

    @proxy.observation(*ACKS)
    async def on_change(action: ActionInstance, performer: str) -> None:
        ack, extract = ACKS[action.name]
        change = {k: v for k, v in action.bindings.items() if k in CHANGES}
        shipping = change.pop("fulfillment_pref", None)
        steps = shipping_steps(shipping) if action.name == "SetFulfillment" else [None]
        try:
            session = await proxy.request("Get", {"id": action["id"]})
            for step in steps:
                line_items = [{"id": li["id"], "quantity": li["quantity"],
                               "item": {k: li["item"][k] for k in ("id", "title")}}
                              for li in session["line_items"]]
                body = {"id": session["id"], "line_items": line_items,
                        "currency": session["currency"], "payment_pref": {}, **change}
                session = await proxy.request("Put", {**body, "fulfillment_pref": step})
        except ProxyError as error:
            await proxy.report(error, proxy.routes["Put"], action)
            return
        answer = {**action.bindings, "messages": session.get("messages"), **extract(session)}
        await proxy.attempt([proxy.build_action(ack, answer)])

    return proxy
