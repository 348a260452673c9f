"""When to try an HTTP request again, and how long to wait first: one policy for
every client of the project (an executor resending an attempt, a feed
reconnecting its stream, a peer resending its messages, the proxy resending a
request to a service).

What a retry may fix: no answer at all (refused, reset, timed out), or one of
``RETRY_STATUS``. The request must be safe to send twice: attempts carry their
attempt id, peers' messages their ids, the proxy's requests an idempotency key.

How long to wait: :class:`Backoff`, exponential from ``base`` and capped at
``cap``, less a random part of up to a quarter (jitter), so that many clients
that failed together do not all come back at the same instant. The random part
is at most a quarter, not all of it, so that a wait is never much shorter than
the schedule says: a retry budget then bounds the number of tries as planned.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# Answers a retry may fix. 501 (not implemented) and the 4xx other than 408 and
# 429 mean the request itself is refused: sending it again changes nothing.
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})

JITTER = 0.25  # at most this share of a wait is taken off at random

_RNG = random.Random()  # shared: a Backoff costs nothing to make


@dataclass(frozen=True)
class Backoff:
    """The wait before retry ``n`` (1 for the first): ``base * 2**(n-1)``, at most
    ``cap``, less up to ``JITTER`` of it at random."""

    base: float
    cap: float
    rng: random.Random = field(default=_RNG, compare=False, repr=False)

    def ceiling(self, retry: int) -> float:
        """The wait before retry ``retry`` without jitter: the longest it can be."""
        return float(min(self.cap, self.base * 2 ** max(retry - 1, 0)))

    def delay(self, retry: int) -> float:
        longest = self.ceiling(retry)
        return longest * (1 - JITTER * self.rng.random())
