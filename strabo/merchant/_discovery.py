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


def profile(base: str, *, catalog: Catalog, shop_id: str) -> dict[str, Any]:
    """The profile of a merchant served at ``base``, as sent on the wire."""
    checkout = "dev.ucp.shopping.checkout"
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
    )
    return document.model_dump(mode="json", by_alias=True, exclude_none=True)
