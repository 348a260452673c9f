"""Loading a shop from a directory of CSV files (the UCP conformance data format).

The UCP conformance suite describes its test shop as CSV files, one per table, and
any merchant under test must load them. Reading that format directly lets
``strabo merchant --data-dir DIR`` serve the very shop the suite expects, and lets a
shop be written with a spreadsheet instead of JSON. The files (comma-separated,
UTF-8, a header row naming the columns, in any order):

============================ ========================================================
file                          columns (``*``: may be empty)
============================ ========================================================
``products.csv`` (required)   ``id, title, price, image_url*``
``inventory.csv`` (required)  ``product_id, quantity``
``discounts.csv``             ``code, type (percentage|fixed_amount), value, description``
``promotions.csv``            ``id, type (free_shipping), min_subtotal*,
                              eligible_item_ids* (a JSON list of product ids), description*``
``shipping_rates.csv``        ``id, country_code (or default), service_level, price, title``
``customers.csv``             ``id, name*, email``
``addresses.csv``             ``id, customer_id, street_address, city, state, postal_code,
                              country``
``payment_instruments.csv``   ``id, type, brand*, last_digits*, token, handler_id``
============================ ========================================================

Prices and amounts are whole numbers in minor units (cents). Anything wrong is a
:class:`~strabo.merchant.catalog.CatalogError` whose message starts with
``FILE:LINE:``, so a typo in a 500-line file is found at once.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._payment import SUPPORTED_HANDLERS
from .catalog import ANY_COUNTRY, Catalog, CatalogError

DEFAULT_COUNTRY = "default"
"""What ``shipping_rates.csv`` calls a rate for any country."""

_Row = dict[str, str]


@dataclass(frozen=True)
class _Table:
    """One CSV file's layout: required columns and those that may be left out."""

    name: str
    columns: tuple[str, ...]
    optional: tuple[str, ...] = ()
    required_file: bool = False


_TABLES = {
    table.name: table
    for table in (
        _Table("products", ("id", "title", "price"), ("image_url",), required_file=True),
        _Table("inventory", ("product_id", "quantity"), required_file=True),
        _Table("discounts", ("code", "type", "value", "description")),
        _Table("promotions", ("id", "type"), ("min_subtotal", "eligible_item_ids", "description")),
        _Table("shipping_rates", ("id", "country_code", "service_level", "price", "title")),
        _Table("customers", ("id", "email"), ("name",)),
        _Table(
            "addresses",
            ("id", "customer_id", "street_address", "city", "state", "postal_code", "country"),
        ),
        _Table(
            "payment_instruments",
            ("id", "type", "token", "handler_id"),
            ("brand", "last_digits"),
        ),
    )
}


