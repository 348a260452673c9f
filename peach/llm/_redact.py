"""Keeping the principal's secrets from the model and from the logs.

Only the principal's secrets are secrets: values the agent's own code supplies
(a hook's payment token, a value a fallback or a coded action binds in an
attribute named in ``secrets=``). What the model writes is not, refused or not:
it knows it already, and hiding it would hide ordinary text from it (a model
writing an action's name into ``payment_data`` made that tool's name
``[secret]``). Nor is what a counterpart binds: hiding it everywhere would let
another agent choose what our model cannot read. Both are still shown as
``[secret]`` where they are the value of a secret attribute.

A secret is scrubbed in the forms a server or an SDK may echo it in: as is,
URL-encoded, JSON- or repr-escaped, base64 (standard and URL-safe, padded or
not, alone or inside a longer base64 text), and glued inside a longer token.
Ordinary words (letters only, in ordinary case: ``token``, ``card``, ``Visa``)
are never scrubbed as text, even inside a secret: they would hide half of what
the model reads (``?token=`` became ``?[secret]=``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from langshaw import json_equal

SECRET = "[secret]"

# Loggers of the model SDKs and their HTTP stacks (the SDKs' own httpx2 and
# httpcore2 in recent releases): at DEBUG they write requests and responses.
SDK_LOGGERS = ("anthropic", "openai", "httpx", "httpx2", "httpcore", "httpcore2")

_ORDINARY = re.compile(r"[^\W\d_]+(?:[\s'-]+[^\W\d_]+)*")
_WORD = re.compile(r"[^\W\d_]+")


def ordinary(text: str) -> bool:
    """Words of letters only, each lower-case, upper-case or capitalized ('token',
    'Visa', 'John Doe'): never scrubbed as text. A letters-only secret in mixed
    case ('xKqPzLmN') is no ordinary word."""
    return bool(_ORDINARY.fullmatch(text)) and all(
        w.islower() or w.isupper() or w.istitle() for w in _WORD.findall(text)
    )


class Redactor:
    """Replaces the principal's secrets in anything shown to the model or logged.

    ``attributes`` are the secret attributes: their values are always shown as
    ``[secret]`` where they are bound. :meth:`add_value` makes a value a secret
    everywhere: the whole value wherever it appears as a value, and the strings
    inside it (a card token, the last digits) wherever they turn up in text, in
    every encoded form. :meth:`bound` and :meth:`written` tell the principal's
    values of secret attributes from the model's and the counterparts'.
    """

    MIN_SCRUBBED = 4  # shorter pieces ('US', '1') would hide half of everything
    MIN_GLUED = 8  # from this length a piece is scrubbed inside longer tokens too

    def __init__(self, attributes: Iterable[str] = ()) -> None:
        self.attributes = set(attributes)
        self.values: list[Any] = []
        self.strings: set[str] = set()  # the pieces, as is
        self._forms: set[str] = set()  # the pieces in every form they are scrubbed in
        self._foreign: list[Any] = []  # values of secret attributes not the principal's
        self._pattern: re.Pattern[str] | None = None

    # What is secret -----------------------------------------------------------------

    def add_value(self, value: Any) -> None:
        """Make ``value`` a secret: the agent's own code supplied it."""
        if value is None or isinstance(value, bool) or value in ("", 0):
            return  # too common to hide without hiding everything
        if not any(json_equal(value, known) for known in self.values):
            self.values.append(value)
        for leaf in _leaves(value):
            if isinstance(leaf, bool) or not isinstance(leaf, str | int | float):
                continue
            text = str(leaf).strip()
            if len(text) < self.MIN_SCRUBBED or ordinary(text) or text in self.strings:
                continue
            self.strings.add(text)
            self._forms |= {f for f in forms(text) if len(f) >= self.MIN_SCRUBBED}
            self._pattern = None

    def written(self, arguments: Mapping[str, Any]) -> None:
        """The model wrote these arguments: its values of secret attributes are
        not the principal's, and do not become secrets when later bound."""
        for attribute, value in arguments.items():
            if attribute in self.attributes:
                self._foreign_add(value)

    def bound(self, bindings: Mapping[str, Any], *, own: bool) -> None:
        """An action was bound (by the agent when ``own``, else by a counterpart):
        a value of a secret attribute is a secret if the agent's own code bound
        it first, not the model (:meth:`written`) nor a counterpart."""
        for attribute, value in bindings.items():
            if attribute not in self.attributes or self.is_secret(value):
                continue
            if not own:
                self._foreign_add(value)
            elif not any(json_equal(value, seen) for seen in self._foreign):
                self.add_value(value)

    def _foreign_add(self, value: Any) -> None:
        # Kept once each: a long run writes the same values again and again.
        if not any(json_equal(value, seen) for seen in self._foreign):
            self._foreign.append(value)

    def is_secret(self, value: Any) -> bool:
        return any(json_equal(value, known) for known in self.values)

    # Hiding ------------------------------------------------------------------------------

    def value(self, attribute: str, value: Any) -> Any:
        """``value`` as shown when bound to ``attribute``."""
        return SECRET if attribute in self.attributes else self.scrub(value)

    def bindings(self, bindings: Mapping[str, Any]) -> dict[str, Any]:
        return {k: self.value(k, v) for k, v in bindings.items()}

    def scrub(self, value: Any) -> Any:
        """``value`` with every secret in it replaced (structure kept)."""
        if self.values and self.is_secret(value):
            return SECRET
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self.scrub(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub(v) for v in value]
        if isinstance(value, int | float) and not isinstance(value, bool):
            return SECRET if str(value) in self.strings else value
        return value

    def scrubbing_logs(self) -> contextlib.AbstractContextManager[None]:
        """While the block runs, the model SDKs' loggers are scrubbed of these
        secrets (:func:`scrubbing_logs`)."""
        return scrubbing_logs(self)

    def text(self, text: str) -> str:
        if not self._forms:
            return text
        if self._pattern is None:
            self._pattern = _pattern(self._forms, self.MIN_GLUED)
        return self._pattern.sub(SECRET, text)


