"""Located problems in protocol files, and the exception that carries them.

Every problem has a place (``path:line:col``) and names the offending thing, so an
editor can jump to it and a person can fix it without reading the grammar.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


def shown(text: str, limit: int | None = 40) -> str:
    """``text`` as a message quotes it: on one line, every character a terminal
    or an editor would not show as itself (NUL, ESC, a line break, a bidi
    override, a BOM) written as a Python escape, and cut after ``limit``
    characters (None: not cut)."""
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem found in a protocol file."""

    source: str
    line: int
    column: int
    message: str
    severity: Severity = "error"
    code: str = "syntax"

    def __str__(self) -> str:
        prefix = "" if self.severity == "error" else "warning: "
        # One line, shown as it is: a file's name may hold a line break or an ESC.
        where = shown(self.source, None)
        return f"{where}:{self.line}:{self.column}: {prefix}{shown(self.message, None)}"


class LangshawError(Exception):
    """A protocol file that cannot be used: it holds every error found in it."""

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics: tuple[Diagnostic, ...] = tuple(sorted(diagnostics))
        self.errors = tuple(d for d in self.diagnostics if d.severity == "error")
        super().__init__("\n".join(str(d) for d in self.errors))


class LangshawSyntaxError(LangshawError):
    """The text does not follow the Langshaw grammar."""


class LangshawValidationError(LangshawError):
    """The text parses but describes a protocol that cannot be enacted as written."""
