"""What the sample Platforms need to buy from a merchant of one's own choosing
(``strabo demo --merchant URL --product ID``): line items naming its product,
a buyer with a shipping address, and a payment instrument through a handler
its checkout offers.

The buyer carries the address (UCP's address field names) because SimpleUCP's
shipping steps send a method type only, and a tool-style A2A agent (Google's
UCP samples' business agent, :mod:`strabo.ucp.a2a_tools`) takes the address
with the buyer's details; IncrementalUCP's Platform sets it with SetBuyer.
"""

from __future__ import annotations

from typing import Any

SAMPLE_ADDRESS = {
    "first_name": "John", "last_name": "Doe", "street_address": "1600 Amphitheatre Pkwy",
    "address_locality": "Mountain View", "address_region": "CA", "postal_code": "94043",
    "address_country": "US",
}
"""A shipping address, in UCP's address fields (a buyer may carry it)."""


def line_items_of(product: str, quantity: int = 1) -> list[dict[str, Any]]:
    """The line items that buy ``quantity`` of the merchant's product ``product``."""
    return [{"item": {"id": product, "title": product}, "quantity": quantity}]


def payment_for(payment: Any, instrument: dict[str, Any]) -> dict[str, Any]:
    """``instrument`` through a handler the merchant's checkout ``payment``
    offers: its own when offered (or when the checkout lists none), else the
    first offered (a merchant's test handler, e.g. Google's agent's
    ``example_payment_provider``, which takes any card)."""
    handlers = payment.get("handlers") if isinstance(payment, dict) else None
    offered = [h["id"] for h in handlers if isinstance(h, dict) and isinstance(
        h.get("id"), str)] if isinstance(handlers, list) else []
    if offered and instrument.get("handler_id") not in offered:
        return {**instrument, "handler_id": offered[0]}
    return instrument


__all__ = ["SAMPLE_ADDRESS", "line_items_of", "payment_for"]
