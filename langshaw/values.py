"""Attribute values: JSON values compared by deep equality.

Python's ``==`` says ``True == 1`` and ``{"a": True} == {"a": 1}``; JSON does not,
and a protocol must not accept ``true`` where ``1`` was bound. ``json_equal``
keeps booleans apart from numbers (``1`` and ``1.0`` are one JSON number).
"""

from __future__ import annotations

import math
import sys
from typing import Any

JSON = Any  # None | bool | int | float | str | list[JSON] | dict[str, JSON]

#: The most digits an integer may have. Python writes no longer one as text
#: (``sys.get_int_max_str_digits()``, 4300 unless set), so neither json.dumps
#: nor the stores can keep it, and pydantic's parser refuses a longer one
#: whatever that setting (4300): the HTTP and in-process paths agree.
MAX_DIGITS = min(4300, sys.get_int_max_str_digits() or 4300)
_BIG = 10**MAX_DIGITS  # the smallest integer of MAX_DIGITS + 1 digits
_LEAST = -_BIG  # computed once: negating _BIG in the checks would build it anew

#: How deeply a value may nest (containers one inside another, the value
#: itself the first). Far below the interpreter's recursion limit, so no check,
#: copy or encoder meets RecursionError; and below the ~200 levels pydantic's
#: parser reads in a whole attempt body, so the SyncServer gives the same
#: verdict in process and over HTTP (where the bindings object is one level).
MAX_NESTING = 128

_SCALARS = (str, int, float, type(None))
# The scalars json_equal compares with == when both sides are of the one type
# (a set: the test is on every value of every check).
_SAME_TYPE = frozenset(_SCALARS)


