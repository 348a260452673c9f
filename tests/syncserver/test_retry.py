"""The one retry policy: exponential waits, capped, with jitter."""

from __future__ import annotations

import random

from syncserver.retry import JITTER, RETRY_STATUS, Backoff


def test_waits_double_up_to_the_cap() -> None:
    backoff = Backoff(0.1, 1.0)
    assert [backoff.ceiling(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_each_wait_is_jittered_by_at_most_a_quarter() -> None:
    backoff = Backoff(0.1, 1.0, rng=random.Random(7))
    for n in range(1, 8):
        waits = [backoff.delay(n) for _ in range(200)]
        top = backoff.ceiling(n)
        assert all(top * (1 - JITTER) <= w <= top for w in waits)
        assert max(waits) - min(waits) > top * JITTER / 2  # spread, not one value


def test_two_clients_failing_together_do_not_come_back_together() -> None:
    a, b = Backoff(0.1, 5.0, rng=random.Random(1)), Backoff(0.1, 5.0, rng=random.Random(2))
    assert [a.delay(n) for n in range(1, 5)] != [b.delay(n) for n in range(1, 5)]


def test_what_a_retry_may_fix() -> None:
    assert {408, 429, 500, 502, 503, 504} == RETRY_STATUS
    assert 501 not in RETRY_STATUS and 409 not in RETRY_STATUS
