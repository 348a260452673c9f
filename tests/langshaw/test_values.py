"""JSON values: deep equality, and the digests the SyncServer keeps instead of values."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langshaw import json_equal
from langshaw.semantics import fingerprint
from langshaw.values import json_problem

SAME = [
    (1, 1.0),
    ({"a": [1, 2.0], "b": {"c": None}}, {"b": {"c": None}, "a": [1.0, 2]}),
    ("é", "é"),
    ([], []),
    ({"x": 1e3}, {"x": 1000}),
]
DIFFERENT = [
    (True, 1),
    (False, 0),
    ("1", 1),
    ([1], {"0": 1}),
    ({"a": True}, {"a": 1}),
    ({"t": "v1.0"}, {"t": "v1"}),
    (1.5, 1),
    (None, "null"),
    ([1, 2], [2, 1]),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_equal_values_are_equal_and_share_a_digest(a: object, b: object) -> None:
    assert json_equal(a, b) and json_equal(b, a)
    assert fingerprint(a) == fingerprint(b)


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_different_values_differ_and_so_do_their_digests(a: object, b: object) -> None:
    assert not json_equal(a, b) and not json_equal(b, a)
    if not any(v is True or v is False or v is None for v in (a, b)):
        assert fingerprint(a) != fingerprint(b)


def test_json_problem_names_the_place() -> None:
    assert json_problem({"a": [1, {"b": {1, 2}}]}) == "a[1].b is a set, not a JSON value"
    assert json_problem({1: "x"}) == "object has a non-string key 1"
    assert json_problem(float("nan")) == "value is nan, not a JSON number"
    assert json_problem({"ok": [1, "two", None, True, 2.5]}) is None


class Text(str):
    pass


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"a": {"b": [1, {"c": float("inf")}]}}, "a.b[1].c is inf, not a JSON number"),
        ([[[float("-inf")]]], "[0][0][0] is -inf, not a JSON number"),
        ({"a": {True: 1}}, "a has a non-string key True"),
        ({"a": (1, {"b": b"x"})}, "a[1].b is a bytes, not a JSON value"),
        # Not plain, still JSON: subclasses of the JSON types, tuples for lists.
        ({Text("k"): [Text("v"), (1, 2.5)]}, None),
        ({"deep": [[[[{"x": [None, False, "s", 3, 4.5]}]]]]}, None),
    ],
)
def test_json_problem_looks_closer_only_where_the_quick_check_balks(
    value: object, problem: str | None
) -> None:
    assert json_problem(value) == problem


# json_equal against an oracle written from its definition, not from its code:
# two values are equal when their tagged forms are (a boolean is tagged apart
# from numbers; a list and a tuple are one sequence; an object's key order does
# not count; an integer and a float of the same value are one number).

def _tagged(value: object) -> object:
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, dict):
        return ("object", frozenset((k, _tagged(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(_tagged(v) for v in value))
    return ("scalar", value)


_leaves = st.one_of(
    st.booleans(), st.sampled_from([0, 1, 2, 0.0, 1.0, -0.0, 2.5]), st.sampled_from(["a", "b", ""]),
    st.none(),
)
class _Items(list):  # type: ignore[type-arg]
    """A list of the agent's own: JSON to the checks, as an OrderedDict is."""


_values = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=3)
    | st.lists(inner, max_size=3).map(tuple)
    | st.lists(inner, max_size=3).map(_Items)
    | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3).map(OrderedDict),
    max_leaves=12,
)


@settings(max_examples=1500, deadline=None)
@given(_values, _values)
def test_json_equal_agrees_with_the_tagged_oracle(a: object, b: object) -> None:
    expected = _tagged(a) == _tagged(b)
    assert json_equal(a, b) is expected  # type: ignore[arg-type]
    assert json_equal(b, a) is expected  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(_values)
def test_json_equal_holds_between_a_value_and_its_copy(a: object) -> None:
    import copy

    assert json_equal(a, copy.deepcopy(a))  # type: ignore[arg-type]