def json_equal(a: JSON, b: JSON) -> bool:
    """Deep equality of two JSON values, with booleans distinct from numbers.

    On every check of a value against an earlier binding, and values that
    crossed a boundary (a copy, a decoded body) are never the same objects:
    scalars inside containers are compared in place, without a call each
    (twice as fast on a checkout's line items)."""
    if a is b:
        return True
    ta, tb = type(a), type(b)
    if ta is tb and ta in _SAME_TYPE:
        return bool(a == b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    # The two loops below are the same on purpose: sharing one (zip over the
    # values) made a checkout's comparison three times slower, on every check.
    if ta is dict or isinstance(a, dict):  # a subclass (an OrderedDict) is an object too
        if (tb is not dict and not isinstance(b, dict)) or len(a) != len(b):
            return False
        for key, x in a.items():
            if key not in b:
                return False
            y = b[key]
            if x is y:
                continue
            tx = type(x)
            if tx is type(y) and tx in _SAME_TYPE:
                if x != y:
                    return False
            elif not json_equal(x, y):
                return False
        return True
    if ta is list or ta is tuple or isinstance(a, list | tuple):
        if (tb is not list and tb is not tuple and not isinstance(b, list | tuple)) or len(
            a
        ) != len(b):
            return False
        for x, y in zip(a, b, strict=True):
            if x is y:
                continue
            tx = type(x)
            if tx is type(y) and tx in _SAME_TYPE:
                if x != y:
                    return False
            elif not json_equal(x, y):
                return False
        return True
    if isinstance(b, dict | list | tuple):
        return False
    return bool(a == b)


_PLAIN = frozenset({str, bool, type(None)})  # int: only if short enough to write


def json_problem(value: Any, path: str = "", *, depth: int = 0) -> str | None:
    """Why ``value`` is not a JSON value (naming where inside it), or None if it is."""
    fault = json_fault(value, path, depth=depth)
    return fault[1] if fault else None


def _plainly_json(value: Any, depth: int) -> bool:
    """Whether ``value`` (inside ``depth`` containers) is JSON built of the plain
    types only (dict, list, tuple, str, int of at most MAX_DIGITS digits, bool,
    None, finite float), nested at most MAX_NESTING deep: the common case,
    answered without building a path for each item. False means "look closer"."""
    kind = type(value)
    if kind is dict:
        if depth >= MAX_NESTING:
            return False
        depth += 1
        for key, item in value.items():
            if type(key) is not str:
                return False
            kind = type(item)
            if kind in _PLAIN:
                continue
            if kind is int:
                if _LEAST < item < _BIG:
                    continue
                return False
            if not _plainly_json(item, depth):
                return False
        return True
    if kind is list or kind is tuple:
        if depth >= MAX_NESTING:
            return False
        depth += 1
        for item in value:
            kind = type(item)
            if kind in _PLAIN:
                continue
            if kind is int:
                if _LEAST < item < _BIG:
                    continue
                return False
            if not _plainly_json(item, depth):
                return False
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is int:
        return bool(_LEAST < value < _BIG)
    return kind in _PLAIN


def json_fault(value: Any, path: str = "", *, depth: int = 0) -> tuple[str, str] | None:
    """Where inside ``value`` (a path from ``path``) it stops being a JSON value,
    and why; None if it is one. The where lets a caller treat a NaN deep in a
    service's answer like any other value of the wrong shape. An integer too
    long to write (MAX_DIGITS) or a value nested too deeply (MAX_NESTING) is
    a fault too, never a RecursionError or a ValueError from an encoder later;
    ``depth`` counts the containers ``value`` sits in (1 for an attribute's
    value checked apart from its bindings object)."""
    if _plainly_json(value, depth):
        return None
    return _fault(value, path, depth, path)


def _digits(value: int) -> int:
    """How many decimal digits ``value`` has (it cannot be written to count them)."""
    value = abs(value)
    digits = int(value.bit_length() * 0.30102999566398120) + 1  # exact or one too many
    return digits - 1 if value < 10 ** (digits - 1) else digits


def _fault(value: Any, path: str, depth: int, root: str) -> tuple[str, str] | None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        if _LEAST < value < _BIG:
            return None
        return path, (
            f"{path or 'value'} is an integer of {_digits(value)} digits, more than JSON "
            f"encoders here accept ({MAX_DIGITS})"
        )
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return path, f"{path or 'value'} is {value}, not a JSON number"
    if isinstance(value, dict | list | tuple) and depth >= MAX_NESTING:
        # Named from where the check began: the path down to here is as long
        # as the nesting (a message of kilobytes, in every log line).
        return root, f"{root or 'value'} is nested too deeply: more than {MAX_NESTING} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return path, f"{path or 'object'} has a non-string key {key!r}"
            fault = _fault(item, f"{path}.{key}" if path else key, depth + 1, root)
            if fault:
                return fault
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            fault = _fault(item, f"{path}[{index}]", depth + 1, root)
            if fault:
                return fault
        return None
    return path, f"{path or 'value'} is a {type(value).__name__}, not a JSON value"


def valid_key_value(value: Any) -> bool:
    """Key values identify scopes, so they must be hashable and unambiguous: str or int."""
    return type(value) is str or type(value) is int


def whole_numbers(value: Any) -> Any:
    """``value`` with every finite float that holds a whole number made an int,
    at any depth. Carriers that hold every number as a double (A2A's data parts,
    protobuf's ``Value``) give ``2500.0`` for the ``2500`` their sender wrote."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def json_copy(value: Any) -> Any:
    """A copy of a JSON value that shares no container with it (what is not a
    JSON container is left as it is: the checks refuse it anyway), for what an
    executor hands on of an attempt (an agent may change its lists after). Scalars,
    most of a value, are taken as they are without a call. A subclass of a
    container (an OrderedDict, a list or a namedtuple of the agent's own) is a
    JSON value to the server's checks too: it arrives as the plain container
    HTTP would bring, never shared (the server kept it, and its later changes)."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _ATOMS else json_copy(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _ATOMS else json_copy(v) for v in value]
    if kind is tuple:
        return tuple(v if type(v) in _ATOMS else json_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(json_copy(v) for v in value)
    return value


# The scalars taken as they are (immutable); anything else goes through json_copy.
_ATOMS = frozenset((str, int, float, bool, type(None)))
