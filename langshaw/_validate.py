"""Checks that a parsed protocol can be enacted, and builds the model if it can.

Every problem in a file is reported at once, each at the place it occurs and
naming the offending name; a protocol with errors is never built.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lark import Token

from langshaw._parser import RawParameter, RawProtocol, parse_raw
from langshaw.action import Action
from langshaw.diagnostics import (
    Diagnostic,
    LangshawSyntaxError,
    LangshawValidationError,
    shown,
)
from langshaw.types import SIMPLE_TYPES, AttributeType, SchemaFileError, from_file, simple

_KEYWORDS = ("who", "what", "do", "sayso", "nono", "nogo")
# What a protocol's name (free text) may not hold: characters that act on a
# terminal or an editor rather than show (controls, bidi overrides, a BOM).
_UNSHOWABLE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufeff]"
)


class _Report:
    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[Diagnostic] = []

    def error(self, token: Token | None, code: str, message: str) -> None:
        self._add(token, code, message, "error")

    def warning(self, token: Token | None, code: str, message: str) -> None:
        self._add(token, code, message, "warning")

    def _add(self, token: Token | None, code: str, message: str, severity: str) -> None:
        line = token.line if token is not None and token.line else 1
        column = token.column if token is not None and token.column else 1
        self.items.append(Diagnostic(self.source, line, column, message, severity, code))  # type: ignore[arg-type]

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "error"]


def _shifted(token: Token, offset: int) -> Token:
    """A position ``offset`` characters into ``token`` (on its line)."""
    return Token(token.type, token.value, line=token.line,
                 column=(token.column or 1) + offset)


def _suggest(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _listing(names: Iterable[str]) -> str:
    return ", ".join(names) or "none"


def _base(source: str, base: str | Path | None) -> Path:
    """Where schema files are looked for: beside the protocol's file if it is one."""
    if base is not None:
        return Path(base)
    path = Path(source)
    return path.parent if path.is_file() else Path.cwd()


def build(text: str, source: str, base: str | Path | None = None) -> dict[str, Any]:
    """The fields of a valid protocol (for ``LangshawProtocol(**fields)``); raises
    LangshawError listing every error. Schema files are read relative to ``base``
    (by default the directory of ``source`` if it is a file, else the current one)."""
    raw, syntax_errors = parse_raw(text, source)
    if syntax_errors or raw is None:
        raise LangshawSyntaxError(syntax_errors)
    report = _Report(source)
    protocol = _check(raw, report, _base(source, base))
    if report.errors or protocol is None:
        raise LangshawValidationError(report.items)
    return protocol


def check_text(
    text: str, source: str, base: str | Path | None = None
) -> tuple[dict[str, Any] | None, list[Diagnostic]]:
    """Every diagnostic for ``text`` (errors and warnings), and the protocol's
    fields if it is valid."""
    raw, syntax_errors = parse_raw(text, source)
    if syntax_errors or raw is None:
        return None, sorted(syntax_errors)
    report = _Report(source)
    protocol = _check(raw, report, _base(source, base))
    return (None if report.errors else protocol), sorted(report.items)


