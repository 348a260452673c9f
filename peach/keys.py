"""Fresh key values for new scopes: unique, and sortable by creation time.

ULIDs: 48 bits of milliseconds and 80 random bits in Crockford base32, strictly
increasing within a process, so an agent can take "the latest version" of an
IncrementalUCP checkout by sorting its ``v`` values.
"""

from __future__ import annotations

import secrets
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last = 0


def new_key() -> str:
    global _last
    with _lock:
        value = (int(time.time() * 1000) << 80) | secrets.randbits(80)
        if value <= _last:
            value = _last + 1
        _last = value
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))
