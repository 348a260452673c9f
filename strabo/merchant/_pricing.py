"""Line items, discounts and totals: the merchant is the authority on every amount.

Agents send item ids and quantities; titles and prices always come from the
catalog. Totals are listed in the order agents expect from the reference merchant:
``subtotal``, one ``fulfillment`` line per chosen shipping option, one ``discount``
line per applied code, then ``total``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping

from ._errors import MissingItemTitle, invalid, out_of_stock
from .catalog import Catalog
from .wire import Allocation, AppliedDiscount, Item, LineItem, LineItemRequest, Total

SUBTOTAL_PATH = "$.totals[?(@.type=='subtotal')]"
"""Discounts are taken from the merchandise subtotal (never from shipping)."""


def line_items(
    catalog: Catalog, requested: list[LineItemRequest], *, keep_ids: bool
) -> list[LineItem]:
    """Price the requested line items from the catalog.

    Line item ids are new unless ``keep_ids`` (an update may name the ids it got
    before). A missing title fails first (see :class:`MissingItemTitle`), then the
    first unknown product is a 400, as with the reference merchant.
    """
    if any(request.item.title is None for request in requested):
        raise MissingItemTitle()
    priced = []
    for request in requested:
        product = catalog.product(request.item.id)
        if product is None:
            raise invalid(f"Product {request.item.id} not found")
        amount = product.price * request.quantity
        priced.append(
            LineItem(
                id=(request.id if keep_ids and request.id else str(uuid.uuid4())),
                item=Item(
                    id=product.id, title=product.title, price=product.price,
                    image_url=product.image_url,
                ),
                quantity=request.quantity,
                totals=[Total(type="subtotal", amount=amount), Total(type="total", amount=amount)],
                parent_id=request.parent_id,
            )
        )
    return priced


def check_stock(items: Iterable[LineItem], stock: Mapping[str, int]) -> None:
    """400 OUT_OF_STOCK unless the shop holds every product in the quantity asked.

    Quantities of the same product on several lines are added up.
    """
    wanted: Counter[str] = Counter()
    for item in items:
        wanted[item.item.id] += item.quantity
    for product_id, quantity in wanted.items():
        if stock.get(product_id, 0) < quantity:
            raise out_of_stock(f"Insufficient stock for item {product_id}")


def subtotal(items: Iterable[LineItem]) -> int:
    """The merchandise subtotal: sum of the line items' amounts."""
    return sum(item.item.price * item.quantity for item in items)


def discounts(catalog: Catalog, codes: list[str] | None, merchandise: int) -> list[AppliedDiscount]:
    """The discounts that the entered codes give on a merchandise subtotal.

    Codes apply in the order entered, each to what is left of the subtotal after the
    earlier ones, so the subtotal never goes below zero. Unknown codes, repeated codes
    and codes worth nothing are ignored.
    """
    applied: list[AppliedDiscount] = []
    remaining = merchandise
    for code in dict.fromkeys(codes or []):
        discount = catalog.discount(code)
        if discount is None:
            continue
        if discount.type == "percentage":
            amount = remaining * discount.value // 100
        else:
            amount = min(discount.value, remaining)
        if amount <= 0:
            continue
        remaining -= amount
        applied.append(
            AppliedDiscount(
                code=code,
                title=discount.title,
                amount=amount,
                allocations=[Allocation(path=SUBTOTAL_PATH, amount=amount)],
            )
        )
    return applied


def totals(merchandise: int, shipping: list[int], applied: list[AppliedDiscount]) -> list[Total]:
    """The checkout's totals list: subtotal, shipping lines, discount lines, total."""
    lines = [Total(type="subtotal", amount=merchandise)]
    lines += [Total(type="fulfillment", amount=amount) for amount in shipping]
    lines += [Total(type="discount", amount=discount.amount) for discount in applied]
    grand = merchandise + sum(shipping) - sum(discount.amount for discount in applied)
    lines.append(Total(type="total", amount=grand))
    return lines
