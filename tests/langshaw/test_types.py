"""Typed and optional attributes: the syntax, its checks, and the semantics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from langshaw import (
    ABSENT,
    ActionInstance,
    LangshawError,
    LangshawProtocol,
    SocialState,
)
from langshaw.model import diagnose
from tests.conftest import FIXTURES, PROTOCOLS

TYPED = FIXTURES / "lsh" / "typed"
ORDER = LangshawProtocol.load(TYPED / "order.lsh")
ITEMS = [{"sku": "ABC-1", "qty": 2}]


def instance(name: str, **bindings: object) -> ActionInstance:
    return ActionInstance(ORDER.action(name), bindings)


# Syntax and model ---------------------------------------------------------------------


def test_annotations_are_read_once_and_apply_to_every_occurrence() -> None:
    types = ORDER.types
    assert types["oid"].type == "string" and not types["oid"].optional
    assert types["items"].type == "schemas/items.json"
    assert types["note"].type == "string" and types["note"].optional
    assert types["gift"].type is None and types["gift"].optional  # optional, any value
    assert ORDER.optional == {"note", "gift", "eta"}
    assert ORDER.type_of("Order") is None and ORDER.type_of("nothing") is None
    # Delivered lists `note` bare: it is the same attribute, so the same type.
    assert "Seller : Delivered(oid: string, Pay, note?: string)" in ORDER.describe()


def test_every_shipped_protocol_parses_as_before_when_unannotated() -> None:
    for path in PROTOCOLS.glob("*.lsh"):
        text = path.read_text()
        plain = LangshawProtocol.parse(_strip_annotations(text), str(path), base=path.parent)
        typed = LangshawProtocol.load(path)
        assert plain.actions.keys() == typed.actions.keys()
        for name, action in typed.actions.items():
            assert plain.actions[name].attributes == action.attributes
        assert plain.completion == typed.completion and plain.sayso == typed.sayso


def _strip_annotations(text: str) -> str:
    import re

    text = re.sub(r'\?', "", text)
    return re.sub(r':\s*("[^"]*"|string|integer|number|boolean|object|array)(?=\s*[,)])', "", text)


def test_a_schema_file_is_found_next_to_the_protocol_whatever_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    protocol = LangshawProtocol.load(TYPED / "order.lsh")
    assert protocol.types["items"].problem(ITEMS) is None
    # parse() takes the directory from base=
    text = (TYPED / "order.lsh").read_text()
    with pytest.raises(LangshawError, match="cannot read schema file"):
        LangshawProtocol.parse(text)
    assert LangshawProtocol.parse(text, base=TYPED).types["items"].type == "schemas/items.json"


def test_json_schema_is_self_contained_for_tools() -> None:
    schema = ORDER.types["items"].json_schema()
    text = json.dumps(schema)
    assert "$ref" not in text and "$schema" not in text and "$defs" not in text
    assert schema["items"]["properties"]["sku"]["pattern"] == "^[A-Z]{3}-[0-9]+$"
    assert ORDER.types["price"].json_schema() == {"type": "number"}
    assert ORDER.types["gift"].json_schema() == {}
    schema["type"] = "changed"  # a copy: the protocol's stays as it is
    assert ORDER.types["items"].json_schema()["type"] == "array"


# strabo check: every mistake located --------------------------------------------------


def check(tmp_path: Path, do: str, files: dict[str, str] | None = None) -> list[str]:
    for name, content in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    text = f"P\nwho A, B\nwhat id key, Done\ndo\n{do}\nsayso\n  A : x, y\n  B : z\n"
    path = tmp_path / "p.lsh"
    path.write_text(text)
    _, diagnostics = diagnose(text, str(path), base=tmp_path)
    # (the sayso clause gives x, y and z whether the actions carry them or not)
    return [
        f"{d.line}:{d.column} {d.code}: {d.message}"
        for d in diagnostics
        if d.code != "sayso-unknown-attribute" and d.severity == "error"
    ]


def test_unknown_type_name_is_located_with_a_suggestion(tmp_path: Path) -> None:
    [error] = check(tmp_path, "  A : Done(id, x: strng)")
    assert error.startswith("5:19 unknown-type: unknown type 'strng' for 'x'")
    assert error.endswith("did you mean 'string'?")


def test_an_attribute_typed_differently_in_two_actions(tmp_path: Path) -> None:
    [error] = check(tmp_path, "  A : Go(id, x: integer)\n  B : Done(id, Go, x: string, z)")
    assert error.startswith("6:23 type-conflict: 'x: string' in 'Done' differs from")
    assert "'x: integer' in 'Go' (line 5)" in error
    [error] = check(tmp_path, "  A : Go(id, x: integer)\n  B : Done(id, Go, x?, z)")
    assert error.startswith("6:21 type-conflict: 'x?' in 'Done' differs from 'x: integer'")


@pytest.mark.parametrize(
    ("files", "code", "fragment"),
    [
        ({}, "schema-file", "cannot read schema file"),
        ({"s.json": "{not json"}, "schema-file", "is not JSON: Expecting property name"),
        ({"s.json": '{"type": 3}'}, "schema-invalid", "is not a valid JSON Schema: at type"),
        ({"s.json": "[1, 2]"}, "schema-invalid", "holds a list, not a JSON Schema"),
        ({"s.json": '{"$ref": "other.json"}'}, "schema-file", "cannot read schema file"),
        (
            {"s.json": '{"$ref": "https://example.com/x.json"}'},
            "schema-ref",
            "schemas may only refer to files",
        ),
    ],
)
def test_schema_files_that_cannot_be_used(
    tmp_path: Path, files: dict[str, str], code: str, fragment: str
) -> None:
    [error] = check(tmp_path, '  A : Done(id, x: "s.json")', files)
    assert error.startswith(f"5:19 {code}: 'x': "), error
    assert fragment in error


def test_a_fragment_must_point_into_the_file(tmp_path: Path) -> None:
    files = {"s.json": '{"$defs": {"a": {"type": "string"}}}'}
    assert check(tmp_path, '  A : Done(id, x: "s.json#/$defs/a")', files) == []
    [error] = check(tmp_path, '  A : Done(id, x: "s.json#/$defs/b")', files)
    assert "schema-ref" in error and "has nothing at '#/$defs/b'" in error
    [error] = check(tmp_path, '  A : Done(id, x: "s.json#a")', files)
    assert "must be a JSON pointer" in error
    [error] = check(tmp_path, '  A : Done(id, x: "https://example.com/s.json")', files)
    assert "not a URL" in error


def test_keys_and_dependencies_take_limited_annotations(tmp_path: Path) -> None:
    assert check(tmp_path, "  A : Done(id: integer, x)") == []
    [error] = check(tmp_path, "  A : Done(id: object, x)")
    assert error.startswith("5:16 key-type: key 'id' can only be typed string or integer")
    [error] = check(tmp_path, "  A : Done(id?, x)")
    assert error.startswith("5:14 optional-key: key 'id' cannot be optional")
    [error] = check(tmp_path, "  A : Go(id, x)\n  B : Done(id, Go: boolean, z)")
    assert error.startswith("6:20 typed-dependency: 'Go' is an action")


def test_strabo_check_prints_type_errors_as_file_line_col(tmp_path: Path) -> None:
    path = tmp_path / "bad.lsh"
    path.write_text("P\nwho A\nwhat id key, Done\ndo\n  A : Done(id, x: \"missing.json\")\n"
                    "sayso\n  A : x\n")
    result = subprocess.run(
        [sys.executable, "-m", "strabo.cli", "check", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert f"{path}:5:19: 'x': cannot read schema file" in result.stderr
    assert "Traceback" not in result.stderr


# Semantics ----------------------------------------------------------------------------


@pytest.fixture(params=[False, True], ids=["values", "fingerprints"])
def state(request: pytest.FixtureRequest) -> SocialState:
    return SocialState(ORDER, fingerprints=request.param)


def test_a_value_that_does_not_fit_is_a_type_violation_with_its_path(state: SocialState) -> None:
    violation = state.attempt([instance("Order", oid="o1", items=[{"sku": "ABC-1", "qty": 0}])])
    assert violation is not None and violation.rule == "type"
    assert violation.attribute == "items" and violation.path == "items[0].qty"
    assert "items[0].qty: 0 is less than the minimum of 1" in violation.message
    assert "(schema: /$defs/line/properties/qty/minimum)" in violation.message
    violation = state.attempt([instance("Order", oid="o1", items=[{"sku": "abc", "qty": 1}])])
    assert violation is not None and violation.path == "items[0].sku"
    violation = state.attempt([instance("Order", oid=7, items=ITEMS)])
    assert violation is not None and violation.rule == "type" and violation.path == "oid"
    assert len(state) == 0  # nothing applied


def test_absent_is_not_null(state: SocialState) -> None:
    # A typed optional attribute: null is a value, and not a string.
    violation = state.attempt([instance("Order", oid="o1", items=ITEMS, note=None)])
    assert violation is not None and violation.rule == "type" and violation.path == "note"
    # An untyped optional one takes null as its value, which differs from absent.
    assert state.attempt([instance("Order", oid="o1", items=ITEMS, gift=None)]) is None
    assert state.attempt([instance("Order", oid="o2", items=ITEMS)]) is None
    assert state.enactment(("o1",)).bindings((("oid", "o1"),))["gift"] is None  # type: ignore[union-attr]
    assert state.enactment(("o2",)).bindings((("oid", "o2"),))["gift"] is ABSENT  # type: ignore[union-attr]


def test_absence_holds_like_a_binding(state: SocialState) -> None:
    assert state.attempt([instance("Order", oid="o1", items=ITEMS)]) is None
    assert state.attempt([instance("Accept", oid="o1", Order=True, price=3)]) is None
    assert state.attempt([instance("Pay", oid="o1", Accept=True, amount=3)]) is None
    [delivered] = state.enabled("Seller", ("o1",))
    assert delivered.fixed["note"] is ABSENT and delivered.to_bind == ()
    violation = state.attempt([instance("Delivered", oid="o1", Pay=True, note="hi")])
    assert violation is not None and violation.rule == "bound"
    assert "'note' was left absent here, so 'Delivered' must leave it absent too" in (
        violation.message
    )
    assert state.attempt([instance("Delivered", oid="o1", Pay=True)]) is None
    assert state.is_complete(("o1",))


def test_a_bound_optional_attribute_must_be_carried(state: SocialState) -> None:
    assert state.attempt([instance("Order", oid="o1", items=ITEMS, note="ring twice")]) is None
    state.attempt([instance("Accept", oid="o1", Order=True, price=3)])
    state.attempt([instance("Pay", oid="o1", Accept=True, amount=3)])
    violation = state.attempt([instance("Delivered", oid="o1", Pay=True)])
    assert violation is not None and violation.rule == "bound"
    assert "it leaves it absent" in violation.message
    assert state.attempt([instance("Delivered", oid="o1", Pay=True, note="ring twice")]) is None


def test_required_attributes_are_still_required(state: SocialState) -> None:
    violation = state.attempt([instance("Order", oid="o1")])
    assert violation is not None and violation.rule == "missing-attribute"
    assert "only optional attributes may be left absent" in violation.message


def test_an_absent_attribute_does_not_complete() -> None:
    protocol = LangshawProtocol.parse(
        "P\nwho A\nwhat id key, answer\ndo\n  A : Ask(id, answer?: string)\nsayso\n  A : answer\n"
    )
    state = SocialState(protocol)
    assert state.attempt([ActionInstance(protocol.action("Ask"), {"id": 1})]) is None
    assert not state.is_complete((1,))
    assert state.attempt([ActionInstance(protocol.action("Ask"), {"id": 2, "answer": "y"})]) is None
    assert state.is_complete((2,))


def test_type_violation_is_what_bind_asks() -> None:
    state = SocialState(ORDER)
    assert state.type_violation("Order", "items", ITEMS) is None
    assert state.type_violation("Order", "gift", object()) is None  # untyped: not its job
    violation = state.type_violation("Accept", "price", "3")
    assert violation is not None and violation.rule == "type" and violation.path == "price"
    assert violation.message == "'Accept': price: \"3\" is not of type \"number\" (schema: /type)"


def test_a_recursive_schema_refuses_values_too_deep_to_follow(tmp_path: Path) -> None:
    """A schema that refers to itself is followed level by level on the machine
    stack: a value built in process, nested without end, is refused, not a crash."""
    (tmp_path / "tree.json").write_text('{"type": "array", "items": {"$ref": "#"}}')
    protocol = LangshawProtocol.parse(
        'P\nwho A\nwhat id key, Go\ndo\n  A : Go(id, t: "tree.json")\nsayso\n  A : t\n',
        base=tmp_path,
    )
    deep: list[object] = []
    for _ in range(200_000):
        deep = [deep]
    state = SocialState(protocol)
    violation = state.attempt([ActionInstance(protocol.action("Go"), {"id": 1, "t": deep})])
    assert violation is not None and violation.rule == "type"
    assert "nests deeper than 256 levels" in violation.message
    shallow: list[object] = []
    for _ in range(100):
        shallow = [shallow]
    assert state.attempt([ActionInstance(protocol.action("Go"), {"id": 2, "t": shallow})]) is None
