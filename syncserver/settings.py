"""TOML settings read through pydantic models, every problem located in the file.

A configuration is written by a person and read by a server that must refuse it
before it listens, so a mistake is worth one precise line: which file, which
line, which key, what was expected and what was given
(``mas.toml:7: server.policy: must be 'instant' or 'batched', not 'eventually'``),
and every mistake at once, not the first. pydantic checks the shape (types,
ranges, unknown keys); the reader of each file checks what the shape cannot say
(a role its protocols lack, a variable that is not set) and reports it through
the same :class:`Problems`. The SyncServer's configuration (syncserver.config)
and ``strabo simulate``'s scenarios use it.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "Problems", "SettingsError", "Table", "line_of", "must", "parse_toml", "read_toml",
]

T = TypeVar("T", bound=BaseModel)


class SettingsError(Exception):
    """A settings file that cannot be used; ``problems`` lists every mistake."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class Table(BaseModel):
    """A TOML table: every key known, every value of its exact type (``true``
    is not a number, ``"5"`` is not an integer, ``inf`` is not a timeout)."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, allow_inf_nan=False,
        arbitrary_types_allowed=True,
    )


def must(phrase: str, default: Any = None, **constraints: Any) -> Any:
    """A field whose every wrong value is reported as ``must be <phrase>, not
    <value>``: one message whatever check failed (type, range or length)."""
    return Field(default, json_schema_extra={"must": phrase}, **constraints)


class Problems:
    """Every problem of one file, each with its place, listed in the file's order."""

    def __init__(self, source: str, text: str | None = None, limit: int = 50) -> None:
        self.source = source
        self.text = text
        self.limit = limit
        self._found: list[tuple[int, int, str]] = []

    def __bool__(self) -> bool:
        return bool(self._found)

    def __len__(self) -> int:
        return len(self._found)

    def add(self, where: tuple[str, ...] | str, message: str) -> None:
        """Report ``message`` about the key at ``where`` (``("server", "policy")``
        or ``"server.policy"``; empty for the whole file)."""
        path = tuple(where.split(".")) if isinstance(where, str) and where else tuple(where)
        line = line_of(self.text, path) if self.text is not None and path else None
        place = f"{self.source}:{line}" if line else self.source
        key = ".".join(path)
        text = f"{place}: {key}: {message}" if key else f"{place}: {message}"
        self._found.append((line or 0, len(self._found), text))

    def check(
        self, model: type[T], data: Any, where: tuple[str, ...] = ()
    ) -> T | None:
        """``data`` as a ``model``, after reporting each of its mistakes.

        A mistake does not hide the others: an unknown key is reported and left
        out, a wrong value is reported and left at its default. None when a
        required value is missing or wrong."""
        if not isinstance(data, Mapping):
            self.add(where, "must be a table")
            return None
        known = model.model_fields
        for key in data:
            if key not in known:
                self.add((*where, str(key)), _unknown(str(key), list(known)))
        values = {k: v for k, v in data.items() if k in known}
        try:
            return model.model_validate(values)
        except ValidationError as error:
            # A table is flat (a table inside it is checked on its own), so each
            # mistake is reported at its key, with the whole value given there
            # (not at an item of a list, nor at a member of a union of types).
            wrong: dict[str, Any] = {}
            for item in error.errors():
                key = str(item["loc"][0]) if item["loc"] else ""
                if key not in wrong:
                    wrong[key] = item
            for key, item in wrong.items():
                message = _describe(model, key, item["type"], values.get(key), item)
                self.add((*where, key) if key else where, message)
        # The rest of the table, each wrong value left at its default, so that
        # checks that need the table (a role, a column) still run; None if a
        # wrong value has no default.
        try:
            return model.model_validate({k: v for k, v in values.items() if k not in wrong})
        except ValidationError:
            return None

    @property
    def messages(self) -> list[str]:
        """The problems in the order of the file (those without a line first),
        at most ``limit`` of them and a line saying how many more there are."""
        ordered = [text for _, _, text in sorted(self._found)]
        if len(ordered) > self.limit:
            more = len(ordered) - self.limit
            ordered = [*ordered[: self.limit], f"... and {more} more problems"]
        return ordered


