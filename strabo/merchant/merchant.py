"""The merchant's state and operations, independent of HTTP.

One :class:`Merchant` holds everything one app instance knows: the catalog, the
stock left, checkout sessions, orders and idempotency records, all in memory. Every
operation runs under one lock and never awaits, so concurrent requests (asyncio
tasks or threads) see each operation happen entirely or not at all. Network work
(fetching agent profiles, delivering webhooks) happens outside, in the HTTP layer.

Tests use the inspection methods (:meth:`Merchant.checkout`, :meth:`Merchant.checkouts`,
:meth:`Merchant.order`, :meth:`Merchant.orders`, :meth:`Merchant.stock`) to look behind
the wire.
"""

from __future__ import annotations

import secrets
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _checkout, _fulfillment, _order_update, _orders
from ._addressbook import AddressBook
from ._errors import UcpError, invalid, not_found, not_modifiable, out_of_stock
from ._idempotency import IdempotencyStore, Reply, fingerprint
from ._payment import authorize
from .catalog import Catalog, load_catalog
from .wire import (
    Checkout,
    CheckoutCompleteRequest,
    CheckoutCreateRequest,
    CheckoutUpdateRequest,
    Order,
    OrderLink,
    WebhookEvent,
    dump,
)

__all__ = ["Merchant", "Notification", "Reply", "Rig"]


@dataclass(frozen=True)
class Notification:
    """An order event to POST to an agent's webhook once the operation is over."""

    url: str
    event: WebhookEvent


@dataclass(frozen=True)
class Rig:
    """How the next complete of a session must go, set by a testing endpoint:
    ``decline`` fails it with a 402 ``code``; ``escalate`` answers 200 with status
    ``requires_escalation``, an error message and ``continue_url``."""

    kind: str  # "decline" or "escalate"
    code: str
    message: str
    continue_url: str | None = None


@dataclass(frozen=True)
class _Done:
    reply: Reply
    notification: Notification | None = None


