"""Order updates (``PUT /orders/{id}``): appending fulfillment events and adjustments.

UCP models an order's history as two append-only logs: ``fulfillment.events`` (what
happened to shipments) and ``adjustments`` (refunds, returns, credits...). An agent
or back office sends the whole order back with new entries added; the merchant
appends the entries whose ``id`` it has not seen, after checking them against the
spec's schemas (a bad entry is a 422 naming it). Entries already recorded stay as
recorded, since a log is not rewritten, and everything else in the order (line
items, totals, expectations, ids) stays the merchant's. Line items then show how
much has shipped: ``quantity.fulfilled`` counts the units in ``shipped`` events, and
``status`` becomes ``partial`` or ``fulfilled`` accordingly.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from ._errors import RequestInvalid, invalid
from ._intake import validation_entries
from .wire import FulfillmentEvent, Order

SHIPPED = "shipped"


class _Request(BaseModel):
    """Request parts: unknown keys are ignored, as everywhere in the merchant."""

    model_config = ConfigDict(extra="ignore")


class _Entry(BaseModel):
    """A log entry as sent: spec fields checked, extra fields (``description``) kept."""

    model_config = ConfigDict(extra="allow")


class EntryLine(_Request):
    """A line item and quantity that a log entry is about."""

    id: str
    quantity: int = Field(ge=1)


class Adjustment(_Entry):
    """``types/adjustment.json``: a refund, return, credit... and its status."""

    id: str
    type: str
    occurred_at: AwareDatetime
    status: Literal["pending", "completed", "failed"]
    line_items: list[EntryLine] | None = None
    amount: int | None = None


class SpecEvent(_Entry):
    """``types/fulfillment_event.json``: something that happened to a shipment."""

    id: str
    occurred_at: AwareDatetime
    type: str
    line_items: list[EntryLine]
    tracking_number: str | None = None
    tracking_url: str | None = None
    carrier: str | None = None


class EventRef(_Entry):
    """Any event in the request: only new ones must be :class:`SpecEvent` s."""

    id: str


class OrderFulfillmentRequest(_Request):
    """The order's ``fulfillment`` as sent (expectations are the merchant's)."""

    events: list[EventRef] | None = None


class OrderUpdateRequest(_Request):
    """``PUT /orders/{id}``: the order with new log entries; other fields are ignored."""

    fulfillment: OrderFulfillmentRequest | None = None
    adjustments: list[Adjustment] | None = None


def _entry(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_none=True)


def _new_events(request: OrderUpdateRequest, known: set[str]) -> list[dict[str, Any]]:
    """The request's new events, checked against the spec (422 for a bad one)."""
    refs = request.fulfillment.events if request.fulfillment and request.fulfillment.events else []
    events, errors = [], []
    for index, ref in enumerate(refs):
        if ref.id in known:
            continue
        try:
            events.append(_entry(SpecEvent.model_validate(ref.model_dump())))
        except ValidationError as exc:
            errors += validation_entries(exc, prefix=["body", "fulfillment", "events", index])
        known.add(ref.id)
    if errors:
        raise RequestInvalid(errors)
    return events


def _event_id(event: FulfillmentEvent | dict[str, Any]) -> str:
    return event.id if isinstance(event, FulfillmentEvent) else str(event.get("id"))


def _check_lines(order: Order, entries: list[dict[str, Any]], what: str) -> None:
    ids = {line.id for line in order.line_items}
    for entry in entries:
        for line in entry.get("line_items") or []:
            if line["id"] not in ids:
                raise invalid(f"{what} {entry['id']} names unknown line item {line['id']}")


def _count_fulfilled(order: Order) -> None:
    shipped: dict[str, int] = {}
    for event in order.fulfillment.events:
        if isinstance(event, dict) and event.get("type") == SHIPPED:
            for line in event.get("line_items") or []:
                shipped[line["id"]] = shipped.get(line["id"], 0) + int(line["quantity"])
    for item in order.line_items:
        done = min(item.quantity.total, shipped.get(item.id, 0))
        item.quantity.fulfilled = done
        if done == 0:
            item.status = "processing"
        else:
            item.status = "fulfilled" if done >= item.quantity.total else "partial"


def apply(order: Order, request: OrderUpdateRequest) -> Order:
    """A copy of ``order`` with the request's new events and adjustments appended.

    Returns ``order`` itself (unchanged) when the request adds nothing.
    """
    known_events = {_event_id(event) for event in order.fulfillment.events}
    events = _new_events(request, set(known_events))
    known_adjustments = {str(a.get("id")) for a in order.adjustments or []}
    adjustments = []
    for adjustment in request.adjustments or []:
        if adjustment.id not in known_adjustments:
            known_adjustments.add(adjustment.id)
            adjustments.append(_entry(adjustment))
    if not events and not adjustments:
        return order
    _check_lines(order, events, "event")
    _check_lines(order, adjustments, "adjustment")
    updated = order.model_copy(deep=True)
    updated.fulfillment.events.extend(events)
    if adjustments:
        updated.adjustments = [*(updated.adjustments or []), *adjustments]
    _count_fulfilled(updated)
    return updated
