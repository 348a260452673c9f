"""A header value holding a control character is refused before any endpoint runs.

RFC 9110 (5.5) has a recipient refuse such a field value, or replace each
control character by a space; h11 refuses CR, LF and NUL only. The merchant
answers 400 ``INVALID_REQUEST`` naming the header, and stores nothing: no
checkout, no idempotency record. A tab is a header's own whitespace and passes.
The requests go over a raw socket: httpx refuses to send such headers.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from .conftest import Shop
from .shopper import AGENT, headers, line


def body(quantity: int = 1) -> dict[str, Any]:
    return {"line_items": [line("bouquet_roses", quantity)], "currency": "USD", "payment": {}}


async def raw(url: str, method: str, path: str, sent: dict[str, str],
              payload: dict[str, Any] | None = None) -> tuple[int, Any]:
    """``method path`` with ``sent`` written byte for byte (latin-1), its status and JSON."""
    host, port = url.removeprefix("http://").split(":")
    data = b"" if payload is None else json.dumps(payload).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in sent.items())
    if payload is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head.encode("latin-1") + b"\r\n" + data)
        answer = await asyncio.wait_for(reader.read(), 10)  # to EOF: Connection: close
    finally:
        writer.close()
    top, _, content = answer.partition(b"\r\n\r\n")
    return int(top.split(b" ")[1]), json.loads(content) if content else None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("UCP-Agent", AGENT + "\x01"),
        ("Idempotency-Key", "key-\x1b[31m-red"),
        ("Request-Id", "id\x7f"),
        ("X-Note", "\x1f"),  # a header the merchant never reads
    ],
)
async def test_a_control_character_in_a_header_value_is_refused(
    shop: Shop, name: str, value: str
) -> None:
    status, error = await raw(shop.url, "POST", "/checkout-sessions",
                              {**headers(), name: value}, body())

    assert status == 400
    assert set(error) == {"detail", "code"} and error["code"] == "INVALID_REQUEST"
    assert f"'{name.lower()}'" in error["detail"]
    assert value not in error["detail"]  # named, not quoted
    assert shop.merchant.checkouts() == []


async def test_a_refused_request_leaves_no_idempotency_record(shop: Shop) -> None:
    sent = headers(key="key-once", agent=AGENT + "\x1b")
    status, _ = await raw(shop.url, "POST", "/checkout-sessions", sent, body(1))
    assert status == 400

    # Another body under the same key: a fresh creation, not an IDEMPOTENCY_CONFLICT.
    fresh = await shop.client.post("/checkout-sessions", json=body(2),
                                   headers=headers(key="key-once"))

    assert fresh.status_code == 201, fresh.text
    assert [c.line_items[0].quantity for c in shop.merchant.checkouts()] == [2]


async def test_every_route_refuses_it(shop: Shop) -> None:
    status, error = await raw(shop.url, "GET", "/.well-known/ucp", {"X-Note": "a\x7fb"})
    clean, _ = await raw(shop.url, "GET", "/.well-known/ucp", {"X-Note": "ab"})

    assert (status, error["code"], clean) == (400, "INVALID_REQUEST", 200)


async def test_a_tab_in_a_header_value_passes(shop: Shop) -> None:
    sent = headers(key="key\twith-tab", agent='profile="https://agent.example/profile";\tv="1"')
    status, created = await raw(shop.url, "POST", "/checkout-sessions", sent, body())

    assert status == 201, created
    assert [c.id for c in shop.merchant.checkouts()] == [created["id"]]
