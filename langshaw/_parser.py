"""From Langshaw text to a raw syntax tree that still knows where everything is.

Parsing stops at nothing: after a syntax error the offending statement is blanked
out (positions are kept, so later messages still point at the right place) and
the text is parsed again, so one run reports every syntax error in a file.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from langshaw.diagnostics import Diagnostic, shown

CLAUSE_KEYWORDS = frozenset({"WHO", "WHAT", "DO", "SAYSO", "NONO", "NOGO"})
# A line ending with one of these goes on on the next line.
_JOIN_AFTER = frozenset({"_COMMA", "_LPAR", "_GT", "_COLON", "_NOGO_ARROW", "OR"}) | CLAUSE_KEYWORDS

# How the parser's expectations read in a message.
_WORDS = {
    "NAME": "a name",
    "PROTOCOL_NAME": "the protocol name",
    "_NL": "the end of the line",
    "$END": "the end of the file",
    "_COLON": "':'",
    "_COMMA": "','",
    "_LPAR": "'('",
    "RPAR": "')'",
    "_GT": "'>'",
    "_NOGO_ARROW": "'-/>'",
    "OPTIONAL": "'?'",
    "SCHEMA_FILE": "a schema file in double quotes",
}
_MAX_ERRORS = 50
_LONE_CR = re.compile(r"\r(?!\n)")
# `do: Role : Action(...)` where the role is named like a clause keyword.
_KEYWORD_ACTOR = re.compile(r"\s*(who|what|do|sayso|nono|nogo)\s*:\s*[A-Za-z_]\w*\s*\(")


def _describe(terminal: str) -> str:
    if terminal in _WORDS:
        return _WORDS[terminal]
    return f"'{terminal.lower()}'"  # keywords: WHO -> 'who'


def _describe_found(token: Token) -> str:
    if token.type in ("_NL", "$END"):
        return _WORDS[token.type]
    return f"'{shown(token.value)}'"


def _expected_list(expected: set[str] | frozenset[str]) -> str:
    words = sorted({_describe(t) for t in expected if t != "COMMENT"})
    if not words:
        return "something else"
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


class _Continuations:
    """Post-lexer: drops the line breaks inside a statement and tracks statements.

    The grammar is line-oriented; this decides which line breaks end a statement.
    It also remembers where the current statement started, so that after a syntax
    error the parser can blank out just that statement and go on.
    """

    always_accept = ("_NL",)

    def __init__(self) -> None:
        self.statement_start = 0
        self.open_paren: Token | None = None

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        # No look-ahead here: the contextual lexer lexes each token in the parser
        # state left by the previous one, so a token may not be held back.
        self.statement_start = 0
        self.open_paren = None
        depth = 0
        previous: str | None = None  # type of the last token passed on
        last: Token | None = None
        for token in stream:
            if token.type == "_NL":
                if depth == 0 and previous not in _JOIN_AFTER and previous not in (None, "_NL"):
                    previous = "_NL"
                    yield token
                continue
            if previous in (None, "_NL"):
                self.statement_start = token.start_pos or 0
            if token.type in CLAUSE_KEYWORDS or (
                token.type == "_COLON" and previous in CLAUSE_KEYWORDS
            ):
                # Recovery keeps the clause keyword: the statement starts after it.
                self.statement_start = token.end_pos or 0
            if token.type == "_LPAR":
                depth += 1
                if depth == 1:
                    self.open_paren = token
            elif token.type == "RPAR" and depth > 0:
                depth -= 1
                if depth == 0:
                    self.open_paren = None
            previous = token.type
            last = token
            yield token
        if last is not None and previous != "_NL" and previous not in _JOIN_AFTER:
            # The last line needs no line break: make one where it ends.
            yield Token(
                "_NL",
                "\n",
                start_pos=last.end_pos,
                line=last.end_line,
                column=last.end_column,
                end_line=last.end_line,
                end_column=last.end_column,
                end_pos=last.end_pos,
            )


@cache
def _grammar() -> str:
    return resources.files("langshaw").joinpath("langshaw.lark").read_text(encoding="utf-8")


class _Parser:
    """A Lark LALR parser with our post-lexer; one parse at a time (it has state)."""

    def __init__(self) -> None:
        self.postlexer = _Continuations()
        self.comments: list[Token] = []
        self.lark = Lark(
            _grammar(),
            parser="lalr",
            lexer="contextual",
            postlex=self.postlexer,
            propagate_positions=True,
            maybe_placeholders=False,
            lexer_callbacks={"COMMENT": self.comments.append},
        )
        self.lock = threading.Lock()


@cache
def _parser() -> _Parser:
    return _Parser()


@dataclass
class RawParameter:
    """One attribute in an action's list, with its annotations as written."""

    name: Token
    optional: Token | None = None  # the '?'
    type: Token | None = None  # a type name, or a quoted schema file