def read_toml(
    path: str | Path, max_bytes: int = 1024 * 1024, what: str = "settings file"
) -> tuple[str, dict[str, Any]]:
    """The text and the parsed tables of a TOML file; SettingsError (located,
    for a syntax error) if it cannot be read, is too large or is not TOML."""
    path = Path(path)
    try:
        if path.is_file() and path.stat().st_size > max_bytes:
            raise SettingsError(
                [f"{path}: {path.stat().st_size} bytes; a {what} is at most {max_bytes} bytes"]
            )
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise SettingsError([f"{path}: not UTF-8 text"]) from None
    return text, parse_toml(text, str(path), max_bytes, what)


def parse_toml(
    text: str, source: str, max_bytes: int = 1024 * 1024, what: str = "settings file"
) -> dict[str, Any]:
    """Parsed TOML text, or SettingsError at the line and column of the mistake."""
    if len(text) > max_bytes:
        raise SettingsError(
            [f"{source}: {len(text)} characters; a {what} is at most {max_bytes}"]
        )
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise SettingsError(
            [f"{source}: not a {what}: arrays or tables nested too deeply"]
        ) from None
    except tomllib.TOMLDecodeError as exc:
        message, where = str(exc), ""
        if " (at line " in message:
            message, _, tail = message.partition(" (at line ")
            where = ":" + tail.rstrip(")").replace(", column ", ":")
        raise SettingsError([f"{source}{where}: not valid TOML: {message}"]) from None


def _describe(model: type[BaseModel], key: str, kind: str, given: Any, item: Any) -> str:
    """One pydantic error in the words of a settings file."""
    if kind == "missing":
        return "missing: it is required"
    field = model.model_fields.get(key)
    extra = field.json_schema_extra if field is not None else None
    phrase = extra.get("must") if isinstance(extra, dict) else None
    if phrase is None:
        message = str(item["msg"])
        return message[:1].lower() + message[1:]
    return f"must be {phrase}, not {_short(given)}"


def _unknown(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown setting ({hint}known: {', '.join(known)})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# Each part can match only one way (no two quantifiers compete for the same
# characters), so a long line costs linear time, not cubic.
_HEADER = re.compile(r"^\s*\[\[?([^\[\]]+)\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*=""")


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(
        p.strip().strip("\"'") for p in re.findall(r"""("[^"]*"|'[^']*'|[^.]+)""", dotted)
    )


def line_of(text: str, path: tuple[str, ...]) -> int | None:
    """The 1-based line where ``path`` (``("agents", "buyer", "count")``) is
    written: its key line or its table header (or its first subtable's, for
    ``[agents.NAME]`` tables), else its nearest enclosing table's. None when
    nothing of it is found.

    ``tomllib`` gives line numbers for syntax errors only, so a file that parses
    but says something wrong is located from its text. The forms understood are
    ``[a.b]`` headers, ``key = value`` lines and ``key = { inline = table }``."""
    lines = text.splitlines()
    for length in range(len(path), 0, -1):
        wanted = path[:length]
        table: tuple[str, ...] = ()
        for number, line in enumerate(lines, 1):
            header = _HEADER.match(line)
            if header:
                table = _parts(header.group(1).strip())
                if table[: len(wanted)] == wanted:  # the table, or its first subtable
                    return number
                continue
            key = _KEY.match(line)
            if key and (*table, key.group(1).strip("\"'")) == wanted:
                return number
            inline = rf"""[{{,]\s*["']?{re.escape(wanted[-1])}["']?\s*="""
            if (
                len(wanted) >= 2
                and key
                and table == wanted[:-2]
                and key.group(1).strip("\"'") == wanted[-2]
                and re.search(inline, line)
            ):
                return number  # key = { ... }: an inline table holding the last part
    return None