def _check(raw: RawProtocol, report: _Report, base: Path) -> dict[str, Any] | None:
    assert raw.name is not None
    name = raw.name.value.strip()
    first_word = name.split()[0] if name.split() else ""
    if first_word.rstrip(":") in _KEYWORDS:
        report.error(
            raw.name,
            "name",
            f"the first line must be the protocol's name, but it starts with the clause "
            f"'{first_word.rstrip(':')}'",
        )
    stray = _UNSHOWABLE.search(raw.name.value)
    if stray:
        report.error(
            _shifted(raw.name, stray.start()),
            "name",
            f"the protocol's name holds the character '{shown(stray.group())}', which would "
            "not show as itself",
        )
    for keyword in ("who", "what", "do"):
        if keyword not in raw.clause_keywords:
            report.error(raw.name, "missing-clause", f"the protocol has no '{keyword}' clause")
    if "who" in raw.clause_keywords and not raw.roles:
        report.error(raw.clause_keywords["who"], "empty-clause", "'who' names no role")
    if "do" in raw.clause_keywords and not raw.actions:
        report.error(raw.clause_keywords["do"], "empty-clause", "'do' declares no action")

    _check_keyword_names(raw, report)

    # Roles ---------------------------------------------------------------------
    roles: dict[str, Token] = {}
    for token in raw.roles:
        if token.value in roles:
            report.error(token, "duplicate-role", f"role '{token.value}' is declared twice")
        else:
            roles[token.value] = token

    # Actions ------------------------------------------------------------------
    actions: dict[str, tuple[Token, Token, list[Token], str]] = {}
    for act in raw.actions:
        if act.name.value in actions:
            first = actions[act.name.value][1]
            report.error(
                act.name,
                "duplicate-action",
                f"action '{act.name.value}' is already declared at line {first.line}",
            )
            continue
        actions[act.name.value] = (act.actor, act.name, act.attributes, act.doc)
        if act.actor.value not in roles:
            report.error(
                act.actor,
                "unknown-role",
                f"undeclared role '{act.actor.value}' performs '{act.name.value}'"
                f" (roles: {_listing(roles)}){_suggest(act.actor.value, roles)}",
            )
        seen_attrs: set[str] = set()
        for attr in act.attributes:
            if attr.value in seen_attrs:
                report.error(
                    attr,
                    "duplicate-attribute",
                    f"attribute '{attr.value}' appears twice in '{act.name.value}'",
                )
            seen_attrs.add(attr.value)
            if attr.value == act.name.value:
                report.error(
                    attr, "self-dependency", f"action '{act.name.value}' depends on itself"
                )
        if not act.attributes:
            report.error(act.name, "no-key", f"action '{act.name.value}' has no attributes")

    # Keys ---------------------------------------------------------------------
    keys: dict[str, Token] = {}
    for token in raw.keys:
        if token.value in keys:
            report.error(token, "duplicate-key", f"key '{token.value}' is declared twice")
        elif token.value in actions:
            report.error(token, "key-is-action", f"key '{token.value}' has the name of an action")
        else:
            keys[token.value] = token
    if not keys and "what" in raw.clause_keywords:
        report.error(
            raw.clause_keywords["what"],
            "no-key",
            "the protocol declares no key (mark one in 'what', e.g. 'what id key, Done')",
        )

    all_attributes: dict[str, Token] = {}
    for _actor, act_name, attrs, _doc in actions.values():
        for attr in attrs:
            all_attributes.setdefault(attr.value, attr)
        carried = [a.value for a in attrs if a.value in keys]
        if keys and not carried and attrs:
            report.error(
                act_name,
                "no-key",
                f"action '{act_name.value}' carries none of the protocol's keys ({_listing(keys)})",
            )
    for key, token in keys.items():
        if key not in all_attributes:
            report.error(token, "unused-key", f"key '{key}' is carried by no action")
    root_keys = tuple(
        k for k in keys if all(k in {a.value for a in attrs} for _, _, attrs, _ in actions.values())
    )
    if keys and actions and not root_keys and not report.errors:
        missing = {
            k: [n for n, (_, _, attrs, _) in actions.items() if k not in {a.value for a in attrs}]
            for k in keys
        }
        detail = "; ".join(f"'{k}' is missing from {_listing(v)}" for k, v in missing.items())
        report.error(
            raw.clause_keywords.get("what"),
            "no-root-key",
            f"no key is carried by every action, so enactments cannot be told apart ({detail})",
        )

    # Sayso --------------------------------------------------------------------
    sayso: dict[str, tuple[str, ...]] = {}
    sayso_at: dict[str, Token] = {}
    for chain, attrs in raw.sayso:
        chain_roles: list[str] = []
        for role in chain:
            if role.value not in roles:
                report.error(
                    role,
                    "unknown-role",
                    f"undeclared role '{role.value}' in sayso (roles: {_listing(roles)})"
                    f"{_suggest(role.value, roles)}",
                )
            if role.value in chain_roles:
                report.error(
                    role,
                    "priority-duplicate",
                    f"role '{role.value}' appears twice in the priority chain",
                )
            else:
                chain_roles.append(role.value)
        for attr in attrs:
            if attr.value in sayso_at:
                report.error(
                    attr,
                    "sayso-duplicate",
                    f"attribute '{attr.value}' is already in the sayso clause at line "
                    f"{sayso_at[attr.value].line}",
                )
                continue
            sayso_at[attr.value] = attr
            sayso[attr.value] = tuple(chain_roles)
            if attr.value in actions:
                report.error(
                    attr,
                    "sayso-action",
                    f"'{attr.value}' is an action: its binding records that the action occurred, "
                    "so no role can be given it by sayso",
                )
            elif attr.value in keys:
                report.warning(
                    attr,
                    "sayso-key",
                    f"key '{attr.value}' needs no sayso: the performer of a scope's first action "
                    "binds its keys",
                )
            elif attr.value not in all_attributes:
                report.error(
                    attr,
                    "sayso-unknown-attribute",
                    f"sayso names '{attr.value}', which no action carries"
                    f"{_suggest(attr.value, all_attributes)}",
                )

    for _actor, act_name, attrs, _doc in actions.values():
        for attr in attrs:
            value = attr.value
            if value in keys or value in actions or value in sayso or value == act_name.value:
                continue
            report.error(
                attr,
                "unbindable-attribute",
                f"attribute '{value}' of '{act_name.value}' is neither a key, nor an action, "
                "nor given to any role by sayso: nobody could bind it",
            )

    # nono, nogo, what -----------------------------------------------------------
    nono: list[tuple[str, ...]] = []
    for group in raw.nono:
        names: list[str] = []
        for token in group:
            if token.value not in actions:
                report.error(
                    token,
                    "unknown-action",
                    f"unknown action '{token.value}' in nono{_suggest(token.value, actions)}",
                )
            elif token.value in names:
                report.error(token, "nono-duplicate", f"'{token.value}' appears twice in this nono")
            else:
                names.append(token.value)
        if len(names) >= 2:
            nono.append(tuple(names))
    nogo: list[tuple[str, str]] = []
    for before, after in raw.nogo:
        ok = True
        for token in (before, after):
            if token.value not in actions:
                ok = False
                report.error(
                    token,
                    "unknown-action",
                    f"unknown action '{token.value}' in nogo{_suggest(token.value, actions)}",
                )
        if ok and before.value == after.value:
            report.error(
                before, "nogo-self", f"'{before.value} -/> {after.value}' names one action"
            )
        elif ok:
            nogo.append((before.value, after.value))
    completion: list[tuple[str, ...]] = []
    for goal in raw.goals:
        for token in goal:
            if token.value not in actions and token.value not in all_attributes:
                report.error(
                    token,
                    "unknown-name",
                    f"'{token.value}' in what is neither an action nor an attribute"
                    f"{_suggest(token.value, [*actions, *all_attributes])}",
                )
        completion.append(tuple(t.value for t in goal))

    types = _types(raw, keys, actions, base, report)
    if report.errors:
        return None

    if "what" in raw.clause_keywords and not raw.goals:
        report.warning(
            raw.clause_keywords["what"],
            "no-goal",
            "the protocol declares no completion clause (after its keys in 'what', e.g. "
            "'what id key, Done'), so an enactment is complete once its first action occurs",
        )

    built = {
        name: Action(
            name=name,
            actor=actor.value,
            attributes=tuple(a.value for a in attrs),
            doc=doc,
            keys=tuple(a.value for a in attrs if a.value in keys),
            dependencies=tuple(a.value for a in attrs if a.value in actions),
            line=act_name.line or 0,
        )
        for name, (actor, act_name, attrs, doc) in actions.items()
    }
    _warn_unreachable(built, sayso, keys, actions, completion, raw, report)
    return dict(
        name=name,
        roles=tuple(roles),
        keys=tuple(keys),
        completion=tuple(completion),
        actions=built,
        sayso=sayso,
        nono=tuple(nono),
        nogo=tuple(nogo),
        source=report.source,
        warnings=tuple(sorted(d for d in report.items if d.severity == "warning")),
        root_keys=root_keys,
        types=types,
    )


