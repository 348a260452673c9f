"""Idempotency records: a key stands for one request and the reply it got.

A mutating call carries an Idempotency-Key. The first successful reply is stored
under the key with a fingerprint of the request (operation, session id and body).
The same key with the same request replays the stored reply, even if the session
changed since; the same key with another request (another body, another session,
or another operation) is a 409. Failed calls store nothing, so a client may retry
a declined payment under the same key.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ._errors import idempotency_conflict


def fingerprint(operation: str, target: str | None, body: Any) -> str:
    """A digest of what a request asks for; key order in the body does not matter."""
    text = json.dumps([operation, target, body], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Reply:
    """A status and JSON body, stored for replays."""

    status: int
    body: dict[str, Any]


KEPT = 100_000
"""Replies kept at most, the oldest forgotten first: a client making up keys
cannot fill the memory (a key forgotten is served as a new request)."""

KEPT_BYTES = 256 * 2**20
"""The most bytes of replies (as JSON) kept, the oldest forgotten first: a
hundred thousand large checkouts (many line items each) would otherwise hold
gigabytes."""


K = TypeVar("K")
V = TypeVar("V")


class Kept(OrderedDict[K, V], Generic[K, V]):
    """A mapping that keeps its ``bound`` latest entries, the oldest set
    forgotten first; with ``weigh``, also no more than ``max_bytes`` of them
    by its measure (the latest entry is kept, however heavy)."""

    def __init__(
        self, bound: int, max_bytes: int | None = None, weigh: Callable[[V], int] | None = None
    ) -> None:
        super().__init__()
        self.bound = bound
        self.max_bytes = max_bytes
        self.weigh = weigh
        self.bytes = 0
        self._weights: dict[K, int] = {}

    def __setitem__(self, key: K, value: V) -> None:
        if self.weigh is not None:
            weight = self.weigh(value)
            self.bytes += weight - self._weights.get(key, 0)
            self._weights[key] = weight
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.bound or (
            self.max_bytes is not None and self.bytes > self.max_bytes and len(self) > 1
        ):
            self.popitem(last=False)

    def popitem(self, last: bool = True) -> tuple[K, V]:
        key, value = super().popitem(last)
        self.bytes -= self._weights.pop(key, 0)
        return key, value

    def pop(self, key: K, *default: Any) -> Any:
        self.bytes -= self._weights.pop(key, 0)
        return super().pop(key, *default)

    def __delitem__(self, key: K) -> None:
        self.bytes -= self._weights.pop(key, 0)
        super().__delitem__(key)

    def clear(self) -> None:
        super().clear()
        self._weights.clear()
        self.bytes = 0


def json_size(value: Any) -> int:
    """What a value weighs kept: its compact JSON's length."""
    return len(json.dumps(value, separators=(",", ":"), default=str))


class IdempotencyStore:
    """Replies by idempotency key, for the lifetime of one merchant, the
    :data:`KEPT` latest, within :data:`KEPT_BYTES`."""

    def __init__(self, kept: int = KEPT, kept_bytes: int = KEPT_BYTES) -> None:
        self._records: Kept[str, tuple[str, Reply]] = Kept(
            kept, kept_bytes, lambda record: json_size(record[1].body)
        )

    def replay(self, key: str, digest: str) -> Reply | None:
        """The stored reply for this key, None if new; 409 if the key meant another request."""
        record = self._records.get(_slot(key))
        if record is None:
            return None
        stored_digest, reply = record
        if stored_digest != digest:
            raise idempotency_conflict()
        return reply

    def remember(self, key: str, digest: str, reply: Reply) -> None:
        """Store a successful reply under ``key``."""
        self._records[_slot(key)] = (digest, reply)


def _slot(key: str) -> str:
    """Where a key is filed: itself, or a long one (a header may hold 16 KiB,
    and the byte bound weighs the replies only) as its SHA-256, which no key
    kept as itself (64 characters at most) can equal."""
    if len(key) <= 64:
        return key
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
