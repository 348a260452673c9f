"""Attribute values: JSON values compared by deep equality.

Python's ``==`` says ``True == 1`` and ``{"a": True} == {"a": 1}``; JSON does not,
and a protocol must not accept ``true`` where ``1`` was bound. ``json_equal``
keeps booleans apart from numbers (``1`` and ``1.0`` are one JSON number).
"""

from __future__ import annotations

import math
from typing import Any

JSON = Any  # None | bool | int | float | str | list[JSON] | dict[str, JSON]

_SCALARS = (str, int, float, type(None))


def json_equal(a: JSON, b: JSON) -> bool:
    """Deep equality of two JSON values, with booleans distinct from numbers."""
    if a is b:
        return True
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta is dict:
        if tb is not dict or len(a) != len(b):
            return False
        return all(key in b and json_equal(value, b[key]) for key, value in a.items())
    if ta is list or ta is tuple:
        if (tb is not list and tb is not tuple) or len(a) != len(b):
            return False
        return all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if tb is dict or tb is list or tb is tuple:
        return False
    return bool(a == b)


_PLAIN = frozenset({str, int, bool, type(None)})


def json_problem(value: Any, path: str = "") -> str | None:
    """Why ``value`` is not a JSON value (naming where inside it), or None if it is."""
    fault = json_fault(value, path)
    return fault[1] if fault else None


def _plainly_json(value: Any) -> bool:
    """Whether ``value`` is JSON built of the plain types only (dict, list,
    tuple, str, int, bool, None, finite float): the common case, answered
    without building a path for each item. False means "look closer"."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if type(item) not in _PLAIN and not _plainly_json(item):
                return False
        return True
    if kind is list or kind is tuple:
        return all(type(item) in _PLAIN or _plainly_json(item) for item in value)
    if kind is float:
        return math.isfinite(value)
    return kind in _PLAIN


def json_fault(value: Any, path: str = "") -> tuple[str, str] | None:
    """Where inside ``value`` (a path from ``path``) it stops being a JSON value,
    and why; None if it is one. The where lets a caller treat a NaN deep in a
    service's answer like any other value of the wrong shape."""
    if _plainly_json(value):
        return None
    return _fault(value, path)


def _fault(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return path, f"{path or 'value'} is {value}, not a JSON number"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return path, f"{path or 'object'} has a non-string key {key!r}"
            fault = _fault(item, f"{path}.{key}" if path else key)
            if fault:
                return fault
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            fault = _fault(item, f"{path}[{index}]")
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
