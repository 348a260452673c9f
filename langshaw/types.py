"""Attribute types: what values an attribute admits, as JSON Schema.

A protocol may annotate an attribute where an action lists it: ``qty: integer``
(a simple type), ``items: "schemas/items.json"`` (a JSON Schema in a file next to
the protocol, optionally ``#/a/pointer`` into it), and ``note?`` (optional: an
instance may leave it absent, which is not the same as binding ``null``).

Schemas are loaded and compiled once, when the protocol is built, so a missing
file or a bad schema is a located error in ``strabo check`` and checking a value
never reads a file. The validator is jsonschema-rs (JSON Schema 2020-12, fast
enough for the attempt path). Only ``langshaw.semantics`` decides with these;
the rest of the toolkit asks it.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import jsonschema_rs

from langshaw.values import json_problem

SIMPLE_TYPES = ("string", "integer", "number", "boolean", "object", "array")
"""The type names a protocol may write inline; each is the JSON Schema ``type``."""

_MAX_FILES = 64  # schema files one protocol may pull in, through $ref included
# The largest schema file read (the UCP checkout's are under 20 KB): a $ref to a
# log file or a disk image is refused, not read into memory.
_MAX_BYTES = 4 * 2**20
# How deep a value may nest where a schema refers to itself: the validator
# follows such a value level by level on the machine stack. (Over HTTP the JSON
# parser already refuses deeper bodies; this guards values built in process.)
MAX_DEPTH = 256


class SchemaFileError(ValueError):
    """A schema reference that cannot be used: ``code`` says which way it fails."""

    def __init__(self, message: str, code: str = "schema") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class TypeProblem:
    """Why a value does not fit an attribute's type: where inside the value
    (``path``, rooted at the attribute), where in the schema, and what."""

    attribute: str
    path: str
    schema_path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message} (schema: {self.schema_path or '/'})"


@dataclass(frozen=True, eq=False)
class AttributeType:
    """The declared type of one attribute, and whether it is optional.

    ``type`` is a simple type name, or the schema reference as written (a file
    relative to the protocol, maybe with a ``#`` fragment), or None (any JSON
    value). ``schema`` is the JSON Schema the values are checked against.
    """

    attribute: str
    type: str | None = None
    optional: bool = False
    schema: Mapping[str, Any] = field(default_factory=dict)
    _validator: Any = field(default=None, repr=False)
    _registry: Any = field(default=None, repr=False)
    _recursive: bool = field(default=False, repr=False)

    @property
    def spelled(self) -> str:
        """The annotation as a protocol writes it: ``x?: integer``."""
        mark = "?" if self.optional else ""
        if self.type is None:
            return f"{self.attribute}{mark}"
        shown = self.type if self.type in SIMPLE_TYPES else json.dumps(self.type)
        return f"{self.attribute}{mark}: {shown}"

    def fits(self, value: Any) -> bool:
        """Whether ``value`` fits: the fast question, asked on every attempt."""
        validator = self._validator
        if validator is None:
            return True
        if self._recursive and _deeper_than(value, MAX_DEPTH):
            return False
        try:
            return bool(validator.is_valid(value))
        except (ValueError, TypeError, OverflowError):  # not JSON at all
            return False

    def problem(self, value: Any) -> TypeProblem | None:
        """None if ``value`` fits, else where and why it does not."""
        validator = self._validator
        if validator is None:
            return None
        if self._recursive and _deeper_than(value, MAX_DEPTH):
            return TypeProblem(
                self.attribute,
                self.attribute,
                "",
                f"the value nests deeper than {MAX_DEPTH} levels, which a recursive schema "
                "does not follow",
            )
        try:
            if validator.is_valid(value):
                return None
            error = next(iter(validator.iter_errors(value)))
        except (ValueError, TypeError, OverflowError) as exc:  # not JSON at all
            reason = json_problem(value, self.attribute) or str(exc)
            return TypeProblem(self.attribute, self.attribute, "", reason)
        message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
        return TypeProblem(
            self.attribute,
            _instance_path(self.attribute, error.instance_path),
            "/" + "/".join(str(p) for p in error.schema_path),
            message,
        )

    def json_schema(self) -> dict[str, Any]:
        """A self-contained JSON Schema (every ``$ref`` inlined, except circular
        ones): what a tool's ``input_schema`` can carry. A fresh copy each time."""
        return copy.deepcopy(self._inlined)

    @cached_property
    def _inlined(self) -> dict[str, Any]:
        if self.type is None:
            return {}
        if self.type in SIMPLE_TYPES:
            return dict(self.schema)
        inlined = _tidy(jsonschema_rs.dereference(dict(self.schema), registry=self._registry))
        if not _refs(inlined):  # nothing left to point into the definitions
            inlined.pop("$defs", None)
            inlined.pop("definitions", None)
        return inlined  # type: ignore[no-any-return]


def simple(attribute: str, name: str | None, optional: bool) -> AttributeType:
    """The type of an attribute annotated with a simple type name (or none)."""
    if name is None:
        return AttributeType(attribute, None, optional)
    schema = {"type": name}
    return AttributeType(attribute, name, optional, schema, jsonschema_rs.validator_for(schema))


