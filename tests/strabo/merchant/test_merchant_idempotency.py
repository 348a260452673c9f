"""Idempotency-Key: replays, conflicts, and what is (not) stored."""

from __future__ import annotations

import asyncio
import json
import uuid

from .conftest import Shop
from .shopper import JOHN, headers, instrument, line


async def test_same_key_and_body_replays_the_first_reply_even_after_later_changes(shop: Shop):
    created = (await shop.shopper.create()).json()
    key = str(uuid.uuid4())
    first = await shop.shopper.update(created, key=key, discounts={"codes": ["10OFF"]})
    await shop.shopper.update(first.json(), discounts={"codes": ["WELCOME20"]})

    replay = await shop.shopper.update(created, key=key, discounts={"codes": ["10OFF"]})

    assert replay.status_code == 200
    assert replay.json() == first.json()
    assert shop.merchant.checkout(created["id"]).discounts.codes == ["WELCOME20"]


async def test_create_replay_gives_201_and_opens_no_second_session(shop: Shop):
    key = str(uuid.uuid4())
    first = await shop.shopper.create(key=key)
    second = await shop.shopper.create(key=key)

    assert (first.status_code, second.status_code) == (201, 201)
    assert second.json()["id"] == first.json()["id"]
    assert len(shop.merchant.checkouts()) == 1


async def test_body_key_order_does_not_make_a_different_request(shop: Shop):
    key = str(uuid.uuid4())
    body = {"line_items": [line("bouquet_roses")], "currency": "USD", "payment": {}}
    reordered = {"payment": {}, "currency": "USD", "line_items": [line("bouquet_roses")]}
    first = await shop.client.post(
        "/checkout-sessions", content=json.dumps(body), headers=headers(key=key)
    )
    second = await shop.client.post(
        "/checkout-sessions", content=json.dumps(reordered), headers=headers(key=key)
    )

    assert second.status_code == 201
    assert second.json()["id"] == first.json()["id"]


async def test_same_key_with_a_different_body_is_a_conflict_and_changes_nothing(shop: Shop):
    created = (await shop.shopper.create()).json()
    key = str(uuid.uuid4())
    await shop.shopper.update(created, key=key)

    conflict = await shop.shopper.update(created, key=key, discounts={"codes": ["10OFF"]})

    assert conflict.status_code == 409
    assert conflict.json() == {
        "detail": "Idempotency key reused with different parameters",
        "code": "IDEMPOTENCY_CONFLICT",
    }
    assert shop.merchant.checkout(created["id"]).discounts.codes is None


async def test_a_key_used_for_create_cannot_cancel(shop: Shop):
    key = str(uuid.uuid4())
    created = (await shop.shopper.create(key=key)).json()

    response = await shop.shopper.cancel(created["id"], key=key)

    assert response.status_code == 409
    assert response.json()["code"] == "IDEMPOTENCY_CONFLICT"
    assert shop.merchant.checkout(created["id"]).status == "ready_for_complete"


async def test_a_cancel_key_reused_on_another_session_is_a_conflict(shop: Shop):
    one = (await shop.shopper.create()).json()
    two = (await shop.shopper.create()).json()
    key = str(uuid.uuid4())
    assert (await shop.shopper.cancel(one["id"], key=key)).status_code == 200

    response = await shop.shopper.cancel(two["id"], key=key)

    assert response.status_code == 409
    assert shop.merchant.checkout(two["id"]).status == "ready_for_complete"


async def test_a_declined_payment_is_not_stored_so_the_key_can_be_retried(shop: Shop):
    ready = await shop.shopper.ship_ready()
    key = str(uuid.uuid4())

    declined = await shop.shopper.complete(ready["id"], instrument("fail_token"), key=key)
    retried = await shop.shopper.complete(ready["id"], instrument("success_token"), key=key)

    assert declined.status_code == 402
    assert retried.status_code == 200
    assert retried.json()["status"] == "completed"


async def test_completion_replay_returns_the_order_without_placing_another(shop: Shop):
    ready = await shop.shopper.ship_ready()
    key = str(uuid.uuid4())
    first = await shop.shopper.complete(ready["id"], key=key)
    replay = await shop.shopper.complete(ready["id"], key=key)
    again = await shop.shopper.complete(ready["id"])

    assert replay.status_code == 200
    assert replay.json()["order"] == first.json()["order"]
    assert len(shop.merchant.orders()) == 1
    assert again.status_code == 409
    assert again.json()["code"] == "CHECKOUT_NOT_MODIFIABLE"


async def test_concurrent_creates_with_one_key_open_one_session(shop: Shop):
    key = str(uuid.uuid4())
    body = {"line_items": [line("pot_ceramic")], "currency": "USD", "buyer": JOHN, "payment": {}}

    responses = await asyncio.gather(
        *(
            shop.client.post("/checkout-sessions", json=body, headers=headers(key=key))
            for _ in range(8)
        )
    )

    assert {r.status_code for r in responses} == {201}
    assert len({r.json()["id"] for r in responses}) == 1
    assert len(shop.merchant.checkouts()) == 1


async def test_the_records_kept_are_bounded_the_oldest_forgotten_first(shop: Shop):
    """A client making up keys cannot fill the merchant's memory: past the bound,
    the oldest key is forgotten (and served as a new request)."""
    shop.merchant._idempotency._records.bound = 2
    keys = [str(uuid.uuid4()) for _ in range(3)]
    first = [(await shop.shopper.create(key=k)).json()["id"] for k in keys]
    assert len(shop.merchant._idempotency._records) == 2
    # The newest two still replay; the oldest opens a new session.
    assert (await shop.shopper.create(key=keys[2])).json()["id"] == first[2]
    assert (await shop.shopper.create(key=keys[0])).json()["id"] not in first


def test_kept_holds_its_bound_latest_entries() -> None:
    """The A2A binding's replies and contexts are kept the same way."""
    from strabo.merchant._idempotency import Kept

    kept: Kept[str, int] = Kept(2)
    kept["a"], kept["b"], kept["a"], kept["c"] = 1, 2, 3, 4
    assert list(kept.items()) == [("a", 3), ("c", 4)]