class Merchant:
    """A shop's state in memory: sessions, orders, stock, idempotency records."""

    def __init__(self, catalog: Catalog | None = None, *, simulation_secret: str | None = None):
        self.catalog = catalog if catalog is not None else load_catalog()
        self.simulation_secret = simulation_secret or secrets.token_urlsafe(16)
        """Value of the Simulation-Secret header that ``/testing/simulate-shipping`` wants."""
        self.shop_id = str(uuid.uuid4())
        """This instance's id in the discovery profile (Shop Pay's ``shop_id``)."""
        self._stock = {product.id: product.inventory for product in self.catalog.products}
        self._sessions: dict[str, Checkout] = {}
        self._orders: dict[str, Order] = {}
        self._idempotency = IdempotencyStore()
        self._rigs: dict[str, Rig] = {}
        self._book = AddressBook(self.catalog)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ inspection

    def checkout(self, checkout_id: str) -> Checkout | None:
        """A copy of the checkout session with this id, if any."""
        with self._lock:
            session = self._sessions.get(checkout_id)
            return session.model_copy(deep=True) if session is not None else None

    def checkouts(self) -> list[Checkout]:
        """Copies of all checkout sessions, oldest first."""
        with self._lock:
            return [session.model_copy(deep=True) for session in self._sessions.values()]

    def order(self, order_id: str) -> Order | None:
        """A copy of the order with this id, if any."""
        with self._lock:
            order = self._orders.get(order_id)
            return order.model_copy(deep=True) if order is not None else None

    def orders(self) -> list[Order]:
        """Copies of all orders, oldest first."""
        with self._lock:
            return [order.model_copy(deep=True) for order in self._orders.values()]

    def stock(self, product_id: str) -> int:
        """How many of a product are left (0 for products the shop does not sell)."""
        with self._lock:
            return self._stock.get(product_id, 0)

    # ----------------------------------------------------------------- operations

    def create_checkout(
        self,
        request: CheckoutCreateRequest,
        *,
        key: str,
        body: Any,
        webhook_url: str | None = None,
    ) -> Reply:
        """Open a session (201). A client-chosen id replaces an open session of that id."""

        def create() -> _Done:
            checkout_id = request.id or str(uuid.uuid4())
            existing = self._sessions.get(checkout_id)
            if existing is not None and existing.status in _checkout.TERMINAL:
                raise not_modifiable("replace", existing.status)
            outcome = _checkout.create(
                self.catalog,
                request,
                self._stock,
                checkout_id=checkout_id,
                webhook_url=webhook_url,
                book=self._book,
            )
            checkout = self._keep(outcome)
            return _Done(Reply(201, dump(checkout)))

        return self._idempotent(key, ("create", None, body), create).reply

    def get_checkout(self, checkout_id: str) -> dict[str, Any]:
        """The session as JSON; 404 if unknown."""
        with self._lock:
            return dump(self._session(checkout_id))

    def update_checkout(
        self,
        checkout_id: str,
        request: CheckoutUpdateRequest,
        *,
        key: str,
        body: Any,
        webhook_url: str | None = None,
    ) -> Reply:
        """Replace the session's cart and choices (200); 409 once completed or canceled."""

        def update() -> _Done:
            current = self._open_session(checkout_id, "update")
            outcome = _checkout.update(
                self.catalog,
                current,
                request,
                self._stock,
                webhook_url=webhook_url,
                book=self._book,
            )
            checkout = self._keep(outcome)
            return _Done(Reply(200, dump(checkout)))

        return self._idempotent(key, ("update", checkout_id, body), update).reply

    def complete_checkout(
        self,
        checkout_id: str,
        request: CheckoutCompleteRequest,
        *,
        key: str,
        body: Any,
        base_url: str,
        check: Callable[[Checkout], None] | None = None,
    ) -> tuple[Reply, Notification | None]:
        """Pay and place the order (200).

        Checks, in order: the session exists and is open, ``check(session)``
        passes (the AP2 mandate, when negotiated: it raises a UcpError), the
        payment instrument pays, the cart is not empty, shipping destination and
        option are chosen, stock is still there.
        """

        def complete() -> _Done:
            current = self._open_session(checkout_id, "complete")
            if check is not None:
                check(current)
            rig = self._rigs.pop(checkout_id, None)
            if rig is not None:
                return _Done(self._rigged(current, rig))
            authorize(request.payment_data)
            if not current.line_items:
                raise invalid("Cannot complete a checkout without line items.")
            if not _fulfillment.is_ready(current.fulfillment):
                raise invalid("Fulfillment address and option must be selected before completion.")
            self._reserve(current)
            order_id = str(uuid.uuid4())
            checkout = current.model_copy(deep=True)
            checkout.status = _checkout.COMPLETED
            checkout.order = OrderLink(
                id=order_id, permalink_url=f"{base_url.rstrip('/')}/orders/{order_id}"
            )
            order = _orders.from_checkout(checkout, order_id, checkout.order.permalink_url)
            self._sessions[checkout_id] = checkout
            self._orders[order_id] = order
            notification = self._notification(checkout, order, "order_placed")
            return _Done(Reply(200, dump(checkout)), notification)

        done = self._idempotent(key, ("complete", checkout_id, body), complete)
        return done.reply, done.notification

    def cancel_checkout(self, checkout_id: str, *, key: str) -> Reply:
        """Cancel an open session (200, answered in the core checkout shape)."""

        def cancel() -> _Done:
            checkout = self._open_session(checkout_id, "cancel").model_copy(deep=True)
            checkout.status = _checkout.CANCELED
            self._sessions[checkout_id] = checkout
            return _Done(Reply(200, dump(checkout.core())))

        return self._idempotent(key, ("cancel", checkout_id, None), cancel).reply

    # ------------------------------------------------------------ testing hooks

    def rig_completion(self, checkout_id: str, rig: Rig) -> None:
        """Make the next complete of an open session go as ``rig`` says."""
        with self._lock:
            self._open_session(checkout_id, "rig")
            self._rigs[checkout_id] = rig

    def expire(self, checkout_id: str) -> Checkout:
        """The shop cancels an open session (as when it expires); a copy of it."""
        with self._lock:
            checkout = self._open_session(checkout_id, "expire").model_copy(deep=True)
            checkout.status = _checkout.CANCELED
            checkout.messages = [{"type": "error", "code": "expired", "severity":
                                  "requires_buyer_input",
                                  "content": "This checkout session has expired."}]
            self._sessions[checkout_id] = checkout
            self._rigs.pop(checkout_id, None)
            return checkout.model_copy(deep=True)

    def set_stock(self, product_id: str, quantity: int) -> None:
        """Set the units in stock of a product the shop sells."""
        with self._lock:
            if product_id not in self._stock:
                raise not_found(f"Product {product_id} not found")
            self._stock[product_id] = quantity

    def _rigged(self, current: Checkout, rig: Rig) -> Reply:
        if rig.kind == "decline":
            raise UcpError(402, rig.code, rig.message)
        checkout = current.model_copy(deep=True)
        checkout.status = "requires_escalation"
        checkout.continue_url = rig.continue_url
        checkout.messages = [{"type": "error", "code": rig.code, "content": rig.message,
                              "severity": "requires_buyer_review"}]
        self._sessions[checkout.id] = checkout
        return Reply(200, dump(checkout))

    def get_order(self, order_id: str) -> dict[str, Any]:
        """The order as JSON; 404 if unknown."""
        with self._lock:
            order = self._orders.get(order_id)
            if order is None:
                raise not_found("Order not found")
            return dump(order)

    def update_order(
        self, order_id: str, request: _order_update.OrderUpdateRequest, *, key: str, body: Any
    ) -> tuple[Reply, Notification | None]:
        """Append new fulfillment events and adjustments to an order (200); 404 if unknown.

        The agent whose checkout placed the order hears of a change (``order_updated``),
        as UCP wants the full order sent on every update.
        """

        def update() -> _Done:
            current = self._orders.get(order_id)
            if current is None:
                raise not_found("Order not found")
            order = _order_update.apply(current, request)
            notification = None
            if order is not current:
                self._orders[order_id] = order
                checkout = self._sessions.get(order.checkout_id)
                if checkout is not None:
                    notification = self._notification(checkout, order, "order_updated")
            return _Done(Reply(200, dump(order)), notification)

        done = self._idempotent(key, ("update_order", order_id, body), update)
        return done.reply, done.notification

    def ship_order(self, order_id: str) -> Notification | None:
        """Mark the order shipped; returns the ``order_shipped`` event to deliver, if any."""
        with self._lock:
            order = self._orders.get(order_id)
            if order is None:
                raise not_found("Order not found")
            _orders.mark_shipped(order)
            checkout = self._sessions.get(order.checkout_id)
            if checkout is None:
                return None
            return self._notification(checkout, order, "order_shipped")

    # -------------------------------------------------------------------- helpers

    def _idempotent(
        self, key: str, request: tuple[str, str | None, Any], operation: Callable[[], _Done]
    ) -> _Done:
        digest = fingerprint(*request)
        with self._lock:
            stored = self._idempotency.replay(key, digest)
            if stored is not None:
                return _Done(stored)
            done = operation()
            self._idempotency.remember(key, digest, done.reply)
            return done

    def _keep(self, outcome: _checkout.Outcome) -> Checkout:
        """Store a session an operation produced, and the addresses its buyer gave."""
        checkout = outcome.checkout
        self._sessions[checkout.id] = checkout
        self._book.remember(checkout.buyer.email if checkout.buyer else None, outcome.learnt)
        return checkout

    def _session(self, checkout_id: str) -> Checkout:
        session = self._sessions.get(checkout_id)
        if session is None:
            raise not_found("Checkout session not found")
        return session

    def _open_session(self, checkout_id: str, action: str) -> Checkout:
        session = self._session(checkout_id)
        if session.status in _checkout.TERMINAL:
            raise not_modifiable(action, session.status)
        return session

    def _reserve(self, checkout: Checkout) -> None:
        wanted: Counter[str] = Counter()
        for item in checkout.line_items:
            wanted[item.item.id] += item.quantity
        for product_id, quantity in wanted.items():
            if self._stock.get(product_id, 0) < quantity:
                raise out_of_stock(f"Item {product_id} is out of stock", status=409)
        for product_id, quantity in wanted.items():
            self._stock[product_id] -= quantity

    @staticmethod
    def _notification(checkout: Checkout, order: Order, event_type: str) -> Notification | None:
        if checkout.platform is None:
            return None
        event = WebhookEvent(
            event_type=event_type, checkout_id=checkout.id, order=order.model_copy(deep=True)
        )
        return Notification(url=checkout.platform.webhook_url, event=event)
