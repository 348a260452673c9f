"""The UCP Business as a proxy to a real UCP merchant, for SimpleUCP (Listing 6).

Routes map Langshaw actions onto the merchant's REST API. Complete and Cancel
are handled by their routes alone. Create needs orchestration: the merchant
opens a session with a POST, then takes the shipping choice in steps (method,
then destination, then option), each a PUT.

Failure policy (docs/proxy.md): every call is retried under the same
Idempotency-Key (RETRY). Then a failed Create, whatever the cause (an error
answer, no answer, a malformed binding), is the protocol's ``Failed`` with the
reason, and the Platform sees it. After ``Created`` SimpleUCP gives the Business
no action but ``Completed`` (``nono Created Failed``), so a failed Complete or
Cancel goes to ``on_error``: the proxy records an :class:`Escalation` for
whoever runs it, and the Platform sees no answer.
"""

from __future__ import annotations

import logging

from langshaw import LangshawProtocol
from peach import ActionInstance, Executor
from strabo.ucp import a2a_tools
from strabo.ucp.ap2 import Ap2Signer
from strabo.ucp.checkout import (
    MAPPING,
    RETRY,
    BusinessProxy,
    open_checkout,
    shipping_steps,
    ucp_header_hook,
)
from syncserver.bundled import path as bundled_protocol

log = logging.getLogger("strabo.ucp")
PROTOCOL = bundled_protocol("atomic-ucp")


def business_proxy(
    executor: Executor, merchant_url: str, name: str = "business",
    *, ucp_version: str | None = None, ap2: Ap2Signer | None = None,
    transport: str = "rest", a2a_dialect: str = "auto"
) -> BusinessProxy:
    """The SimpleUCP Business for the merchant at ``merchant_url``, speaking
    ``ucp_version`` (None: the newest its profile offers, see BusinessProxy).

    ``transport`` is what checkout goes over ("rest", "mcp" or "a2a"); over A2A,
    ``a2a_dialect`` is the dialect: "auto" (the agent card says), "session"
    (strabo's messages) or "tool" (Google's sample agent's tools), forced
    whatever the card says (with a warning when it says otherwise). ValueError
    for another value, or for a forced dialect with another transport."""
    a2a_tools.forced(a2a_dialect)  # ValueError for a value not in CHOICES, first
    if a2a_dialect != "auto" and transport != "a2a":
        raise ValueError(f"a2a_dialect={a2a_dialect!r} is for transport='a2a', "
                         f"not {transport!r}")
    protocol = LangshawProtocol.load(PROTOCOL)
    proxy = BusinessProxy(
        name, protocol, "Business", executor,
        base_url=merchant_url, internal=["cid"],
        header_hook=ucp_header_hook, exclude=["Create"], ucp_version=ucp_version,
        ucp_transport=transport, ap2=ap2, a2a_dialect=a2a_dialect,
        **RETRY)
    proxy.route("Create->>Created", "POST-/checkout-sessions", request=MAPPING, failure="Failed")
    proxy.route("Update->>Updated", "PUT-/checkout-sessions/{id}", request=MAPPING)
    proxy.route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete")
    proxy.route("Cancel->>Cancelled", "POST-/checkout-sessions/{id}/cancel")

    @proxy.observation("Create")
    async def on_create(action: ActionInstance, performer: str) -> None:
        if performer != proxy.name:
            await open_checkout(proxy, action)

    return proxy


__all__ = ["PROTOCOL", "RETRY", "business_proxy", "shipping_steps", "ucp_header_hook"]
