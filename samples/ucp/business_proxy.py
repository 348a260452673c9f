"""The UCP Business as a proxy to a real UCP merchant, for SimpleUCP (Listing 6).

Routes map Langshaw actions onto the merchant's REST API. Complete and Cancel
are handled by their routes alone. Create needs orchestration: the merchant
opens a session with a POST, then takes the shipping choice in steps (method,
then destination, then option), each a PUT.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import uuid
from pathlib import Path

from langshaw import LangshawProtocol
from peach import ActionInstance, Executor
from proxy import ProxyAdapter, ProxyError, ProxyRequest

PROTOCOL = Path(__file__).resolve().parents[2] / "protocols" / "atomic-ucp.lsh"
MAPPING = {"discount_codes": "$.discounts", "fulfillment_pref": "$.fulfillment",
           "payment_pref": "$.payment"}


def ucp_header_hook(request: ProxyRequest) -> dict[str, str]:
    """UCP's headers. The signing key comes from the environment and stays here:
    it is never bound in the protocol nor logged."""
    key = os.environ.get("UCP_SIGNING_KEY", "strabo-demo").encode()
    body = json.dumps(request.body, sort_keys=True).encode()
    return {
        "UCP-Agent": 'profile="https://strabo.example/profile"; version="2026-01-11"',
        "Request-Signature": hmac.new(key, body, hashlib.sha256).hexdigest(),
        "Request-Id": str(uuid.uuid4()),
        "Idempotency-Key": request.idempotency_key,
    }


def shipping_steps(preference: dict | None) -> list[dict | None]:
    """The merchant takes a shipping choice in steps: method, destination, option."""
    methods = (preference or {}).get("methods") or []
    if not methods:
        return [None]
    wanted = methods[0]
    steps = [{"methods": [{"type": wanted["type"]}]}]
    if wanted.get("selected_destination_id"):
        chosen = {"type": wanted["type"],
                  "selected_destination_id": wanted["selected_destination_id"]}
        steps.append({"methods": [chosen]})
        if wanted.get("groups"):
            steps.append({"methods": [{**chosen, "groups": wanted["groups"]}]})
    return steps


def business_proxy(executor: Executor, merchant_url: str, name: str = "business") -> ProxyAdapter:
    protocol = LangshawProtocol.load(PROTOCOL)
    proxy = ProxyAdapter(
        name, protocol, "Business", executor,
        base_url=merchant_url, internal=["cid"],
        header_hook=ucp_header_hook, exclude=["Create"])
    proxy.route("Create->>Created", "POST-/checkout-sessions", request=MAPPING)
    proxy.route("Update->>Updated", "PUT-/checkout-sessions/{id}", request=MAPPING)
    proxy.route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete")
    proxy.route("Cancel->>Cancelled", "POST-/checkout-sessions/{id}/cancel")

    @proxy.observation("Create")
    async def on_create(action: ActionInstance, performer: str) -> None:
        if performer == proxy.name:
            return
        first, *more = shipping_steps(action["fulfillment_pref"])
        session = None
        try:
            session = await proxy.request("Create", {**action.bindings, "fulfillment_pref": first})
            for step in more:
                line_items = [{"id": li["id"], "quantity": li["quantity"],
                               "item": {k: li["item"][k] for k in ("id", "title")}}
                              for li in session["line_items"]]
                session = await proxy.request("Update", {
                    **action.bindings, "id": session["id"], "line_items": line_items,
                    "fulfillment_pref": step})
        except ProxyError as error:
            if session is not None:  # do not leave a half-made session open
                await proxy.request("Cancel", {"id": session["id"]})
            await proxy.attempt([proxy.build_action("Failed", {**action.bindings,
                                                               "reason": error.summary()})])
            return
        await proxy.attempt([proxy.build_action("Created", {**action.bindings, **session})])

    return proxy
