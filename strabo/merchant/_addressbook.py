"""Buyers' saved addresses: offered as destinations, and learnt from checkouts.

A known buyer (by e-mail) starts with the addresses in the catalog. When a buyer
with an e-mail sends a destination without an ``id``, the merchant looks for the
same address in that buyer's book (same street, city, region, postal code and
country, ignoring case and spacing): if it is there, the saved id is reused, so an
agent that re-types an address does not create a duplicate; if not, it is saved
under a new id and offered on the buyer's next checkouts. Destinations that come
with their own id belong to the agent and are not saved.

The book is merchant state (it changes), unlike the catalog, so it lives here
rather than in :class:`~strabo.merchant.catalog.Catalog`.
"""

from __future__ import annotations

from collections.abc import Iterable

from .catalog import Catalog
from .wire import Destination


def _norm(value: object) -> str:
    return " ".join(str(value or "").split()).casefold()


def address_key(destination: Destination) -> tuple[str, ...]:
    """What makes two destinations the same address (saved ones say city/region)."""
    extra = destination.model_extra or {}
    return (
        _norm(destination.street_address),
        _norm(destination.address_locality or extra.get("city")),
        _norm(destination.address_region or extra.get("region")),
        _norm(destination.postal_code),
        _norm(destination.address_country),
    )


class AddressBook:
    """Saved addresses by buyer e-mail (case-insensitive), oldest first."""

    def __init__(self, catalog: Catalog) -> None:
        self._books: dict[str, list[Destination]] = {}
        for customer in catalog.customers:
            self._books[customer.email.casefold()] = [
                # The shape the reference merchant sends for saved addresses:
                # city/region set, address_locality/address_region left null.
                Destination(
                    id=address.id,
                    street_address=address.street_address,
                    address_country=address.country,
                    postal_code=address.postal_code,
                    city=address.city,
                    region=address.region,
                )
                for address in customer.addresses
            ]

    def saved(self, email: str | None) -> list[Destination]:
        """Copies of the buyer's saved addresses (none without an e-mail)."""
        if not email:
            return []
        return [d.model_copy(deep=True) for d in self._books.get(email.casefold(), [])]

    def remember(self, email: str | None, destinations: Iterable[Destination]) -> None:
        """Save new addresses for the buyer; ones already in the book are skipped."""
        if not email:
            return
        book = self._books.setdefault(email.casefold(), [])
        known = {address_key(d) for d in book}
        ids = {d.id for d in book}
        for destination in destinations:
            if address_key(destination) in known or destination.id in ids:
                continue
            book.append(destination.model_copy(deep=True))
            known.add(address_key(destination))
            ids.add(destination.id)
