"""Digests of bound values: what the social state keeps instead of the values.

A rule only ever asks whether two bound values are equal, so a 64-bit digest of
each answers it in constant memory, however large the value.
"""

from __future__ import annotations

import json
import re

from langshaw.values import JSON


def canonical(value: JSON) -> JSON:
    """The value with every integral float made an int, so ``1.0`` and ``1`` agree."""
    if type(value) is float:
        return int(value) if value.is_integer() else value
    if type(value) is dict:
        return {k: canonical(v) for k, v in value.items()}
    if type(value) is list or type(value) is tuple:
        return [canonical(v) for v in value]
    return value


# A JSON number follows ':', ',' or '['; it is a float if a '.' or an exponent
# follows its digits. Text inside strings may match too: that only costs a
# second encoding.
_MAYBE_FLOAT = re.compile(r"[:,\[]-?\d+[.eE]")


def fingerprint(value: JSON) -> int:
    """A 64-bit digest of a JSON value, equal for equal values (``json_equal``).

    Python's own hash: SipHash, keyed per process, so values cannot be crafted to
    collide; digests are recomputed from the log at each start, so they need not
    agree across processes. Strings and numbers are hashed as they are (``1`` and
    ``1.0`` hash alike), containers through their canonical JSON; a tag keeps the
    kinds apart.
    """
    kind = type(value)
    if kind is str:
        return hash(("s", value))
    if kind is int or kind is float:
        return hash(("n", value))
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if _MAYBE_FLOAT.search(text):  # make integral floats ints, and encode again
        text = json.dumps(
            canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    return hash(("j", text))
