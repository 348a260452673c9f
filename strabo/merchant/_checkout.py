"""Building a checkout session from a create request, and changing it on update.

These are pure functions of the catalog, the stock and the request: they return a
new :class:`Checkout` or raise, and never touch the merchant's state, so a failed
update leaves the session as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import _fulfillment, _pricing
from ._addressbook import AddressBook
from ._errors import invalid
from .catalog import Catalog
from .wire import (
    Buyer,
    BuyerRequest,
    Checkout,
    CheckoutCreateRequest,
    CheckoutUpdateRequest,
    Destination,
    Discounts,
    PaymentRequest,
    PaymentState,
    Platform,
)

OPEN = "ready_for_complete"
"""Status of a session that can still change (the reference never sends ``incomplete``)."""
COMPLETED = "completed"
CANCELED = "canceled"
TERMINAL = frozenset({COMPLETED, CANCELED})


def _check_currency(catalog: Catalog, currency: str) -> None:
    if currency.upper() != catalog.currency.upper():
        raise invalid(f"Unsupported currency {currency}: this merchant sells in {catalog.currency}")


def _buyer(request: BuyerRequest) -> Buyer:
    return Buyer.model_validate(request.model_dump())


def _payment(request: PaymentRequest) -> PaymentState:
    return PaymentState(
        selected_instrument_id=request.selected_instrument_id, instruments=request.instruments
    )


def reprice(checkout: Checkout, catalog: Catalog) -> None:
    """Recompute applied discounts and the totals from the cart and the chosen shipping."""
    merchandise = _pricing.subtotal(checkout.line_items)
    applied = _pricing.discounts(catalog, checkout.discounts.codes, merchandise)
    checkout.discounts.applied = applied or None
    shipping = _fulfillment.shipping_costs(checkout.fulfillment)
    checkout.totals = _pricing.totals(merchandise, shipping, applied)


@dataclass(frozen=True)
class Outcome:
    """A session as an operation left it, and addresses to save for its buyer."""

    checkout: Checkout
    learnt: tuple[Destination, ...] = ()


def create(
    catalog: Catalog,
    request: CheckoutCreateRequest,
    stock: Mapping[str, int],
    *,
    checkout_id: str,
    webhook_url: str | None,
    book: AddressBook,
) -> Outcome:
    """A new open session for ``request``; raises on unknown items, stock, currency."""
    items = _pricing.line_items(catalog, request.line_items, keep_ids=False)
    _pricing.check_stock(items, stock)
    _check_currency(catalog, request.currency)
    checkout = Checkout(
        id=checkout_id,
        line_items=items,
        buyer=_buyer(request.buyer) if request.buyer else None,
        status=OPEN,
        currency=request.currency,
        totals=[],
        payment=_payment(request.payment),
        discounts=Discounts(codes=request.discounts.codes if request.discounts else None),
        platform=Platform(webhook_url=webhook_url) if webhook_url else None,
    )
    learnt: tuple[Destination, ...] = ()
    if request.fulfillment is not None:
        email = checkout.buyer.email if checkout.buyer else None
        merged = _fulfillment.merge(request.fulfillment, None, book.saved(email))
        checkout.fulfillment, learnt = merged.fulfillment, merged.learnt
        _fulfillment.refresh(checkout.fulfillment, catalog, items, chosen_now=merged.chosen_now)
    reprice(checkout, catalog)
    return Outcome(checkout, learnt)


def update(
    catalog: Catalog,
    current: Checkout,
    request: CheckoutUpdateRequest,
    stock: Mapping[str, int],
    *,
    webhook_url: str | None,
    book: AddressBook,
) -> Outcome:
    """``current`` changed as ``request`` says (a full replacement of the cart).

    Line items, currency and payment are replaced; buyer, discount codes and
    fulfillment only when the request has them (absent means unchanged). Line items
    may keep the ids the merchant gave them.
    """
    checkout = current.model_copy(deep=True)
    line_ids = [item.id for item in request.line_items if item.id]
    duplicate = next((i for n, i in enumerate(line_ids) if i in line_ids[:n]), None)
    if duplicate is not None:
        raise invalid(f"Duplicate line item id: {duplicate}")
    checkout.line_items = _pricing.line_items(catalog, request.line_items, keep_ids=True)
    _pricing.check_stock(checkout.line_items, stock)
    _check_currency(catalog, request.currency)
    checkout.currency = request.currency
    checkout.payment = _payment(request.payment)
    if request.buyer is not None:
        checkout.buyer = _buyer(request.buyer)
    if request.discounts is not None:
        checkout.discounts = Discounts(codes=request.discounts.codes)
    chosen: frozenset[str] = frozenset()
    learnt: tuple[Destination, ...] = ()
    if request.fulfillment is not None:
        email = checkout.buyer.email if checkout.buyer else None
        merged = _fulfillment.merge(request.fulfillment, current.fulfillment, book.saved(email))
        checkout.fulfillment, chosen, learnt = merged.fulfillment, merged.chosen_now, merged.learnt
    _fulfillment.refresh(checkout.fulfillment, catalog, checkout.line_items, chosen_now=chosen)
    if webhook_url:
        checkout.platform = Platform(webhook_url=webhook_url)
    reprice(checkout, catalog)
    return Outcome(checkout, learnt)