def _check_keyword_names(raw: RawProtocol, report: _Report) -> None:
    """A clause keyword as a name parses where a name is expected, but a line
    that starts with it begins a clause: a role named 'do' could never perform
    an action, an action named 'nono' could not start a nono line."""
    declared = [
        *((t, "a role") for t in raw.roles),
        *((a.name, "an action") for a in raw.actions),
        *((t, "a key") for t in raw.keys),
        *((p.name, "an attribute") for a in raw.actions for p in a.parameters),
    ]
    seen: set[str] = set()
    for token, kind in declared:
        if token.value in _KEYWORDS and token.value not in seen:
            seen.add(token.value)
            report.error(
                token,
                "keyword-name",
                f"'{token.value}' is a clause keyword, so it cannot name {kind}: a line "
                "that starts with it begins a clause; rename it",
            )


def _annotation(parameter: RawParameter) -> tuple[bool, str | None]:
    kind = parameter.type
    if kind is None:
        return parameter.optional is not None, None
    text = kind.value[1:-1] if kind.type == "SCHEMA_FILE" else kind.value
    return parameter.optional is not None, text


def _types(
    raw: RawProtocol,
    keys: dict[str, Token],
    actions: dict[str, tuple[Token, Token, list[Token], str]],
    base: Path,
    report: _Report,
) -> dict[str, AttributeType]:
    """The declared types: an attribute is annotated once, or alike everywhere."""
    first: dict[str, tuple[RawParameter, str]] = {}
    for act in raw.actions:
        for parameter in act.parameters:
            if parameter.optional is None and parameter.type is None:
                continue
            attribute = parameter.name.value
            if attribute not in first:
                first[attribute] = (parameter, act.name.value)
                continue
            earlier, where = first[attribute]
            if _annotation(earlier) != _annotation(parameter):
                report.error(
                    parameter.type or parameter.optional or parameter.name,
                    "type-conflict",
                    f"'{_spelled(parameter)}' in '{act.name.value}' differs from "
                    f"'{_spelled(earlier)}' in '{where}' (line {earlier.name.line}): an "
                    "attribute has one type; annotate it once, or alike everywhere",
                )
    types: dict[str, AttributeType] = {}
    for attribute, (parameter, _where) in first.items():
        optional, kind = _annotation(parameter)
        token = parameter.type or parameter.optional or parameter.name
        if attribute in actions:
            report.error(
                token,
                "typed-dependency",
                f"'{attribute}' is an action: as an attribute it records that the action "
                "occurred (always true), so it takes no type and cannot be optional",
            )
            continue
        if attribute in keys:
            if optional:
                report.error(
                    parameter.optional,
                    "optional-key",
                    f"key '{attribute}' cannot be optional: every instance is placed by its keys",
                )
                continue
            if kind is not None and kind not in ("string", "integer"):
                report.error(
                    token,
                    "key-type",
                    f"key '{attribute}' can only be typed string or integer, not {kind}",
                )
                continue
        if parameter.type is not None and parameter.type.type == "SCHEMA_FILE":
            assert kind is not None
            problem = _schema_path_problem(kind, base)
            if problem:
                report.error(parameter.type, "schema-file", f"'{attribute}': {problem}")
                continue
            try:
                types[attribute] = from_file(attribute, kind, optional, base)
            except SchemaFileError as exc:
                report.error(parameter.type, exc.code, f"'{attribute}': {exc}")
            continue
        if kind is not None and kind not in SIMPLE_TYPES:
            report.error(
                token,
                "unknown-type",
                f"unknown type '{kind}' for '{attribute}' (types: {', '.join(SIMPLE_TYPES)}, "
                f"or a JSON Schema file in double quotes){_suggest(kind, SIMPLE_TYPES)}",
            )
            continue
        types[attribute] = simple(attribute, kind, optional)
    return types