def _pattern(pieces: set[str], glued: int) -> re.Pattern[str]:
    """Long pieces anywhere, even glued inside a longer token; short ones as
    whole words only: the secret '1234' hides '1234', not part of '912345'."""

    def alternatives(group: Iterable[str]) -> str:
        return "|".join(re.escape(p) for p in sorted(group, key=len, reverse=True))

    long = [p for p in pieces if len(p) >= glued]
    short = [p for p in pieces if len(p) < glued]
    parts = []
    if long:
        parts.append(f"(?:{alternatives(long)})")
    if short:
        parts.append(rf"(?<![A-Za-z0-9])(?:{alternatives(short)})(?![A-Za-z0-9])")
    return re.compile("|".join(parts))


def forms(text: str) -> set[str]:
    """``text`` and the forms it may be echoed in: URL-encoded (either case of
    hex), JSON-escaped (once, twice, with ``\\/``), repr-escaped, and base64."""
    found = {text, repr(text)[1:-1]}
    for quoted in (
        urllib.parse.quote(text, safe=""),
        urllib.parse.quote(text),
        urllib.parse.quote_plus(text),
    ):
        found |= {quoted, re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quoted)}
    for ascii_only in (True, False):
        escaped = json.dumps(text, ensure_ascii=ascii_only)[1:-1]
        found |= {escaped, escaped.replace("/", "\\/"), json.dumps(escaped)[1:-1]}
    return found | _base64_forms(text.encode())


def _base64_forms(data: bytes) -> set[str]:
    """The base64 of ``data`` alone (padded and not), and the part of its base64
    that does not depend on what surrounds it inside a longer text, at each of
    the three alignments; in the standard and the URL-safe alphabets."""
    found = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode().rstrip("=")
        start = (0, 2, 3)[shift]  # characters that hold bits of what comes before
        end = len(encoded) - (1 if (shift + len(data)) % 3 else 0)  # ... of what follows
        core = encoded[start:end]
        if shift == 0:
            found |= {encoded, base64.b64encode(data).decode()}
        found.add(core)
    return found | {f.translate(_URLSAFE) for f in found}


_URLSAFE = str.maketrans("+/", "-_")


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


class LogScrubber(logging.Filter):
    """Replaces a redactor's secrets in the records of a logger (the model
    SDKs', the MCP SDK's)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.redactor.strings:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted: the handler says so
            return True
        scrubbed = self.redactor.text(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.text(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.text(record.stack_info)
        return True


@contextlib.contextmanager
def scrubbing_logs(redactor: Redactor, prefixes: Iterable[str] = SDK_LOGGERS) -> Iterator[None]:
    """Scrub the records of the loggers named ``prefixes`` and of those below them
    that exist (a filter sees only its own logger's records; one made during the
    block, by a module imported then, is covered from the next block on) while
    the block runs. The filter is this redactor's own, removed after: an agent's
    secrets neither outlive its calls nor stay on a logger another agent uses."""
    names = tuple(prefixes)
    loggers = [logging.getLogger(name) for name in names]
    loggers += [
        logger
        for name, logger in list(logging.root.manager.loggerDict.items())
        if isinstance(logger, logging.Logger)
        and name not in names
        and name.startswith(tuple(f"{n}." for n in names))
    ]
    scrub = LogScrubber(redactor)
    for logger in loggers:
        logger.addFilter(scrub)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(scrub)


__all__ = ["SDK_LOGGERS", "SECRET", "Redactor", "forms", "ordinary", "scrubbing_logs"]