@dataclass
class RawAction:
    actor: Token
    name: Token
    attributes: list[Token]
    first_line: int
    last_line: int
    doc: str = ""
    parameters: list[RawParameter] = field(default_factory=list)


@dataclass
class RawProtocol:
    """What the text says, with positions, before any checking."""

    name: Token | None = None
    roles: list[Token] = field(default_factory=list)
    keys: list[Token] = field(default_factory=list)
    goals: list[list[Token]] = field(default_factory=list)
    actions: list[RawAction] = field(default_factory=list)
    sayso: list[tuple[list[Token], list[Token]]] = field(default_factory=list)
    nono: list[list[Token]] = field(default_factory=list)
    nogo: list[tuple[Token, Token]] = field(default_factory=list)
    clause_keywords: dict[str, Token] = field(default_factory=dict)


def _blank(text: str, start: int, end: int) -> str:
    """Replace text[start:end] by spaces, keeping line breaks (and so positions)."""
    middle = "".join(c if c in "\r\n" else " " for c in text[start:end])
    return text[:start] + middle + text[end:]


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


def _syntax_diagnostic(
    source: str, error: UnexpectedInput, open_paren: Token | None, text: str = ""
) -> Diagnostic:
    hint = ""
    if open_paren is not None:
        hint = f" (the '(' at line {open_paren.line}, column {open_paren.column} is not closed)"
    lines = text.split("\n")
    line_no = getattr(error, "line", None)
    if isinstance(line_no, int) and 1 <= line_no <= len(lines):
        actor = _KEYWORD_ACTOR.match(lines[line_no - 1])
        if actor:
            hint = (f" ('{actor.group(1)}' at the start of a line begins a clause, so it "
                    "cannot name a role that performs an action: rename the role)")
    if isinstance(error, UnexpectedCharacters):
        found = f"'{shown(error.char)}'" if error.char not in "\r\n" else "a line break"
        allowed = set(error.allowed or set())
        if open_paren is not None:
            allowed.discard("_NL")  # line breaks are dropped inside parentheses
        message = f"unexpected character {found}; expected {_expected_list(allowed)}"
        return Diagnostic(source, error.line, error.column, message + hint)
    if isinstance(error, UnexpectedToken):
        token = error.token
        expected = set(error.expected)
        if getattr(error, "interactive_parser", None) is not None:
            expected = set(error.interactive_parser.accepts())  # type: ignore[no-untyped-call]  # exact
        if open_paren is not None:
            expected.discard("_NL")  # line breaks are dropped inside parentheses
        line = token.line if token.line is not None else error.line
        column = token.column if token.column is not None else error.column
        if token.type == "PROTOCOL_NAME":
            # Nothing else matched, so the catch-all name-line terminal did.
            stray = re.search(r"[^A-Za-z0-9_\s:,()>/#-]", token.value)
            if stray:
                column = (column or 1) + stray.start()
                message = f"unexpected character '{shown(stray.group())}'"
            else:
                found = token.value.split()[0]
                message = f"expected {_expected_list(expected)} but found '{shown(found)}'"
        else:
            message = f"expected {_expected_list(expected)} but found {_describe_found(token)}"
        return Diagnostic(source, line or 1, column or 1, message + hint)
    assert isinstance(error, UnexpectedEOF)
    return Diagnostic(source, error.line, error.column, "unexpected end of file" + hint)


def parse_raw(text: str, source: str) -> tuple[RawProtocol | None, list[Diagnostic]]:
    """Parse ``text``; return the raw protocol (None if nothing parsed) and syntax errors."""
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte order mark: editors show none, so columns skip it
    text = _LONE_CR.sub("\n", text)  # old Mac line ends: one for one, so positions hold
    parser = _parser()
    errors: list[Diagnostic] = []
    seen: set[tuple[int, int]] = set()
    with parser.lock:
        for _ in range(_MAX_ERRORS):
            parser.comments.clear()
            try:
                tree = parser.lark.parse(text)
            except UnexpectedInput as error:
                diagnostic = _syntax_diagnostic(source, error, parser.postlexer.open_paren, text)
                where = (diagnostic.line, diagnostic.column)
                if where in seen:
                    break
                seen.add(where)
                errors.append(diagnostic)
                recovered = _recover(text, error, parser.postlexer.statement_start)
                if recovered is None or not recovered.strip():
                    break  # nothing left to parse: more errors would only be echoes
                text = recovered
                continue
            raw = _build(tree, list(parser.comments), text)
            return raw, errors
    return None, errors


