"""Pydantic models of the UCP checkout wire format, protocol version 2026-01-11.

They describe what the recorded reference merchant sends and accepts, with the
same keys and nesting. Optional fields are ``None`` in the models, but the spec's
schemas allow no ``null`` for an absent field (the reference sends one anyway, and
breaks them): responses are dumped with :func:`dump`, which leaves every ``null``
out and uses wire names (``schema`` rather than ``schema_uri``).

Requests are lenient about extra keys (they are ignored) and strict about the fields
the merchant needs, so a bad request gets a 422 naming the field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

UCP_VERSION = "2026-01-11"
"""The protocol version this merchant implements."""


def dump(model: BaseModel) -> dict[str, Any]:
    """The JSON object sent on the wire for ``model``: wire names, and no ``null``.

    An absent optional field is absent, not ``null``, at any depth: in the free-form
    parts too (messages, instruments, order events), which ``exclude_none`` alone
    would not reach. The spec's schemas type each optional field without ``null``
    (tests/strabo/merchant/test_merchant_schemas.py checks every answer).
    """
    body = present(model.model_dump(mode="json", by_alias=True, exclude_none=True))
    assert isinstance(body, dict)
    return body


def present(value: Any) -> Any:
    """``value`` with every ``null`` member of an object left out, recursively
    (``null`` elements of an array are kept: dropping them would move the rest)."""
    if isinstance(value, dict):
        return {k: present(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [present(v) for v in value]
    return value


class _Wire(BaseModel):
    """Response models: built by the merchant, so unknown keys are a programming error."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")


# --------------------------------------------------------------------- shared parts


class Total(_Wire):
    """One line of a totals list: ``subtotal``, ``fulfillment``, ``discount`` or ``total``."""

    type: str
    display_text: str | None = None
    amount: int


class Capability(_Wire):
    """A capability named in the ``ucp`` envelope of a checkout."""

    name: str
    version: str = UCP_VERSION
    spec: str | None = None
    schema_uri: str | None = Field(default=None, alias="schema")
    extends: str | None = None
    config: dict[str, Any] | None = None


class UcpEnvelope(_Wire):
    """The ``ucp`` object every checkout starts with."""

    version: str = UCP_VERSION
    capabilities: list[Capability] = Field(
        default_factory=lambda: [Capability(name="dev.ucp.shopping.checkout")]
    )


class PostalAddress(_Wire):
    """A postal address as UCP spells it (schema.org style field names)."""

    extended_address: str | None = None
    street_address: str | None = None
    address_locality: str | None = None
    address_region: str | None = None
    address_country: str | None = None
    postal_code: str | None = None
    first_name: str | None = None
    last_name: str | None = None
    full_name: str | None = None
    phone_number: str | None = None


# ------------------------------------------------------------------------- checkout


class Item(_Wire):
    """The product on a line item, with the merchant's own title and price."""

    id: str
    title: str
    price: int
    image_url: str | None = None


class LineItem(_Wire):
    """One product and quantity in a checkout, with its own totals."""

    id: str
    item: Item
    quantity: int
    totals: list[Total]
    parent_id: str | None = None


class BuyerCore(_Wire):
    """Who is buying, as the core checkout schema has it."""

    first_name: str | None = None
    last_name: str | None = None
    full_name: str | None = None
    email: str | None = None
    phone_number: str | None = None


class Buyer(BuyerCore):
    """The buyer with the ``buyer_consent`` extension's ``consent`` field."""

    consent: dict[str, Any] | None = None


class PaymentState(_Wire):
    """The ``payment`` object of a checkout: handlers and instruments the agent sent."""

    handlers: list[dict[str, Any]] = Field(default_factory=list)
    selected_instrument_id: str | None = None
    instruments: list[dict[str, Any]] | None = None


class OrderLink(_Wire):
    """Where a completed checkout's order lives."""

    id: str
    permalink_url: str


class Allocation(_Wire):
    """Which total a discount was taken from (a JSONPath into ``totals``)."""

    path: str
    amount: int


class AppliedDiscount(_Wire):
    """A discount code that took effect, and by how much."""

    code: str
    title: str
    amount: int
    automatic: bool = False
    method: str | None = None
    priority: int | None = None
    allocations: list[Allocation]


class Discounts(_Wire):
    """The codes the buyer entered and the ones that applied."""

    codes: list[str] | None = None
    applied: list[AppliedDiscount] | None = None


class Destination(PostalAddress):
    """A shipping destination; addresses on file also carry ``city`` and ``region``.

    The reference merchant sends saved addresses with ``city``/``region`` and leaves
    ``address_locality``/``address_region`` null; we send ``city``/``region`` too, and
    leave the two others out (absent, not null).
    """

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    id: str


class FulfillmentOption(_Wire):
    """A way to ship a group of line items, with its price."""

    id: str
    title: str
    description: str | None = None
    carrier: str | None = None
    earliest_fulfillment_time: str | None = None
    latest_fulfillment_time: str | None = None
    totals: list[Total]


