"""The merchant's catalog: products, stock, discount codes, shipping rates, known buyers.

Everything the merchant sells or charges comes from one JSON file so that a test or
a demo can swap the whole shop without touching code. The bundled ``catalog.json``
uses the item ids, discount codes, shipping option ids and address ids that the
recorded UCP traces use, so replaying those traces behaves the same; the prices
and addresses are ours.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DEFAULT_CATALOG = Path(__file__).with_name("catalog.json")
"""The catalog shipped with the package (a small flower shop)."""

ANY_COUNTRY = "*"
"""Country code of a shipping rate that applies wherever no specific rate does."""


class CatalogError(ValueError):
    """The catalog file is missing, is not JSON, or does not describe a shop."""


class _Strict(BaseModel):
    """Catalog entries reject unknown keys so that typos in a catalog file show up."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Product(_Strict):
    """Something for sale; ``price`` is in minor units of the catalog currency."""

    id: str = Field(min_length=1)
    title: str = Field(min_length=1)
    price: int = Field(ge=0)
    inventory: int = Field(ge=0)
    image_url: str | None = None


class DiscountCode(_Strict):
    """A code a buyer can enter; ``value`` is a percent or an amount in minor units."""

    code: str = Field(min_length=1)
    type: Literal["percentage", "fixed_amount"]
    value: int = Field(ge=0)
    title: str


class ShippingRate(_Strict):
    """One shipping option for one country (or for ``*``, any country)."""

    id: str = Field(min_length=1)
    country: str
    service_level: str
    price: int = Field(ge=0)
    title: str


class FreeShipping(_Strict):
    """When standard shipping costs nothing: a large enough order, or certain items."""

    min_subtotal: int | None = Field(default=None, ge=0)
    item_ids: tuple[str, ...] = ()


class Promotion(_Strict):
    """An automatic offer; ``free_shipping`` makes standard shipping free.

    It applies when the merchandise subtotal reaches ``min_subtotal`` (if set) and
    the cart holds one of ``item_ids`` (if any are listed); a promotion with
    neither condition always applies.
    """

    id: str = Field(min_length=1)
    type: Literal["free_shipping"] = "free_shipping"
    min_subtotal: int | None = Field(default=None, ge=0)
    item_ids: tuple[str, ...] = ()
    title: str = ""


class StoredInstrument(_Strict):
    """A payment instrument on file, for agents and tests that pay with known tokens.

    Its ``handler_id`` is advertised in discovery, so every handler that a stored
    instrument needs is one that agents can find.
    """

    id: str = Field(min_length=1)
    type: str = Field(min_length=1)
    brand: str = ""
    last_digits: str = ""
    token: str = Field(min_length=1)
    handler_id: str = Field(min_length=1)


class SavedAddress(_Strict):
    """An address on file for a known buyer, offered as a shipping destination."""

    id: str = Field(min_length=1)
    street_address: str
    city: str
    region: str
    postal_code: str
    country: str


class Customer(_Strict):
    """A buyer the shop knows by e-mail, with the addresses it has on file."""

    email: str
    name: str = ""
    addresses: tuple[SavedAddress, ...] = ()


class Catalog(_Strict):
    """The whole shop, as read from a catalog file."""

    merchant_name: str = "Strabo Flower Shop"
    currency: str = "USD"
    products: tuple[Product, ...]
    discounts: tuple[DiscountCode, ...] = ()
    shipping_rates: tuple[ShippingRate, ...] = ()
    free_shipping: FreeShipping = FreeShipping()
    promotions: tuple[Promotion, ...] = ()
    customers: tuple[Customer, ...] = ()
    payment_instruments: tuple[StoredInstrument, ...] = ()

    @model_validator(mode="after")
    def _unique_ids(self) -> Catalog:
        for what, ids in (
            ("product id", [p.id for p in self.products]),
            ("discount code", [d.code for d in self.discounts]),
            ("shipping rate id", [r.id for r in self.shipping_rates]),
            ("customer email", [c.email for c in self.customers]),
            ("promotion id", [p.id for p in self.promotions]),
            ("payment instrument id", [i.id for i in self.payment_instruments]),
        ):
            seen: set[str] = set()
            for value in ids:
                if value in seen:
                    raise ValueError(f"duplicate {what}: {value!r}")
                seen.add(value)
        return self

    def product(self, product_id: str) -> Product | None:
        """The product with this id, if the shop sells it."""
        return next((p for p in self.products if p.id == product_id), None)

    def discount(self, code: str) -> DiscountCode | None:
        """The discount behind this code, if the code exists."""
        return next((d for d in self.discounts if d.code == code), None)

    def free_shipping_rules(self) -> tuple[Promotion, ...]:
        """Every rule that makes standard shipping free: ``free_shipping`` and promotions.

        The legacy ``free_shipping`` object is one rule per condition (a large order
        *or* one of the items), as it always meant.
        """
        rules: list[Promotion] = []
        legacy = self.free_shipping
        if legacy.min_subtotal is not None:
            rules.append(Promotion(id="free_shipping_min", min_subtotal=legacy.min_subtotal))
        if legacy.item_ids:
            rules.append(Promotion(id="free_shipping_items", item_ids=legacy.item_ids))
        return (*rules, *(p for p in self.promotions if p.type == "free_shipping"))

    def customer(self, email: str | None) -> Customer | None:
        """The known buyer with this e-mail address, if any."""
        if not email:
            return None
        return next((c for c in self.customers if c.email.lower() == email.lower()), None)


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Read a catalog file (the bundled one when ``path`` is None).

    Raises :class:`CatalogError` with a one-line reason for a missing file, a file
    that is not UTF-8 text, bad JSON or a file that is not a catalog, so
    command-line users see no traceback.
    """
    file = Path(path) if path is not None else DEFAULT_CATALOG
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"cannot read catalog {file}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:  # a binary file, or another encoding's text
        raise CatalogError(f"cannot read catalog {file}: not UTF-8 text") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(
            f"catalog {file} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "top level"
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise CatalogError(f"catalog {file} is invalid at {where}: {first['msg']}{more}") from exc
