"""Orders: what a completed checkout turns into, and what happens to it afterwards."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from . import _fulfillment
from .wire import (
    Checkout,
    FulfillmentEvent,
    Order,
    OrderFulfillment,
    OrderLineItem,
    OrderQuantity,
)


def from_checkout(checkout: Checkout, order_id: str, permalink_url: str) -> Order:
    """The order for a checkout that just completed: its items, totals, expectations."""
    return Order(
        id=order_id,
        checkout_id=checkout.id,
        permalink_url=permalink_url,
        line_items=[
            OrderLineItem(
                id=item.id,
                item=item.item.model_copy(deep=True),
                quantity=OrderQuantity(total=item.quantity),
                totals=[total.model_copy() for total in item.totals],
                parent_id=item.parent_id,
            )
            for item in checkout.line_items
        ],
        fulfillment=OrderFulfillment(
            expectations=_fulfillment.expectations(checkout.fulfillment, checkout.line_items)
        ),
        totals=[total.model_copy() for total in checkout.totals],
    )


def mark_shipped(order: Order) -> FulfillmentEvent:
    """Record that the order shipped (the test hook ``/testing/simulate-shipping``)."""
    event = FulfillmentEvent(
        id=f"evt_{uuid.uuid4()}", type="shipped", timestamp=datetime.now(UTC).isoformat()
    )
    order.fulfillment.events.append(event)
    return event
