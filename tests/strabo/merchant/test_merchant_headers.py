"""Required headers, version negotiation and body parsing, in the reference's order."""

from __future__ import annotations

import pytest

from .conftest import Shop
from .shopper import headers, line

BODY = {"line_items": [line("bouquet_roses")], "currency": "USD", "payment": {}}
REQUIRED = ["UCP-Agent", "Request-Signature", "Request-Id", "Idempotency-Key"]


def missing(*names: str) -> list[dict]:
    return [
        {"type": "missing", "loc": ["header", n.lower()], "msg": "Field required", "input": None}
        for n in names
    ]


@pytest.mark.parametrize("absent", REQUIRED)
async def test_each_header_is_required_to_create(shop: Shop, absent: str):
    sent = {k: v for k, v in headers().items() if k != absent}

    response = await shop.client.post("/checkout-sessions", json=BODY, headers=sent)

    assert response.status_code == 422
    assert response.json() == {"detail": missing(absent)}
    assert shop.merchant.checkouts() == []


async def test_reads_need_no_idempotency_key(shop: Shop):
    created = (await shop.shopper.create()).json()
    read_headers = {k: v for k, v in headers().items() if k != "Idempotency-Key"}

    response = await shop.client.get(f"/checkout-sessions/{created['id']}", headers=read_headers)
    bare = await shop.client.get(f"/checkout-sessions/{created['id']}")

    assert response.status_code == 200
    assert bare.json() == {"detail": missing(*REQUIRED[:3])}


async def test_cancel_needs_an_idempotency_key(shop: Shop):
    created = (await shop.shopper.create()).json()
    sent = {k: v for k, v in headers().items() if k != "Idempotency-Key"}

    response = await shop.client.post(f"/checkout-sessions/{created['id']}/cancel", headers=sent)

    assert response.json() == {"detail": missing("Idempotency-Key")}


async def test_missing_headers_and_bad_fields_come_back_together(shop: Shop):
    response = await shop.client.post(
        "/checkout-sessions",
        json={"line_items": [{"item": {"id": "x"}, "quantity": 0}], "payment": {}},
        headers={"Request-Signature": "test"},
    )

    assert response.status_code == 422
    assert [e["loc"] for e in response.json()["detail"]] == [
        ["header", "ucp-agent"],
        ["header", "request-id"],
        ["header", "idempotency-key"],
        ["body", "line_items", 0, "quantity"],
        ["body", "currency"],
    ]


@pytest.mark.parametrize(
    ("agent", "status"),
    [
        ('profile="https://agent.example/profile"; version="2099-01-01"', 400),
        ('profile="https://agent.example/profile"; version="2026-01-11"', 201),
        ('profile="https://agent.example/profile"; version="2025-01-01"', 201),
        ("foo", 201),
    ],
)
async def test_version_negotiation(shop: Shop, agent: str, status: int):
    response = await shop.client.post("/checkout-sessions", json=BODY, headers=headers(agent=agent))

    assert response.status_code == status
    if status == 400:
        assert response.json() == {
            "detail": {
                "status": "error",
                "errors": [
                    {
                        "code": "VERSION_UNSUPPORTED",
                        "message": "Version 2099-01-01 is not supported. "
                        "This merchant implements version 2026-01-11.",
                        "severity": "critical",
                    }
                ],
            }
        }


async def test_a_newer_version_wins_over_other_problems(shop: Shop):
    newer = headers(agent='version="2099-01-01"')
    sent = {k: v for k, v in newer.items() if k != "Idempotency-Key"}

    response = await shop.client.post("/checkout-sessions", json={}, headers=sent)

    assert response.status_code == 400


async def test_bad_json_is_reported_before_anything_else(shop: Shop):
    response = await shop.client.post(
        "/checkout-sessions",
        content=b'{"line_items": [',
        headers={"Content-Type": "application/json"},
    )

    assert response.status_code == 422
    assert response.json() == {
        "detail": [
            {
                "type": "json_invalid",
                "loc": ["body", 16],
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": "Expecting value"},
            }
        ]
    }


async def test_a_form_content_type_is_not_json(shop: Shop):
    sent = headers() | {"Content-Type": "application/x-www-form-urlencoded"}

    response = await shop.client.post("/checkout-sessions", content=b"{}", headers=sent)
    without_type = await shop.client.post(
        "/checkout-sessions", content=b'{"line_items": [], "currency": "USD", "payment": {}}',
        headers=headers(),
    )

    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "model_attributes_type"
    assert without_type.status_code == 201


async def test_an_empty_body_is_a_missing_body(shop: Shop):
    response = await shop.client.post("/checkout-sessions", headers=headers())

    assert response.json() == {
        "detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}]
    }


async def test_wrong_methods_and_paths_answer_json(shop: Shop):
    listing = await shop.client.get("/checkout-sessions", headers=headers())
    delete = await shop.client.delete("/checkout-sessions/x", headers=headers())
    nowhere = await shop.client.get("/no/such/path")

    assert (listing.status_code, listing.json()) == (405, {"detail": "Method Not Allowed"})
    assert listing.headers["allow"] == "POST"
    assert delete.status_code == 405
    assert set(delete.headers["allow"].split(", ")) == {"GET", "HEAD", "PUT"}
    assert (nowhere.status_code, nowhere.json()) == (404, {"detail": "Not Found"})
