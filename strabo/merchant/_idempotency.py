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


K = TypeVar("K")
V = TypeVar("V")


class Kept(OrderedDict[K, V], Generic[K, V]):
    """A mapping that keeps its ``bound`` latest entries, the oldest set
    forgotten first."""

    def __init__(self, bound: int) -> None:
        super().__init__()
        self.bound = bound

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.bound:
            self.popitem(last=False)


class IdempotencyStore:
    """Replies by idempotency key, for the lifetime of one merchant, the
    :data:`KEPT` latest."""

    def __init__(self, kept: int = KEPT) -> None:
        self._records: Kept[str, tuple[str, Reply]] = Kept(kept)

    def replay(self, key: str, digest: str) -> Reply | None:
        """The stored reply for this key, None if new; 409 if the key meant another request."""
        record = self._records.get(key)
        if record is None:
            return None
        stored_digest, reply = record
        if stored_digest != digest:
            raise idempotency_conflict()
        return reply

    def remember(self, key: str, digest: str, reply: Reply) -> None:
        """Store a successful reply under ``key``."""
        self._records[key] = (digest, reply)
