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
            ap2_key: dict[str, Any] | None = None) -> dict[str, Any]:
    """The profile of a merchant served at ``base``, as sent on the wire.
    ``ap2_key`` (a public JWK) adds the AP2 mandates extension and lists the key
    in ``signing_keys`` (``_ap2``)."""
    checkout = "dev.ucp.shopping.checkout"
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
