"""The discovery profile (``GET /.well-known/ucp``): services, capabilities, handlers.

The profile is valid against the UCP 2026-01-11 discovery schema
(``discovery/profile_schema.json``): every capability has ``name``, ``version``,
``spec`` and ``schema``, and optional fields are left out rather than sent as
``null`` (the schema types them as strings and objects, so a ``null`` is invalid).
Capability and service URLs are on ucp.dev, as the spec's namespace rule requires
for ``dev.ucp.*`` names. The payment handlers are this merchant's test stand-ins,
all three of them (``mock_payment_handler`` included, since agents pay with it);
their documents are served by the merchant itself (see ``_handlers``).
"""

from __future__ import annotations

from functools import cache
from importlib.util import find_spec
from typing import Any

from strabo.ucpwire import NEW
from strabo.ucpwire.ap2 import CAPABILITY, VP_FORMATS

from . import _handlers
from .catalog import Catalog
from .wire import (
    UCP_VERSION,
    Capability,
    DiscoveryEnvelope,
    DiscoveryPayment,
    DiscoveryProfile,
    PaymentHandler,
    RestTransport,
    Service,
)

_UCP = "https://ucp.dev"
_EXTENSIONS = ("discount", "fulfillment", "buyer_consent")


def _capability(name: str, *, extends: str | None = None) -> Capability:
    page = name.replace("_", "-")
    return Capability(
        name=f"dev.ucp.shopping.{name}",
        spec=f"{_UCP}/specification/{page}",
        schema_uri=f"{_UCP}/schemas/shopping/{name}.json",
        extends=extends,
    )


def profile(base: str, *, catalog: Catalog, shop_id: str,
            ap2_key: dict[str, Any] | None = None, a2a: bool | None = None) -> dict[str, Any]:
    """The profile of a merchant served at ``base``, as sent on the wire.
    ``ap2_key`` (a public JWK) adds the AP2 mandates extension and lists the key
    in ``signing_keys`` (``_ap2``). ``a2a`` lists the A2A transport (its agent
    card, ``_a2a``); None lists it when :func:`a2a_available`, as ``create_app``
    serves it then (the 2026-04-08 profile, made from this one, lists it too)."""
    checkout = "dev.ucp.shopping.checkout"
    if a2a is None:
        a2a = a2a_available()
    ap2 = [] if ap2_key is None else [Capability(
        name=CAPABILITY, spec=f"{_UCP}/specification/ap2-mandates",
        schema_uri=f"{_UCP}/schemas/shopping/ap2_mandate.json", extends=checkout,
        config={"vp_formats_supported": VP_FORMATS})]
    document = DiscoveryProfile(
        ucp=DiscoveryEnvelope(
            version=UCP_VERSION,
            services={
                "dev.ucp.shopping": Service(
                    spec=f"{_UCP}/specification/overview",
                    rest=RestTransport(
                        schema_uri=f"{_UCP}/services/shopping/rest.openapi.json",
                        endpoint=base.rstrip("/") + "/",
                    ),
                    a2a={"endpoint": base.rstrip("/") + A2A_CARD_PATH} if a2a else None,
                )
            },
            capabilities=[
                _capability("checkout"),
                _capability("order"),
                *(_capability(name, extends=checkout) for name in _EXTENSIONS),
                *ap2,
            ],
        ),
        payment=DiscoveryPayment(
            handlers=[
                PaymentHandler(
                    id=info.id,
                    name=info.name,
                    config=_handlers.config(info, catalog, shop_id),
                    **_handlers.urls(info, base),
                )
                for info in _handlers.HANDLERS
            ]
        ),
        signing_keys=[ap2_key] if ap2_key is not None else None,
    )
    return document.model_dump(mode="json", by_alias=True, exclude_none=True)


MCP_PATH = "/ucp/mcp"
"""Where a merchant serving 2026-04-08 serves UCP checkout over MCP (``_mcp``):
the path of the spec's own example endpoint (checkout-mcp.md, *Discovery*)."""


def mcp_service(base: str) -> dict[str, Any]:
    """The 2026-04-08 ``services["dev.ucp.shopping"]`` entry of the MCP transport
    (checkout-mcp.md, *Discovery*): the 2026-01-11 profile has none, since that
    version's MCP binding (``_meta.ucp``) is not the one served."""
    return {
        "version": NEW,
        "spec": f"{_UCP}/{NEW}/specification/overview",
        "transport": "mcp",
        "schema": f"{_UCP}/{NEW}/services/shopping/mcp.openrpc.json",
        "endpoint": base.rstrip("/") + MCP_PATH,
    }


A2A_PATH = "/ucp/a2a"
"""Where the merchant serves UCP checkout over A2A (``_a2a``): JSON-RPC, A2A
1.0's ``SendMessage`` and 0.3's ``message/send``."""
A2A_CARD_PATH = A2A_PATH + "/.well-known/agent-card.json"
"""Its agent card: the ``endpoint`` of the profile's ``a2a`` transport
(checkout/a2a.md, *Transport Discovery*), at the A2A well-known path under the
agent's URL, where A2A clients look for it."""


@cache
def a2a_available() -> bool:
    """Whether the A2A SDK and its HTTP server are installed (the ``a2a`` extra):
    then every merchant serves A2A; without them none does, and nothing loads it."""
    try:
        return find_spec("a2a") is not None and find_spec("sse_starlette") is not None
    except (ImportError, ValueError):
        return False
