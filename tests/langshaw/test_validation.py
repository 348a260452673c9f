"""Each validation error, from one bad protocol file each.

A fixture states what it expects in header comments, ``# expect: LINE:COL message``
for errors and ``# warn: LINE:COL message`` for warnings; the test asserts that
exactly those are reported, so every error in a file must be found and nothing
else may be.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from langshaw import LangshawError, LangshawProtocol
from langshaw.model import diagnose
from tests.conftest import FIXTURES

BAD = sorted((FIXTURES / "lsh" / "bad").glob("*.lsh"))
WARN = sorted((FIXTURES / "lsh" / "warn").glob("*.lsh"))
_HEADER = re.compile(r"^# (expect|warn): (\d+):(\d+) (.*)$")


def _expectations(path: Path, kind: str) -> list[str]:
    found = []
    for line in path.read_text().splitlines():
        match = _HEADER.match(line)
        if match and match.group(1) == kind:
            found.append(f"{path}:{match.group(2)}:{match.group(3)}: {match.group(4)}")
    return found


def test_there_is_a_fixture_for_each_error() -> None:
    assert len(BAD) >= 20


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_protocol_reports_exactly_its_errors(path: Path) -> None:
    expected = _expectations(path, "expect")
    assert expected, f"{path.name} declares no expectation"
    with pytest.raises(LangshawError) as caught:
        LangshawProtocol.load(path)
    assert [str(d) for d in caught.value.errors] == expected


@pytest.mark.parametrize("path", WARN, ids=lambda p: p.stem)
def test_warnings_are_reported_but_not_fatal(path: Path) -> None:
    protocol = LangshawProtocol.load(path)
    expected = [e.replace(": ", ": warning: ", 1) for e in _expectations(path, "warn")]
    assert expected
    assert [str(w) for w in protocol.warnings] == expected


def test_syntax_errors_name_what_was_expected_in_words() -> None:
    _, diagnostics = diagnose("P\nwho A\nwhat id key, Go\ndo\n  A : Go(id))\n", "x.lsh")
    assert [str(d) for d in diagnostics] == [
        "x.lsh:5:13: expected the end of the line but found ')'"
    ]
    for d in diagnostics:
        assert "_NL" not in d.message and "RPAR" not in d.message


def test_empty_file() -> None:
    _, diagnostics = diagnose("", "empty.lsh")
    assert [str(d) for d in diagnostics] == [
        "empty.lsh:1:1: expected the protocol name but found the end of the file"
    ]


def test_empty_clauses_are_errors() -> None:
    _, diagnostics = diagnose("P\nwho\nwhat id key\ndo\n", "e.lsh")
    assert [str(d) for d in diagnostics] == [
        "e.lsh:2:1: 'who' names no role",
        "e.lsh:3:6: key 'id' is carried by no action",
        "e.lsh:4:1: 'do' declares no action",
    ]


def test_key_in_sayso_is_a_warning() -> None:
    protocol = LangshawProtocol.parse(
        "P\nwho A\nwhat id key, Go\ndo\n  A : Go(id, x)\nsayso\n  A : x, id\n", "k.lsh"
    )
    assert [str(w) for w in protocol.warnings] == [
        "k.lsh:7:10: warning: key 'id' needs no sayso: the performer of a scope's first "
        "action binds its keys"
    ]
