"""Located problems in protocol files, and the exception that carries them.

Every problem has a place (``path:line:col``) and names the offending thing, so an
editor can jump to it and a person can fix it without reading the grammar.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


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
        return f"{self.source}:{self.line}:{self.column}: {prefix}{self.message}"


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