def from_file(attribute: str, reference: str, optional: bool, base: Path) -> AttributeType:
    """The type of an attribute given as a schema file; SchemaFileError if the file
    (or anything it refers to) cannot be read, is not JSON, or is not a schema."""
    target, _, fragment = reference.partition("#")
    if not target:
        raise SchemaFileError(f"{json.dumps(reference)} names no file", "schema-file")
    if urlsplit(target).scheme not in ("", "file") or target.startswith("//"):
        raise SchemaFileError(
            f"{json.dumps(reference)}: a schema must be a file next to the protocol, "
            "not a URL",
            "schema-file",
        )
    path = (base / target).resolve()
    documents: dict[str, Any] = {}
    _load(path, documents, reference)
    uri = path.as_uri()
    pointer = fragment or ""
    if pointer and not pointer.startswith("/"):
        raise SchemaFileError(
            f"{json.dumps(reference)}: the part after '#' must be a JSON pointer such as "
            "'#/$defs/name'",
            "schema-ref",
        )
    if _resolve_pointer(documents[uri], pointer) is _NOWHERE:
        raise SchemaFileError(
            f"{json.dumps(reference)}: {target} has nothing at '#{pointer}'", "schema-ref"
        )
    registry = jsonschema_rs.Registry(list(documents.items()))
    schema = {"$ref": f"{uri}#{pointer}" if pointer else uri}
    try:
        validator = jsonschema_rs.validator_for(schema, registry=registry)
    except (jsonschema_rs.ReferencingError, ValueError) as exc:
        raise SchemaFileError(f"{json.dumps(reference)}: {exc}", "schema-ref") from None
    recursive = bool(_refs(jsonschema_rs.dereference(dict(schema), registry=registry)))
    return AttributeType(attribute, reference, optional, schema, validator, registry, recursive)


# Read only, without waiting (a pipe), not inherited; O_BINARY on Windows.
_OPEN_FLAGS = os.O_RDONLY | sum(
    getattr(os, name, 0) for name in ("O_NONBLOCK", "O_CLOEXEC", "O_BINARY")
)


def _read(path: Path) -> str:
    """The text of the regular file ``path``, of at most _MAX_BYTES. Looked at
    again once open, without waiting in the open (a pipe put in its place since
    the look would hold it for ever), and read no further than the limit: a
    file the kernel writes as it is read (/proc's) says it has 0 bytes, and a
    log grows."""
    fd = os.open(path, _OPEN_FLAGS)
    with open(fd, "rb") as file:  # closes fd
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SchemaFileError(
                f"cannot read schema file {path}: not a regular file", "schema-file"
            )
        data = file.read(_MAX_BYTES + 1)
    if len(data) > _MAX_BYTES:
        raise SchemaFileError(
            f"schema file {path} is more than a schema file may be ({_MAX_BYTES} bytes)",
            "schema-file",
        )
    # As Path.read_text read it: universal newlines (the lines errors name).
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _load(path: Path, documents: dict[str, Any], reference: str) -> None:
    """Read ``path`` and, through their relative ``$ref``s, the files it uses."""
    uri = path.as_uri()
    if uri in documents:
        return
    if len(documents) >= _MAX_FILES:
        raise SchemaFileError(
            f"{json.dumps(reference)} pulls in more than {_MAX_FILES} schema files", "schema-ref"
        )
    try:
        # Looked at before it is opened: a $ref to a pipe or a device would wait,
        # or fill memory, for ever (the protocol's own names are checked earlier,
        # langshaw._validate; a $ref inside a schema file only here).
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise SchemaFileError(
                f"cannot read schema file {path}: not a regular file", "schema-file"
            )
        if info.st_size > _MAX_BYTES:
            raise SchemaFileError(
                f"schema file {path} is {info.st_size} bytes, more than a schema file may "
                f"be ({_MAX_BYTES})",
                "schema-file",
            )
        text = _read(path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the name
        if isinstance(exc, SchemaFileError):
            raise
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SchemaFileError(f"cannot read schema file {path}: {reason}", "schema-file") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaFileError(
            f"schema file {path} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
            "schema-file",
        ) from None
    if not isinstance(document, dict | bool):
        raise SchemaFileError(
            f"schema file {path} holds a {type(document).__name__}, not a JSON Schema (an object)",
            "schema-invalid",
        )
    try:
        jsonschema_rs.meta.validate(document)
    except jsonschema_rs.ValidationError as exc:
        where = _instance_path("", exc.instance_path) or "the top level"
        raise SchemaFileError(
            f"schema file {path} is not a valid JSON Schema: at {where}: {exc.message}",
            "schema-invalid",
        ) from None
    except ValueError as exc:  # an unknown $schema, say
        raise SchemaFileError(
            f"schema file {path} is not a valid JSON Schema: {exc}", "schema-invalid"
        ) from None
    documents[uri] = document
    for ref in _refs(document):
        target = ref.partition("#")[0]
        if not target:
            continue
        if urlsplit(target).scheme not in ("", "file") or target.startswith("//"):
            raise SchemaFileError(
                f"schema file {path} refers to {target}: schemas may only refer to files",
                "schema-ref",
            )
        if target.startswith("file:"):
            _load(Path(unquote(urlsplit(target).path)), documents, reference)
        else:
            _load((path.parent / unquote(target)).resolve(), documents, reference)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers deep (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                found.append(ref)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


_NOWHERE = object()


def _resolve_pointer(document: Any, pointer: str) -> Any:
    node = document
    for part in pointer.split("/")[1:] if pointer else ():
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _NOWHERE
    return node


def _instance_path(attribute: str, parts: Sequence[Any]) -> str:
    """``line_items[0].item.id``: where in a value, readable."""
    text = attribute
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif str(part).isidentifier():
            text += f".{part}" if text else str(part)
        else:
            text += f"[{json.dumps(str(part))}]"
    return text


def _tidy(node: Any) -> Any:
    """Drop what only matters to a validator resolving files (``$schema``, ``$id``)."""
    if isinstance(node, dict):
        return {k: _tidy(v) for k, v in node.items() if k not in ("$schema", "$id")}
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    return node
