"""The payment handlers this merchant advertises, and the documents describing them.

UCP requires each advertised handler to name a ``spec``, a ``config_schema`` and
``instrument_schemas``: URLs an agent can fetch. This merchant's handlers are test
stand-ins (no money moves, see ``_payment``), so the documents that describe how
*they* behave are served by the merchant itself, under
``/payment-handlers/{id}``, ``.../config.json`` and ``.../instrument.json``. Pointing
at the real providers' pages would promise behaviour (real tokenization) that this
merchant does not have, and would make discovery depend on third-party sites.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._payment import FAIL_TOKEN, FRAUD_TOKEN, MOCK_HANDLER, SUCCESS_TOKEN
from .catalog import Catalog
from .wire import UCP_VERSION

PATH = "/payment-handlers"
"""Where the handler documents are served (``PATH/{id}``, ``.../config.json``, ...)."""


@dataclass(frozen=True)
class HandlerInfo:
    """One advertised handler: its ids, what it does here, and its config's schema."""

    id: str
    name: str
    summary: str
    config_properties: dict[str, Any]


HANDLERS = (
    HandlerInfo(
        id="shop_pay",
        name="com.shopify.shop_pay",
        summary="Test stand-in for Shop Pay: any token credential pays.",
        config_properties={"shop_id": {"type": "string"}},
    ),
    HandlerInfo(
        id="google_pay",
        name="com.google.pay",
        summary="Test stand-in for Google Pay: any token credential pays.",
        config_properties={
            "api_version": {"type": "integer"},
            "api_version_minor": {"type": "integer"},
            "merchant_info": {"type": "object"},
            "allowed_payment_methods": {"type": "array"},
        },
    ),
    HandlerInfo(
        id=MOCK_HANDLER,
        name="com.example.mock_payment",
        summary=(
            f"Mock handler with fixed outcomes: token {SUCCESS_TOKEN!r} pays, "
            f"{FAIL_TOKEN!r} is declined (402 INSUFFICIENT_FUNDS), {FRAUD_TOKEN!r} is "
            "refused (403 FRAUD_DETECTED), any other token is unknown (402 UNKNOWN_TOKEN)."
        ),
        config_properties={
            "environment": {"type": "string"},
            "tokens": {"type": "object", "additionalProperties": {"type": "string"}},
            "instruments": {"type": "array", "items": {"type": "object"}},
        },
    ),
)


def handler(handler_id: str) -> HandlerInfo | None:
    """The advertised handler with this id, if any."""
    return next((h for h in HANDLERS if h.id == handler_id), None)


def config(info: HandlerInfo, catalog: Catalog, shop_id: str) -> dict[str, Any]:
    """The handler's ``config`` in this merchant's profile."""
    if info.id == "shop_pay":
        return {"shop_id": shop_id}
    if info.id == "google_pay":
        return {
            "api_version": 2,
            "api_version_minor": 0,
            "merchant_info": {
                "merchant_name": catalog.merchant_name,
                "merchant_id": "TEST",
                "merchant_origin": "localhost",
            },
            "allowed_payment_methods": [
                {
                    "type": "CARD",
                    "parameters": {
                        "allowedAuthMethods": ["PAN_ONLY", "CRYPTOGRAM_3DS"],
                        "allowedCardNetworks": ["VISA", "MASTERCARD"],
                    },
                    "tokenization_specification": [
                        {
                            "type": "PAYMENT_GATEWAY",
                            "parameters": [
                                {"gateway": "example", "gatewayMerchantId": "strabo-test"}
                            ],
                        }
                    ],
                }
            ],
        }
    return {
        "environment": "TEST",
        "tokens": {
            SUCCESS_TOKEN: "paid",
            FAIL_TOKEN: "declined: 402 INSUFFICIENT_FUNDS",
            FRAUD_TOKEN: "refused: 403 FRAUD_DETECTED",
        },
        "instruments": [
            instrument.model_dump(exclude={"handler_id"})
            for instrument in catalog.payment_instruments
            if instrument.handler_id == info.id
        ],
    }


def urls(info: HandlerInfo, base: str) -> dict[str, Any]:
    """``spec``, ``config_schema`` and ``instrument_schemas`` for a server at ``base``."""
    root = f"{base.rstrip('/')}{PATH}/{info.id}"
    return {
        "spec": root,
        "config_schema": f"{root}/config.json",
        "instrument_schemas": [f"{root}/instrument.json"],
    }


def spec_document(info: HandlerInfo, base: str) -> dict[str, Any]:
    """The handler's specification, as this merchant implements it."""
    return {
        "name": info.name,
        "version": UCP_VERSION,
        "id": info.id,
        "description": info.summary,
        "instrument": (
            "Send one instrument as payment_data when completing a checkout: "
            '{"id", "handler_id": "' + info.id + '", "type", "credential": '
            '{"type": "token", "token": ...}}. A card credential ({"type": "card"}) '
            "is accepted by every handler."
        ),
        **urls(info, base),
    }


def config_schema(info: HandlerInfo, base: str) -> dict[str, Any]:
    """JSON Schema of the handler's ``config`` object."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": urls(info, base)["config_schema"],
        "title": f"{info.name} config",
        "type": "object",
        "properties": info.config_properties,
        "additionalProperties": True,
    }


def instrument_schema(info: HandlerInfo, base: str) -> dict[str, Any]:
    """JSON Schema of an instrument the handler accepts at completion."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": urls(info, base)["instrument_schemas"][0],
        "title": f"{info.name} instrument",
        "type": "object",
        "required": ["id", "handler_id", "type", "credential"],
        "properties": {
            "id": {"type": "string"},
            "handler_id": {"const": info.id},
            "type": {"type": "string"},
            "brand": {"type": "string"},
            "last_digits": {"type": "string"},
            "billing_address": {"type": "object"},
            "credential": {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"type": "string"}, "token": {"type": "string"}},
            },
        },
    }