def _schema_path_problem(reference: str, base: Path) -> str | None:
    """Why ``reference`` cannot name a schema file before it is opened: a
    character no file name holds, or a pipe or device (reading one could wait,
    or fill memory, forever)."""
    target = reference.partition("#")[0]
    stray = _UNSHOWABLE.search(target)
    if stray:
        return f"the schema file's name holds the character '{shown(stray.group())}'"
    path = base / target
    if target and path.exists() and not path.is_file() and not path.is_dir():
        return f"cannot read schema file {path}: not a regular file"
    return None


def _spelled(parameter: RawParameter) -> str:
    text = str(parameter.name.value) + ("?" if parameter.optional is not None else "")
    if parameter.type is not None:
        text += f": {parameter.type.value}"
    return text


def _warn_unreachable(
    actions: dict[str, Action],
    sayso: dict[str, tuple[str, ...]],
    keys: dict[str, Token],
    tokens: dict[str, tuple[Token, Token, list[Token], str]],
    completion: list[tuple[str, ...]],
    raw: RawProtocol,
    report: _Report,
) -> None:
    """Warn about actions the simple binding rules can never enable.

    An action is reachable when each attribute is a key, a dependency on a
    reachable action in a related scope, given to its performer by sayso, or bound
    by another reachable action in the same or an enclosing scope (fewer keys).
    """
    reachable: set[str] = set()
    bound: dict[str, list[str]] = {}  # attribute -> the reachable actions carrying it

    def blocker(action: Action) -> tuple[str, str] | None:
        """What ``action`` waits for (a name) and why it cannot be enabled yet, or None."""
        mine = set(action.keys)
        for attr in action.attributes:
            if attr in keys:
                continue
            if attr in actions:
                dep = actions[attr]
                theirs = set(dep.keys)
                if attr not in reachable:
                    return attr, f"it depends on '{attr}', which can never occur"
                if not (theirs <= mine or mine <= theirs):
                    return attr, (
                        f"it depends on '{attr}', whose keys ({', '.join(dep.keys)}) are neither "
                        f"a subset nor a superset of its own ({', '.join(action.keys)})"
                    )
                continue
            if action.actor in sayso.get(attr, ()):
                continue
            if any(
                set(actions[other].keys) <= mine
                for other in bound.get(attr, ())
                if other != action.name
            ):
                continue
            owners = " > ".join(sayso.get(attr, ())) or "nobody"
            return attr, (
                f"'{attr}' can only be bound by {owners} (sayso), and no action that could occur "
                f"before it in the same or an enclosing scope binds it"
            )
        return None

    # A worklist: an action blocked on a name is looked at again only when an
    # action that is, or carries, that name becomes reachable (passes over every
    # action until none changes are quadratic on a chain written upwards).
    waiting: dict[str, list[str]] = {}
    pending = list(reversed(actions))
    while pending:
        name = pending.pop()
        found = blocker(actions[name])
        if found is not None:
            waiting.setdefault(found[0], []).append(name)
            continue
        reachable.add(name)
        woken = waiting.pop(name, [])
        for attr in actions[name].attributes:
            if attr not in keys:
                bound.setdefault(attr, []).append(name)
                woken += waiting.pop(attr, [])
        pending.extend(reversed(woken))
    for action in actions.values():
        if action.name not in reachable:
            reason = (blocker(action) or ("", ""))[1]
            report.warning(
                tokens[action.name][1],
                "never-enabled",
                f"action '{action.name}' can never be enabled: {reason}",
            )
    attributes = {a for act in actions.values() for a in act.attributes}
    for clause, goal in zip(completion, raw.goals, strict=True):
        if all(n in actions and n not in reachable for n in clause) and not (
            set(clause) & (attributes - set(actions))
        ):
            report.warning(
                goal[0],
                "unreachable-goal",
                f"completion clause '{' or '.join(clause)}' can never hold: none of its actions "
                "can occur",
            )
