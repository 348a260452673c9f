"""The merchant's replay memory is bounded by count and by bytes: a client
making up idempotency keys (or A2A messageIds) for large checkouts cannot fill
the memory (strabo/merchant/_idempotency.py)."""

from __future__ import annotations

from strabo.merchant._idempotency import IdempotencyStore, Kept, Reply, json_size


def test_kept_forgets_the_oldest_past_its_count_and_its_bytes() -> None:
    kept: Kept[str, str] = Kept(4, max_bytes=10, weigh=len)
    for key in "abc":
        kept[key] = "xxx"  # 9 bytes
    assert list(kept) == ["a", "b", "c"] and kept.bytes == 9
    kept["d"] = "xxxx"  # 13 > 10: the oldest goes
    assert list(kept) == ["b", "c", "d"] and kept.bytes == 10
    kept["c"] = "x"  # set again: weighed again, and the latest
    assert list(kept) == ["b", "d", "c"] and kept.bytes == 8
    kept["e"] = "x" * 50  # heavier than the bound alone: kept, alone
    assert list(kept) == ["e"] and kept.bytes == 50
    del kept["e"]
    assert kept.bytes == 0
    for key in "vwxyz":
        kept[key] = ""
    assert list(kept) == ["w", "x", "y", "z"]  # the count bound still holds


def test_the_idempotency_store_holds_at_most_its_bytes_of_replies() -> None:
    body = {"id": "co", "line_items": [{"id": f"li{i}", "quantity": 1} for i in range(200)]}
    size = json_size(body)
    store = IdempotencyStore(kept=100_000, kept_bytes=10 * size)
    for i in range(1000):
        store.remember(f"key-{i}", "digest", Reply(201, body))
    assert len(store._records) == 10
    assert store._records.bytes <= 10 * size
    assert store.replay("key-999", "digest") == Reply(201, body)  # the latest replay
    assert store.replay("key-0", "digest") is None  # the oldest: a new request
