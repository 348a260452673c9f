"""Comparing JSON bodies by shape, not by value.

Two JSON values have the same *shape* when:

- both are objects with exactly the same keys, and the values under each key have
  the same shape; a member whose value is null counts as no member at all (the
  reference merchant sends null for an absent optional field, which the spec's
  schemas do not allow: we leave the field out, and that is the same shape);
- both are arrays, and either both are empty or both are non-empty with the same
  set of element shapes (so lengths and order may differ: three identical discount
  entries have the shape of one);
- both are scalars of the same kind: null, boolean, integer, float or string (the
  values may differ, so ids, timestamps, amounts and messages are free).

A null and an object are different shapes: a key the reference sends as null and we
fill is an unexpected key. A body that is not JSON (the reference's plain-text 500)
has to be equal as text.
"""

from __future__ import annotations

import json
from typing import Any


def kind(value: Any) -> str:
    """The JSON kind of a value: object, array, null, boolean, integer, float, string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise TypeError(f"not a JSON value: {value!r}")


def signature(value: Any) -> str:
    """A canonical text of a value's shape; equal signatures mean equal shapes."""
    return json.dumps(_tree(value), sort_keys=True, separators=(",", ":"))


def _tree(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _tree(item) for key, item in _members(value).items()}
    if isinstance(value, list):
        return ["array", sorted({signature(item) for item in value})]
    return kind(value)


def _members(value: dict[str, Any]) -> dict[str, Any]:
    """An object's members but those whose value is null (absent fields)."""
    return {key: item for key, item in value.items() if item is not None}


def differences(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Where ``actual`` differs in shape from ``expected``, one line per place.

    An empty list means the shapes are the same.
    """
    if kind(expected) != kind(actual):
        return [f"{path}: expected {kind(expected)}, got {kind(actual)}"]
    if isinstance(expected, dict):
        expected, actual = _members(expected), _members(actual)
        found = []
        missing = sorted(set(expected) - set(actual))
        extra = sorted(set(actual) - set(expected))
        if missing:
            found.append(f"{path}: missing keys {missing}")
        if extra:
            found.append(f"{path}: unexpected keys {extra}")
        for key in expected:
            if key in actual:
                found += differences(expected[key], actual[key], f"{path}.{key}")
        return found
    if isinstance(expected, list):
        if not expected or not actual:
            if bool(expected) != bool(actual):
                state = "empty" if not actual else "non-empty"
                return [f"{path}: expected {'non-' * bool(expected)}empty array, got {state}"]
            return []
        wanted = {signature(item): item for item in expected}
        got = {signature(item): item for item in actual}
        if wanted.keys() == got.keys():
            return []
        found = []
        for sig in wanted.keys() - got.keys():
            nearest = next(iter(got.values()))
            found += differences(wanted[sig], nearest, f"{path}[*]") or [
                f"{path}[*]: no element shaped like {sig}"
            ]
        for sig in got.keys() - wanted.keys():
            nearest = next(iter(wanted.values()))
            found += differences(nearest, got[sig], f"{path}[*]") or [
                f"{path}[*]: unexpected element shaped like {sig}"
            ]
        return sorted(set(found))
    return []
