"""Reading a mandate's tables (syncserver.mandate): each mistake reported at
its place through the caller's ``problem`` callback, as the configuration does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
from jsonpath_ng.ext import parse as parse_path  # type: ignore[attr-defined]

from syncserver.settings import Problems


class Checker:
    """A Problems-like ``check`` that reports through a bare ``problem`` callback."""

    def __init__(self, problem: Callable[[tuple[str, ...], str], None]) -> None:
        self.problem = problem

    def check(self, model: Any, data: Any, where: tuple[str, ...]) -> Any:
        inner = Problems("")
        found = inner.check(model, data, where)
        for line in inner.messages:
            # "<source>: key.path: message" with an empty source
            text = line[2:] if line.startswith(": ") else line
            key, _, message = text.partition(": ")
            # A table is flat: the key is ``where`` (whose parts may hold dots,
            # as "Create.line_items") and one field name after it.
            prefix = ".".join(where)
            field_name = key[len(prefix) + 1 :] if key.startswith(prefix + ".") else ""
            field_name = "in" if field_name == "allowed" else field_name
            path = (*where, field_name) if field_name else tuple(where)
            if message.startswith("unknown setting"):  # the names as written
                message = message.replace("allowed", "in")
            self.problem(path, message)
        return None if inner else found


def json_path(text: str | None, where: tuple[str, ...], problem: Callable[..., None]) -> Any:
    if text is None:
        return None
    try:
        return parse_path(text)
    except (JsonPathLexerError, JsonPathParserError, Exception) as exc:  # its errors vary
        problem(where, f"{text!r} is not a JSONPath: {exc}")
        return None