class _Reader:
    """Reads one table, turning every problem into ``FILE:LINE: reason``."""

    def __init__(self, directory: Path, table: _Table) -> None:
        self.path = directory / f"{table.name}.csv"
        self.table = table
        self.line = 0

    def fail(self, message: str) -> CatalogError:
        """The error for the line being read (line 1 is the header)."""
        return CatalogError(f"{self.path}:{self.line}: {message}")

    def rows(self) -> Iterator[_Row]:
        """The file's rows as column -> stripped text; nothing if an optional file is absent."""
        if not self.path.exists() and not self.table.required_file:
            return
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise CatalogError(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        try:
            # Decoded whole, not streamed: a bad byte's offset then gives its line.
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            raise CatalogError(f"{self.path}:{line}: not UTF-8 text: {exc.reason}") from exc
        with io.StringIO(text, newline="") as handle:
            reader = csv.reader(handle)
            try:
                header = [name.strip() for name in next(reader, [])]
                self.line = reader.line_num or 1
                self._check_header(header)
                for record in reader:
                    self.line = reader.line_num
                    if not any(cell.strip() for cell in record):
                        continue
                    if len(record) != len(header):
                        raise self.fail(f"{len(record)} fields, the header has {len(header)}")
                    yield {name: cell.strip() for name, cell in zip(header, record, strict=True)}
            except csv.Error as exc:
                self.line = reader.line_num  # the record that failed, not the last read
                raise self.fail(f"not valid CSV: {exc}") from exc

    def _check_header(self, header: list[str]) -> None:
        if not any(header):
            raise self.fail("empty file: a header row naming the columns is required")
        known = self.table.columns + self.table.optional
        for name in header:
            if name not in known:
                raise self.fail(f"unknown column {name!r} (expected: {', '.join(known)})")
        if len(set(header)) != len(header):
            raise self.fail("a column is named twice")
        missing = [name for name in self.table.columns if name not in header]
        if missing:
            raise self.fail(f"missing column {missing[0]!r}")

    def text(self, row: _Row, column: str) -> str:
        """A required, non-empty value."""
        value = row.get(column, "")
        if not value:
            raise self.fail(f"{column} is empty")
        return value

    def number(self, row: _Row, column: str, *, required: bool = True) -> int | None:
        """A whole number >= 0 (None for an empty optional value)."""
        value = row.get(column, "")
        if not value and not required:
            return None
        try:
            number = int(value)
        except ValueError:
            raise self.fail(f"{column} {value!r} is not a whole number") from None
        if number < 0:
            raise self.fail(f"{column} {value!r} is negative")
        return number

    def unique(self, seen: set[str], value: str, what: str) -> str:
        """``value``, after checking that no earlier row used it."""
        if value in seen:
            raise self.fail(f"duplicate {what} {value!r}")
        seen.add(value)
        return value


def _each(directory: Path, name: str, build: Callable[[_Reader, _Row], Any]) -> list[Any]:
    reader = _Reader(directory, _TABLES[name])
    return [build(reader, row) for row in reader.rows()]


def _item_ids(reader: _Reader, row: _Row, products: set[str]) -> list[str]:
    value = row.get("eligible_item_ids", "")
    if not value:
        return []
    try:
        ids = json.loads(value)
    except (ValueError, RecursionError):  # bad JSON, a 5000-digit number, [[[[...
        ids = None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise reader.fail(f"eligible_item_ids {value!r} is not a JSON list of product ids")
    unknown = next((i for i in ids if i not in products), None)
    if unknown is not None:
        raise reader.fail(f"eligible_item_ids names unknown product {unknown!r}")
    return ids


def load_data_dir(directory: str | Path) -> Catalog:
    """Read a shop from a directory of CSV files (see the module docstring).

    Raises :class:`CatalogError` with a ``FILE:LINE: reason`` message for a missing
    required file, an unknown or missing column, a bad number, a duplicate id or a
    reference to something that does not exist.
    """
    root = Path(directory)
    if not root.is_dir():
        raise CatalogError(f"data directory {root} does not exist or is not a directory")
    seen: set[str] = set()

    def product(reader: _Reader, row: _Row) -> dict[str, Any]:
        return {
            "id": reader.unique(seen, reader.text(row, "id"), "product id"),
            "title": reader.text(row, "title"),
            "price": reader.number(row, "price"),
            "image_url": row.get("image_url") or None,
        }

    products = _each(root, "products", product)
    stock: dict[str, int | None] = {}

    def inventory(reader: _Reader, row: _Row) -> None:
        product_id = reader.text(row, "product_id")
        if product_id not in seen:
            raise reader.fail(f"unknown product {product_id!r} (not in products.csv)")
        if product_id in stock:
            raise reader.fail(f"second inventory row for {product_id!r}")
        stock[product_id] = reader.number(row, "quantity")

    _each(root, "inventory", inventory)
    for entry in products:
        entry["inventory"] = stock.get(entry["id"]) or 0
    codes: set[str] = set()

    def discount(reader: _Reader, row: _Row) -> dict[str, Any]:
        kind = reader.text(row, "type")
        if kind not in ("percentage", "fixed_amount"):
            raise reader.fail(f"type {kind!r} is not percentage or fixed_amount")
        value = reader.number(row, "value")
        if kind == "percentage" and value is not None and value > 100:
            raise reader.fail(f"value {value} is more than 100 percent")
        return {
            "code": reader.unique(codes, reader.text(row, "code"), "discount code"),
            "type": kind,
            "value": value,
            "title": reader.text(row, "description"),
        }

    promotion_ids: set[str] = set()

    def promotion(reader: _Reader, row: _Row) -> dict[str, Any]:
        kind = reader.text(row, "type")
        if kind != "free_shipping":
            raise reader.fail(f"type {kind!r} is not supported (only free_shipping)")
        return {
            "id": reader.unique(promotion_ids, reader.text(row, "id"), "promotion id"),
            "type": kind,
            "min_subtotal": reader.number(row, "min_subtotal", required=False),
            "item_ids": _item_ids(reader, row, seen),
            "title": row.get("description", ""),
        }

    rate_ids: set[str] = set()

    def rate(reader: _Reader, row: _Row) -> dict[str, Any]:
        country = reader.text(row, "country_code")
        return {
            "id": reader.unique(rate_ids, reader.text(row, "id"), "shipping rate id"),
            "country": ANY_COUNTRY if country.lower() == DEFAULT_COUNTRY else country.upper(),
            "service_level": reader.text(row, "service_level"),
            "price": reader.number(row, "price"),
            "title": reader.text(row, "title"),
        }

    customers: dict[str, dict[str, Any]] = {}
    emails: set[str] = set()

    def customer(reader: _Reader, row: _Row) -> None:
        customer_id = reader.text(row, "id")
        if customer_id in customers:
            raise reader.fail(f"duplicate customer id {customer_id!r}")
        email = reader.text(row, "email")
        if "@" not in email:
            raise reader.fail(f"email {email!r} is not an e-mail address")
        reader.unique(emails, email.casefold(), "customer email")
        customers[customer_id] = {"email": email, "name": row.get("name", ""), "addresses": []}

    address_ids: set[str] = set()

    def address(reader: _Reader, row: _Row) -> None:
        owner = reader.text(row, "customer_id")
        if owner not in customers:
            raise reader.fail(f"unknown customer {owner!r} (not in customers.csv)")
        customers[owner]["addresses"].append(
            {
                "id": reader.unique(address_ids, reader.text(row, "id"), "address id"),
                "street_address": reader.text(row, "street_address"),
                "city": reader.text(row, "city"),
                "region": reader.text(row, "state"),
                "postal_code": reader.text(row, "postal_code"),
                "country": reader.text(row, "country").upper(),
            }
        )

    instrument_ids: set[str] = set()

    def instrument(reader: _Reader, row: _Row) -> dict[str, Any]:
        handler = reader.text(row, "handler_id")
        if handler not in SUPPORTED_HANDLERS:
            known = ", ".join(sorted(SUPPORTED_HANDLERS))
            raise reader.fail(f"handler_id {handler!r} is not one this merchant has ({known})")
        return {
            "id": reader.unique(instrument_ids, reader.text(row, "id"), "instrument id"),
            "type": reader.text(row, "type"),
            "brand": row.get("brand", ""),
            "last_digits": row.get("last_digits", ""),
            "token": reader.text(row, "token"),
            "handler_id": handler,
        }

    data = {
        "products": products,
        "discounts": _each(root, "discounts", discount),
        "promotions": _each(root, "promotions", promotion),
        "shipping_rates": _each(root, "shipping_rates", rate),
        "payment_instruments": _each(root, "payment_instruments", instrument),
    }
    _each(root, "customers", customer)
    _each(root, "addresses", address)
    data["customers"] = list(customers.values())
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:  # every check above should have caught it first
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise CatalogError(f"data directory {root} is invalid at {where}: {first['msg']}") from exc
