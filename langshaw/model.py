"""The protocol model: what a Langshaw file means, immutable once built.

Everything an adapter, a server or an LLM prompt needs to know about a protocol
is here, already checked; nothing downstream re-reads the text.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from langshaw._validate import build, check_text
from langshaw.action import Action
from langshaw.diagnostics import Diagnostic, LangshawError
from langshaw.types import AttributeType

__all__ = ["Action", "AttributeType", "LangshawProtocol", "diagnose", "read_source"]


def _freeze(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, eq=False)
class LangshawProtocol:
    """A validated Langshaw protocol.

    ``completion`` is a list of clauses, each a tuple of names: the protocol's goal
    holds when every clause holds, and a clause holds when any of its names has
    occurred (an action) or is bound (an attribute). ``sayso`` maps an attribute
    to the roles that may bind it, highest priority first. ``nono`` groups are
    mutually exclusive; each ``nogo`` pair ``(A, B)`` reads "A -/> B": once A has
    occurred, B may not. ``types`` holds the annotated attributes (typed,
    optional, or both); an attribute missing from it admits any JSON value and
    must be bound.
    """

    name: str
    roles: tuple[str, ...]
    keys: tuple[str, ...]
    completion: tuple[tuple[str, ...], ...]
    actions: Mapping[str, Action]
    sayso: Mapping[str, tuple[str, ...]]
    nono: tuple[tuple[str, ...], ...]
    nogo: tuple[tuple[str, str], ...]
    source: str = "<string>"
    warnings: tuple[Diagnostic, ...] = ()
    root_keys: tuple[str, ...] = field(default=())
    types: Mapping[str, AttributeType] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "actions", _freeze(self.actions))
        object.__setattr__(self, "sayso", _freeze(self.sayso))
        object.__setattr__(self, "types", _freeze(self.types))

    # Construction ---------------------------------------------------------------

    @classmethod
    def parse(
        cls, text: str, source: str = "<string>", *, base: str | Path | None = None
    ) -> LangshawProtocol:
        """Parse and validate ``text``; raise LangshawError listing every error.
        Schema files are found relative to ``base`` (by default the directory of
        ``source`` when it is a file, else the current directory)."""
        return cls(**build(text, source, base))

    @classmethod
    def load(cls, path: str | Path) -> LangshawProtocol:
        """Load a ``.lsh`` file; errors are reported as ``path:line:col: message``."""
        path = Path(path)
        return cls.parse(read_source(path), source=str(path), base=path.parent)

    # Queries --------------------------------------------------------------------

    def action(self, name: str) -> Action:
        """The action called ``name``; KeyError names the known actions otherwise."""
        try:
            return self.actions[name]
        except KeyError:
            known = ", ".join(self.actions)
            raise KeyError(f"{self.name} has no action {name!r} (actions: {known})") from None

    def actions_of(self, role: str) -> tuple[Action, ...]:
        """The actions ``role`` performs, in declaration order."""
        return tuple(a for a in self.actions.values() if a.actor == role)

    @property
    def attributes(self) -> tuple[str, ...]:
        """Every attribute name that some action carries, in first-use order."""
        seen: dict[str, None] = {}
        for action in self.actions.values():
            seen.update(dict.fromkeys(action.attributes))
        return tuple(seen)

    @functools.cached_property
    def optional(self) -> frozenset[str]:
        """The attributes an instance may leave absent (``types`` is frozen, so
        this is worked out once: every bind asks)."""
        return frozenset(name for name, t in self.types.items() if t.optional)

    def type_of(self, attribute: str) -> AttributeType | None:
        """The declared type of ``attribute`` (None: any JSON value, required)."""
        return self.types.get(attribute)

    def __repr__(self) -> str:
        return f"<LangshawProtocol {self.name!r} from {self.source}>"

    def describe(self) -> str:
        """A short human summary: roles, keys, actions with performers, completion."""
        lines = [
            f"{self.name} ({self.source})",
            f"  roles: {', '.join(self.roles)}",
            f"  keys: {', '.join(self.keys)} (root: {', '.join(self.root_keys)})",
            "  actions:",
        ]
        width = max((len(a.actor) for a in self.actions.values()), default=0)
        for action in self.actions.values():
            attrs = ", ".join(
                self.types[a].spelled if a in self.types else a for a in action.attributes
            )
            lines.append(f"    {action.actor:<{width}} : {action.name}({attrs})")
        goal = " and ".join(" or ".join(clause) for clause in self.completion) or "(none)"
        lines.append(f"  complete when: {goal}")
        return "\n".join(lines)


def read_source(path: str | Path, source: str | None = None) -> str:
    """The text of the protocol file ``path``; LangshawError, located in
    ``source`` (by default the path), if it cannot be read or is not UTF-8."""
    path = Path(path)
    source = str(path) if source is None else source

    def fail(line: int, column: int, message: str) -> LangshawError:
        return LangshawError([Diagnostic(source, line, column, message, code="io")])

    if not source:  # Path("") is the current directory
        raise LangshawError([Diagnostic("''", 1, 1, "cannot read: the file name is empty",
                                        code="io")])
    try:
        if path.exists() and not path.is_file() and not path.is_dir():
            # A pipe or a device: reading it could wait or fill memory forever.
            raise fail(1, 1, "cannot read: not a regular file")
        data = path.read_bytes()
    except OSError as exc:
        raise fail(1, 1, f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL in the path
        raise fail(1, 1, f"cannot read: {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        column = len(data[start : exc.start].decode("utf-8", "replace")) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        raise fail(line, column, f"not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def diagnose(
    text: str, source: str, base: str | Path | None = None
) -> tuple[LangshawProtocol | None, list[Diagnostic]]:
    """Every diagnostic for ``text`` (errors and warnings), and the protocol if it is valid."""
    fields, diagnostics = check_text(text, source, base)
    return (LangshawProtocol(**fields) if fields is not None else None), diagnostics