def _recover(text: str, error: UnexpectedInput, statement_start: int) -> str | None:
    """Blank out the statement holding the error, so that parsing can go on."""
    if isinstance(error, UnexpectedEOF):
        return None
    if isinstance(error, UnexpectedToken):
        token = error.token
        if token.type == "$END":
            # A statement that never ended: drop it, if anything is left to drop.
            end = len(text)
        elif token.type in CLAUSE_KEYWORDS:
            # The statement before a clause keyword was cut short: keep the keyword.
            end = token.start_pos or 0
        elif token.type == "_NL":
            end = token.start_pos if token.start_pos is not None else len(text)
        else:
            end = _line_end(text, token.start_pos or 0)
    else:
        end = _line_end(text, error.pos_in_stream or 0)
    start = min(statement_start, end)
    if start == end or not text[start:end].strip():
        # Nothing left to blank in this statement: take the whole line instead.
        pos = error.pos_in_stream if isinstance(error, UnexpectedCharacters) else None
        if pos is None:
            return None
        start = text.rfind("\n", 0, pos) + 1
        end = _line_end(text, pos)
        if not text[start:end].strip():
            return None
    return _blank(text, start, end)


def _tokens(tree: Tree[Token]) -> list[Token]:
    return [child for child in tree.children if isinstance(child, Token)]


def _build(tree: Tree[Token], comments: list[Token], text: str) -> RawProtocol:
    raw = RawProtocol()
    for child in tree.children:
        if not isinstance(child, Tree):
            continue
        kind = child.data
        if kind == "protocol_name":
            raw.name = _tokens(child)[0]
            continue
        keyword = child.children[0]
        assert isinstance(keyword, Token)
        raw.clause_keywords.setdefault(kind, keyword)
        for item in child.children[1:]:
            assert isinstance(item, Tree)
            names = [t for t in _tokens(item) if t.type == "NAME"]
            if kind == "who":
                raw.roles.extend(names)
            elif kind == "what":
                for what_item in item.children:
                    assert isinstance(what_item, Tree)
                    item_names = [t for t in _tokens(what_item) if t.type == "NAME"]
                    if what_item.data == "key_decl":
                        raw.keys.append(item_names[0])
                    else:
                        raw.goals.append(item_names)
            elif kind == "do":
                parameters = [_parameter(p) for p in item.children if isinstance(p, Tree)]
                raw.actions.append(
                    RawAction(
                        actor=names[0],
                        name=names[1],
                        attributes=[p.name for p in parameters],
                        first_line=item.meta.line,
                        last_line=_tokens(item)[-1].line or item.meta.line,  # the ')'
                        parameters=parameters,
                    )
                )
            elif kind == "sayso":
                chain = item.children[0]
                assert isinstance(chain, Tree)
                raw.sayso.append((_tokens(chain), names))
            elif kind == "nono":
                raw.nono.append(names)
            elif kind == "nogo":
                raw.nogo.append((names[0], names[1]))
    _attach_docs(raw, comments, text)
    return raw


def _parameter(tree: Tree[Token]) -> RawParameter:
    tokens = _tokens(tree)
    optional = next((t for t in tokens if t.type == "OPTIONAL"), None)
    kind = None
    for child in tree.children:
        if isinstance(child, Tree):  # type_ref
            kind = _tokens(child)[0]
    return RawParameter(tokens[0], optional, kind)


def _attach_docs(raw: RawProtocol, comments: list[Token], text: str) -> None:
    """A comment line right above an action, or at the end of its lines, documents it."""
    lines = text.split("\n")  # as Lark counts lines (splitlines also breaks at \f, \x85...)
    by_line: dict[int, Token] = {c.line: c for c in comments if c.line is not None}

    def comment_only(line_no: int) -> bool:
        return 1 <= line_no <= len(lines) and lines[line_no - 1].lstrip().startswith("#")

    for action in raw.actions:
        above: list[str] = []
        line_no = action.first_line - 1
        while line_no in by_line and comment_only(line_no):
            above.append(_comment_text(by_line[line_no]))
            line_no -= 1
        trailing = [
            _comment_text(by_line[n])
            for n in range(action.first_line, action.last_line + 1)
            if n in by_line and not comment_only(n)
        ]
        parts = [p for p in [*reversed(above), *trailing] if p]
        action.doc = "\n".join(parts)


def _comment_text(token: Token) -> str:
    """A comment as an action's doc, which LLM agents are shown as the action's
    description: what would not show as itself (an ESC, a bidi override, a
    zero-width character) is written as its escape, so that what a reader of
    the file sees is what the model reads."""
    return shown(str(token.value).lstrip("#").strip().replace("\t", " "), None)
