"""Shipping in three steps: ask for shipping, pick a destination, pick an option.

1. ``methods: [{"type": "shipping"}]`` opens a shipping method; a known buyer's saved
   addresses (or the destinations sent inline) become its ``destinations``. An
   inline address without an id that the buyer has saved keeps its saved id.
2. ``selected_destination_id`` picks one; the merchant answers with one group
   covering all line items and the shipping ``options`` for that destination.
3. ``groups: [{"selected_option_id": ...}]`` picks an option; its price becomes a
   ``fulfillment`` line of the totals.

A method sent again without ids is the same method: its destinations and groups
carry over unless the request replaces them. Only ``shipping`` is supported, and all
line items ship together in one group.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ._addressbook import address_key
from ._errors import invalid
from .catalog import ANY_COUNTRY, Catalog
from .wire import (
    Destination,
    DestinationRequest,
    Expectation,
    ExpectationLine,
    Fulfillment,
    FulfillmentGroup,
    FulfillmentMethod,
    FulfillmentOption,
    FulfillmentRequest,
    LineItem,
    PostalAddress,
    Total,
)

SHIPPING = "shipping"


def _inline(
    destination: DestinationRequest, saved: Sequence[Destination], learnt: list[Destination]
) -> Destination:
    """A destination sent inline; one without an id may be a saved address re-typed.

    Without an id, the buyer's saved address with the same content is reused (its
    id and shape); otherwise the address gets a new id and is added to ``learnt``,
    for the merchant to save in the buyer's address book.
    """
    fields = destination.model_dump(exclude={"id"})
    if destination.id:
        return Destination(id=destination.id, **fields)
    fresh = Destination(id=str(uuid.uuid4()), **fields)
    match = next((d for d in saved if address_key(d) == address_key(fresh)), None)
    if match is not None:
        return match.model_copy(deep=True)
    learnt.append(fresh)
    return fresh


def shipping_options(
    catalog: Catalog, destination: Destination, items: Sequence[LineItem]
) -> list[FulfillmentOption]:
    """The options for shipping ``items`` to ``destination``, cheapest first.

    For each service level the rate for the destination's country wins over the
    ``*`` rate. Standard shipping is free (and says so) for large orders or when
    the order holds a free-shipping item. No country, no options.
    """
    country = destination.address_country
    if not country:
        return []
    chosen: dict[str, tuple[bool, int, str, str]] = {}
    for rate in catalog.shipping_rates:
        if rate.country not in (country, ANY_COUNTRY):
            continue
        specific = rate.country == country
        known = chosen.get(rate.service_level)
        if known is None or (specific and not known[0]):
            chosen[rate.service_level] = (specific, rate.price, rate.id, rate.title)
    merchandise = sum(item.item.price * item.quantity for item in items)
    in_cart = {item.item.id for item in items}
    free = any(
        (rule.min_subtotal is None or merchandise >= rule.min_subtotal)
        and (not rule.item_ids or not in_cart.isdisjoint(rule.item_ids))
        for rule in catalog.free_shipping_rules()
    )
    options = []
    for level, (_, price, rate_id, title) in sorted(chosen.items(), key=lambda kv: kv[1][1]):
        if free and level == "standard":
            price, title = 0, f"{title} (Free)"
        options.append(
            FulfillmentOption(
                id=rate_id,
                title=title,
                totals=[Total(type="subtotal", amount=price), Total(type="total", amount=price)],
            )
        )
    return options


def _selected_destination(method: FulfillmentMethod) -> Destination | None:
    return next(
        (d for d in method.destinations or [] if d.id == method.selected_destination_id), None
    )


def refresh(
    fulfillment: Fulfillment | None,
    catalog: Catalog,
    items: Sequence[LineItem],
    *,
    chosen_now: frozenset[str] = frozenset(),
) -> None:
    """Recompute every method's groups and options for the current line items.

    A method with a chosen destination gets one group (kept if it had one) whose
    options are priced afresh. A chosen option that is not offered is a 400 when the
    agent chose it in this request (its group id is in ``chosen_now``); an earlier
    choice that a new destination or cart no longer offers is dropped.
    """
    if fulfillment is None:
        return
    ids = [item.id for item in items]
    for method in fulfillment.methods:
        method.line_item_ids = list(ids)
        destination = _selected_destination(method)
        if destination is None:
            method.groups = None
            continue
        options = shipping_options(catalog, destination, items)
        offered = {option.id for option in options}
        groups = method.groups or [FulfillmentGroup(id=f"group_{uuid.uuid4()}", line_item_ids=[])]
        for group in groups:
            group.line_item_ids = list(ids)
            group.options = [option.model_copy(deep=True) for option in options]
            if group.selected_option_id and group.selected_option_id not in offered:
                if group.id in chosen_now:
                    raise invalid(f"Unknown fulfillment option: {group.selected_option_id}")
                group.selected_option_id = None
        method.groups = groups


@dataclass(frozen=True)
class Merged:
    """The fulfillment after a request, and what the merchant must do next.

    ``chosen_now`` are the ids of the groups whose option the request chose (pass
    them to :func:`refresh`, which prices the options and checks those choices);
    ``learnt`` are new addresses for the buyer's address book.
    """

    fulfillment: Fulfillment
    chosen_now: frozenset[str]
    learnt: tuple[Destination, ...]


def merge(
    request: FulfillmentRequest,
    current: Fulfillment | None,
    saved: list[Destination],
) -> Merged:
    """The fulfillment after a create or update that sent ``request``."""
    current_methods = current.methods if current else []
    methods = []
    chosen_now: set[str] = set()
    learnt: list[Destination] = []
    for wanted in request.methods or []:
        if wanted.type != SHIPPING:
            raise invalid(f"Unsupported fulfillment method type: {wanted.type}")
        previous = next((m for m in current_methods if wanted.id and m.id == wanted.id), None)
        if previous is None and not wanted.id and len(current_methods) == 1:
            previous = current_methods[0]
        if wanted.destinations:
            destinations = [_inline(d, saved, learnt) for d in wanted.destinations]
        elif previous is not None and previous.destinations:
            destinations = [d.model_copy(deep=True) for d in previous.destinations]
        else:
            destinations = [d.model_copy(deep=True) for d in saved]
        chosen = wanted.selected_destination_id
        if chosen and all(d.id != chosen for d in destinations):
            raise invalid(f"Unknown fulfillment destination: {chosen}")
        old_groups = (previous.groups or []) if previous is not None else []
        if wanted.groups is not None:
            groups = []
            for index, group in enumerate(wanted.groups):
                reuse = old_groups[index].id if index < len(old_groups) else None
                group_id = group.id or reuse or f"group_{uuid.uuid4()}"
                if group.selected_option_id:
                    chosen_now.add(group_id)
                groups.append(
                    FulfillmentGroup(
                        id=group_id, line_item_ids=[], selected_option_id=group.selected_option_id
                    )
                )
        else:
            groups = [g.model_copy(deep=True) for g in old_groups]
        if not chosen and any(g.selected_option_id for g in wanted.groups or []):
            raise invalid("Choose a fulfillment destination before a fulfillment option")
        methods.append(
            FulfillmentMethod(
                id=wanted.id or (previous.id if previous is not None else str(uuid.uuid4())),
                type=SHIPPING,
                line_item_ids=[],
                destinations=destinations or None,
                selected_destination_id=chosen,
                groups=groups or None,
            )
        )
    return Merged(Fulfillment(methods=methods), frozenset(chosen_now), tuple(learnt))


def shipping_costs(fulfillment: Fulfillment | None) -> list[int]:
    """The price of each chosen option, one entry per group that has one."""
    costs = []
    for method in fulfillment.methods if fulfillment else []:
        for group in method.groups or []:
            option = next((o for o in group.options if o.id == group.selected_option_id), None)
            if option is not None:
                costs.append(next((t.amount for t in option.totals if t.type == "total"), 0))
    return costs


def is_ready(fulfillment: Fulfillment | None) -> bool:
    """Whether every shipping method has a destination and every group an option."""
    if fulfillment is None or not fulfillment.methods:
        return False
    return all(
        method.selected_destination_id
        and method.groups
        and all(group.selected_option_id for group in method.groups)
        for method in fulfillment.methods
    )


def expectations(fulfillment: Fulfillment | None, items: Sequence[LineItem]) -> list[Expectation]:
    """What an order can expect: per chosen option, which items go where."""
    quantities = {item.id: item.quantity for item in items}
    result = []
    for method in fulfillment.methods if fulfillment else []:
        destination = _selected_destination(method)
        address = (
            PostalAddress.model_validate(destination.model_dump(include=set(PostalAddress.model_fields)))
            if destination is not None
            else None
        )
        for group in method.groups or []:
            option = next((o for o in group.options if o.id == group.selected_option_id), None)
            if option is None:
                continue
            result.append(
                Expectation(
                    id=f"exp_{uuid.uuid4()}",
                    line_items=[
                        ExpectationLine(id=line_id, quantity=quantities[line_id])
                        for line_id in group.line_item_ids
                        if line_id in quantities
                    ],
                    method_type=method.type,
                    destination=address,
                    description=option.title,
                )
            )
    return result