class FulfillmentGroup(_Wire):
    """Line items shipped together, the options offered for them and the one chosen."""

    id: str
    line_item_ids: list[str]
    options: list[FulfillmentOption] = Field(default_factory=list)
    selected_option_id: str | None = None


class FulfillmentMethod(_Wire):
    """A fulfillment method (only ``shipping``): destinations, the chosen one, groups."""

    id: str
    type: str = "shipping"
    line_item_ids: list[str]
    destinations: list[Destination] | None = None
    selected_destination_id: str | None = None
    groups: list[FulfillmentGroup] | None = None


class Fulfillment(_Wire):
    """The ``fulfillment`` extension of a checkout."""

    methods: list[FulfillmentMethod] = Field(default_factory=list)
    available_methods: list[dict[str, Any]] | None = None


class Platform(_Wire):
    """What the merchant learnt from the agent's profile: where to send order events."""

    webhook_url: str


_EXTENSIONS: dict[str, Any] = {
    "ap2": True,
    "discounts": True,
    "fulfillment": True,
    "platform": True,
    "buyer": {"consent"},
}
"""What :meth:`Checkout.core` leaves out: the extensions' fields."""


class CheckoutCore(_Wire):
    """A checkout session as the core schema has it, without extensions.

    The cancel operation answers with this shape (the reference merchant's cancel
    response has no ``discounts``/``fulfillment``/``platform`` and no buyer consent).
    """

    ucp: UcpEnvelope = Field(default_factory=UcpEnvelope)
    id: str
    line_items: list[LineItem]
    buyer: BuyerCore | None = None
    status: str
    currency: str
    totals: list[Total]
    messages: list[dict[str, Any]] | None = None
    links: list[dict[str, Any]] = Field(default_factory=list)
    expires_at: str | None = None
    continue_url: str | None = None
    payment: PaymentState = Field(default_factory=PaymentState)
    order: OrderLink | None = None


class Checkout(CheckoutCore):
    """A checkout session with the discount, fulfillment, consent and AP2 extensions."""

    buyer: Buyer | None = None
    ap2: dict[str, Any] | None = None
    discounts: Discounts = Field(default_factory=Discounts)
    fulfillment: Fulfillment | None = None
    platform: Platform | None = None

    def core(self) -> CheckoutCore:
        """This checkout in the core shape (what cancel answers)."""
        return CheckoutCore.model_validate(self.model_dump(exclude=_EXTENSIONS))



# ---------------------------------------------------------------------------- order


class OrderCapability(Capability):
    """A capability in an order's envelope.

    The reference merchant's orders carry an extra ``schema_`` key, always null: an
    absent field, which we leave out like any other.
    """


class OrderEnvelope(_Wire):
    """The ``ucp`` object of an order."""

    version: str = UCP_VERSION
    capabilities: list[OrderCapability] = Field(
        default_factory=lambda: [OrderCapability(name="dev.ucp.shopping.checkout")]
    )


class OrderQuantity(_Wire):
    """How many were ordered and how many have been fulfilled."""

    total: int
    fulfilled: int = 0


class OrderLineItem(_Wire):
    """A line item of an order, with its fulfillment progress."""

    id: str
    item: Item
    quantity: OrderQuantity
    totals: list[Total]
    status: str = "processing"
    parent_id: str | None = None


class ExpectationLine(_Wire):
    """A line item and quantity covered by a fulfillment expectation."""

    id: str
    quantity: int


class Expectation(_Wire):
    """What the buyer can expect: which items go where, and how."""

    id: str
    line_items: list[ExpectationLine]
    method_type: str
    destination: PostalAddress | None = None
    description: str | None = None
    fulfillable_on: str | None = None


class FulfillmentEvent(_Wire):
    """Something that happened to an order's shipment (e.g. ``shipped``)."""

    id: str
    type: str
    timestamp: str


class OrderFulfillment(_Wire):
    """An order's fulfillment expectations and events so far.

    Events are the shape the reference merchant records for its shipping test hook
    (:class:`FulfillmentEvent`) or, when added by an order update, the spec's
    ``fulfillment_event`` as sent, without nulls.
    """

    expectations: list[Expectation] = Field(default_factory=list)
    events: list[FulfillmentEvent | dict[str, Any]] = Field(default_factory=list)


class Order(_Wire):
    """The order a completed checkout produced (``GET /orders/{id}``)."""

    ucp: OrderEnvelope = Field(default_factory=OrderEnvelope)
    id: str
    checkout_id: str
    permalink_url: str
    line_items: list[OrderLineItem]
    fulfillment: OrderFulfillment = Field(default_factory=OrderFulfillment)
    adjustments: list[dict[str, Any]] | None = None
    totals: list[Total]


class WebhookEvent(_Wire):
    """What the merchant POSTs to an agent's webhook when an order changes."""

    event_type: str
    checkout_id: str
    order: Order


# ------------------------------------------------------------------------ discovery


