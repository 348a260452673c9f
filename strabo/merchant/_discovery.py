"""The discovery profile (``GET /.well-known/ucp``): services, capabilities, handlers.

It advertises the shopping service's REST endpoint (this server), the checkout and
order capabilities with the discount, fulfillment and buyer-consent extensions, and
two payment handlers (Shop Pay and Google Pay, test configurations). The mock
handler ``mock_payment_handler`` is accepted at completion but, as with the
reference merchant, not advertised.
"""

from __future__ import annotations

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


def _handlers(merchant_name: str, shop_id: str) -> list[PaymentHandler]:
    shop_pay = "https://shopify.dev/ucp/shop-pay-handler/" + UCP_VERSION
    google_pay = "https://pay.google.com/gp/p/ucp/" + UCP_VERSION
    card_method = {
        "type": "CARD",
        "parameters": {
            "allowedAuthMethods": ["PAN_ONLY", "CRYPTOGRAM_3DS"],
            "allowedCardNetworks": ["VISA", "MASTERCARD"],
        },
        "tokenization_specification": [
            {
                "type": "PAYMENT_GATEWAY",
                "parameters": [{"gateway": "example", "gatewayMerchantId": "strabo-test"}],
            }
        ],
    }
    return [
        PaymentHandler(
            id="shop_pay",
            name="dev.shopify.shop_pay",
            spec="https://shopify.dev/docs/agents/checkout/shop-pay-handler",
            config_schema=f"{shop_pay}/config.json",
            instrument_schemas=[f"{shop_pay}/instrument.json"],
            config={"shop_id": shop_id},
        ),
        PaymentHandler(
            id="google_pay",
            name="com.google.pay",
            spec=f"{google_pay}/",
            config_schema=f"{google_pay}/schemas/config.json",
            instrument_schemas=[f"{google_pay}/schemas/card_payment_instrument.json"],
            config={
                "api_version": 2,
                "api_version_minor": 0,
                "merchant_info": {
                    "merchant_name": merchant_name,
                    "merchant_id": "TEST",
                    "merchant_origin": "localhost",
                },
                "allowed_payment_methods": [card_method],
            },
        ),
    ]


def profile(endpoint: str, *, merchant_name: str, shop_id: str) -> DiscoveryProfile:
    """The profile of a merchant whose REST endpoint is ``endpoint`` (ending in ``/``)."""
    checkout = "dev.ucp.shopping.checkout"
    return DiscoveryProfile(
        ucp=DiscoveryEnvelope(
            services={
                "dev.ucp.shopping": Service(
                    spec=f"{_UCP}/specification/reference",
                    rest=RestTransport(
                        schema_uri=f"{_UCP}/services/shopping/rest.openapi.json",
                        endpoint=endpoint,
                    ),
                )
            },
            capabilities=[
                _capability("checkout"),
                _capability("order"),
                *(_capability(name, extends=checkout) for name in _EXTENSIONS),
            ],
        ),
        payment=DiscoveryPayment(handlers=_handlers(merchant_name, shop_id)),
    )