class RestTransport(_Wire):
    """Where the REST binding of a service lives."""

    schema_uri: str = Field(alias="schema")
    endpoint: str


class Service(_Wire):
    """A UCP service the merchant offers, and its transports."""

    version: str = UCP_VERSION
    spec: str
    rest: RestTransport | None = None
    mcp: dict[str, Any] | None = None
    a2a: dict[str, Any] | None = None
    embedded: dict[str, Any] | None = None


class DiscoveryEnvelope(_Wire):
    """The ``ucp`` part of the discovery profile."""

    version: str = UCP_VERSION
    services: dict[str, Service]
    capabilities: list[Capability]


class PaymentHandler(_Wire):
    """A payment handler the merchant advertises."""

    id: str
    name: str
    version: str = UCP_VERSION
    spec: str
    config_schema: str
    instrument_schemas: list[str]
    config: dict[str, Any]


class DiscoveryPayment(_Wire):
    """The payment handlers of the discovery profile."""

    handlers: list[PaymentHandler]


class DiscoveryProfile(_Wire):
    """``GET /.well-known/ucp``: what the merchant implements and where."""

    ucp: DiscoveryEnvelope
    payment: DiscoveryPayment
    signing_keys: list[dict[str, Any]] | None = None


# ------------------------------------------------------------------------- requests


class _Request(BaseModel):
    """Request models ignore keys they do not know, as the reference merchant does."""

    model_config = ConfigDict(extra="ignore")


class ItemRef(_Request):
    """The product a line item asks for.

    ``title`` is optional here so that a missing title is not a 422: the reference
    merchant answers 500 to it, and so do we (see ``MissingItemTitle``).
    """

    id: str
    title: str | None = None


class LineItemRequest(_Request):
    """A product and quantity the agent wants."""

    id: str | None = None
    item: ItemRef
    quantity: int = Field(ge=1)
    parent_id: str | None = None


class BuyerRequest(_Request):
    """Buyer details sent by the agent."""

    first_name: str | None = None
    last_name: str | None = None
    full_name: str | None = None
    email: str | None = None
    phone_number: str | None = None
    consent: dict[str, Any] | None = None


class PaymentRequest(_Request):
    """The ``payment`` object of a create or update (often just ``{}``)."""

    selected_instrument_id: str | None = None
    instruments: list[dict[str, Any]] | None = None
    handlers: list[dict[str, Any]] | None = None


class DiscountsRequest(_Request):
    """Discount codes the buyer entered; they replace the previous codes."""

    codes: list[str] | None = None


class DestinationRequest(_Request):
    """A shipping destination given inline by the agent."""

    id: str | None = None
    extended_address: str | None = None
    street_address: str | None = None
    address_locality: str | None = None
    address_region: str | None = None
    address_country: str | None = None
    postal_code: str | None = None
    first_name: str | None = None
    last_name: str | None = None
    full_name: str | None = None
    phone_number: str | None = None


class GroupRequest(_Request):
    """A fulfillment group selection: usually only ``selected_option_id``."""

    id: str | None = None
    line_item_ids: list[str] | None = None
    selected_option_id: str | None = None


class MethodRequest(_Request):
    """One fulfillment method in a request: type, destinations, selections."""

    id: str | None = None
    type: str = "shipping"
    line_item_ids: list[str] | None = None
    destinations: list[DestinationRequest] | None = None
    selected_destination_id: str | None = None
    groups: list[GroupRequest] | None = None


class FulfillmentRequest(_Request):
    """The ``fulfillment`` object of a create or update."""

    methods: list[MethodRequest] | None = None


class CheckoutCreateRequest(_Request):
    """``POST /checkout-sessions``: ``line_items``, ``currency`` and ``payment`` are required."""

    id: str | None = None
    line_items: list[LineItemRequest]
    buyer: BuyerRequest | None = None
    currency: str
    payment: PaymentRequest
    discounts: DiscountsRequest | None = None
    fulfillment: FulfillmentRequest | None = None


class CheckoutUpdateRequest(_Request):
    """``PUT /checkout-sessions/{id}``: a full checkout; the path id wins over ``id``."""

    id: str
    line_items: list[LineItemRequest]
    currency: str
    payment: PaymentRequest
    buyer: BuyerRequest | None = None
    discounts: DiscountsRequest | None = None
    fulfillment: FulfillmentRequest | None = None


class PaymentInstrument(_Request):
    """``payment_data`` of a complete request: one instrument with its credential."""

    model_config = ConfigDict(extra="allow")

    id: str
    handler_id: str
    type: str
    credential: dict[str, Any] | None = None


class CheckoutCompleteRequest(_Request):
    """``POST /checkout-sessions/{id}/complete``: one instrument plus risk signals."""

    payment_data: PaymentInstrument
    risk_signals: dict[str, Any]
    ap2: dict[str, Any] | None = None


class ErrorBody(_Wire):
    """The body of a business error: a message and a machine-readable code."""

    detail: str
    code: str
