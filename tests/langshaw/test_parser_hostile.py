"""Hostile input to the parser and loader: mutated shipped protocols, bytes an
editor or an attacker may leave in a file, files that are not files, names
that are keywords, and sizes that must stay linear. Every failure must be a
LangshawError with located one-line messages, never another exception."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from langshaw import LangshawError, LangshawProtocol
from langshaw.model import diagnose
from tests.conftest import PROTOCOLS

MINIMAL = "Tiny\nwho A\nwhat id key, Go\ndo\n  A : Go(id)\n"


def errors_of(text: str, source: str = "x.lsh") -> list[str]:
    """The errors ``text`` gets, as printed; fails on any exception but LangshawError."""
    with pytest.raises(LangshawError) as caught:
        LangshawProtocol.parse(text, source)
    return [str(d) for d in caught.value.errors]


def assert_well_reported(text: str, label: str) -> None:
    """Either ``text`` is a protocol, or every error is one located line."""
    try:
        LangshawProtocol.parse(text, "m.lsh")
    except LangshawError as error:
        assert error.errors, label
        for d in error.diagnostics:
            assert d.line >= 1 and d.column >= 1, (label, str(d))
            assert "\n" not in str(d) and str(d).isprintable(), (label, str(d))
    diagnose(text, "m.lsh")  # the same text through the other door: no exception either


# Mutations of a shipped protocol ---------------------------------------------------


def test_every_truncation_of_a_shipped_protocol_is_reported() -> None:
    text = (PROTOCOLS / "purchase.lsh").read_text(encoding="utf-8")
    cuts = sorted({i for i, c in enumerate(text) if not c.isalnum()} | {len(text)})
    for i in cuts:
        assert_well_reported(text[:i], f"cut at {i}")


def test_deleted_and_duplicated_lines_are_reported() -> None:
    lines = (PROTOCOLS / "a2a-task.lsh").read_text(encoding="utf-8").splitlines(keepends=True)
    for i in range(len(lines)):
        assert_well_reported("".join(lines[:i] + lines[i + 1 :]), f"line {i + 1} deleted")
        assert_well_reported("".join(lines[: i + 1] + lines[i:]), f"line {i + 1} twice")


def test_random_byte_flips_are_reported() -> None:
    data = (PROTOCOLS / "contract-net.lsh").read_bytes()
    rnd = random.Random(20261127)
    for n in range(300):
        flipped = bytearray(data)
        for _ in range(rnd.randint(1, 4)):
            flipped[rnd.randrange(len(flipped))] = rnd.randrange(256)
        assert_well_reported(flipped.decode("utf-8", "replace"), f"flip {n}")


def test_a_nul_in_a_schema_file_name_is_an_error_not_a_value_error() -> None:
    text = MINIMAL.replace("Go(id)", 'Go(id, x: "a\x00b.json")') + "sayso\n  A : x\n"
    assert errors_of(text) == [
        "x.lsh:5:17: 'x': the schema file's name holds the character '\\x00'"
    ]


def test_a_schema_file_that_is_a_device_is_refused_unread(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.json")  # reading it would wait forever
    text = MINIMAL.replace("Go(id)", 'Go(id, x: "pipe.json", y: "/dev/zero")')
    text += "sayso\n  A : x, y\n"
    (tmp_path / "p.lsh").write_text(text, encoding="utf-8")
    with pytest.raises(LangshawError) as caught:
        LangshawProtocol.load(tmp_path / "p.lsh")
    assert [str(d) for d in caught.value.errors] == [
        f"{tmp_path / 'p.lsh'}:5:17: 'x': cannot read schema file {tmp_path / 'pipe.json'}: "
        "not a regular file",
        f"{tmp_path / 'p.lsh'}:5:33: 'y': cannot read schema file /dev/zero: not a regular file",
    ]


# Bytes in the text -----------------------------------------------------------------


def test_a_byte_order_mark_is_not_part_of_the_name() -> None:
    protocol = LangshawProtocol.parse("\ufeff" + MINIMAL)
    assert protocol.name == "Tiny"
    assert errors_of("\ufeff" + MINIMAL.replace("(id)", "(id")) == [
        "x.lsh:5:12: expected ')', ',', ':' or '?' but found the end of the line "
        "(the '(' at line 5, column 9 is not closed)"
    ]


def test_a_bom_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "bom.lsh"
    path.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    assert LangshawProtocol.load(path).name == "Tiny"


def test_old_mac_line_ends_are_line_ends() -> None:
    protocol = LangshawProtocol.parse(MINIMAL.replace("\n", "\r"))
    assert protocol.actions["Go"].line == 5
    assert LangshawProtocol.parse(MINIMAL.replace("\n", "\r\n")).name == "Tiny"


def test_a_comment_with_a_form_feed_still_documents_its_action() -> None:
    # str.splitlines() breaks at \f and \x85; Lark counts only \n.
    text = "Tiny\n# a header \f with \x85 breaks\nwho A\nwhat id key, Go\ndo\n  # Start it.\n"
    assert LangshawProtocol.parse(text + "  A : Go(id)\n").actions["Go"].doc == "Start it."


def test_a_comment_documents_its_action_as_a_reader_of_the_file_sees_it() -> None:
    """The doc is the action's description for LLM agents: a bidi override or
    an ESC in a comment would show the model other text than the file shows."""
    text = "Tiny\nwho A\nwhat id key, Go\ndo\n  # Pay \u202eoob\x1b[8m now,\tthen \u200bgo\n"
    doc = LangshawProtocol.parse(text + "  A : Go(id)\n").actions["Go"].doc
    assert doc == "Pay \\u202eoob\\x1b[8m now, then \\u200bgo"
    assert doc.isprintable()


@pytest.mark.parametrize(
    ("name", "column", "char"),
    [("\x00Tiny", 1, "\\x00"), ("Ti\x1b[31mny", 3, "\\x1b"), ("Ti\u202eny", 3, "\\u202e"),
     ("Ti\ud800ny", 3, "\\ud800")],
)
def test_a_protocol_name_may_not_hold_what_would_not_show(
    name: str, column: int, char: str
) -> None:
    assert errors_of(MINIMAL.replace("Tiny", name)) == [
        f"x.lsh:1:{column}: the protocol's name holds the character '{char}', which would "
        "not show as itself"
    ]


def test_unprintable_characters_in_messages_are_escaped() -> None:
    for bad, shown in (("\x00", "\\x00"), ("\x1b", "\\x1b"), ("\u202e", "\\u202e")):
        assert errors_of(MINIMAL.replace("Go(id)", f"Go(i{bad}d)")) == [
            f"x.lsh:5:11: unexpected character '{shown}' (the '(' at line 5, column 9 is not "
            "closed)"
        ]


def test_a_long_unexpected_text_is_cut_in_the_message() -> None:
    text = MINIMAL.replace("Go(id)", "Go(" + "(" * 5000 + "id" + ")" * 5000 + ")")
    [message] = errors_of(text)
    assert len(message) < 200
    assert "found '((((" in message and "...'" in message


def test_a_file_name_with_a_line_break_stays_on_one_line() -> None:
    [message] = errors_of("", "evil\n\x1b[2Jname.lsh")
    assert message == (
        "evil\\n\\x1b[2Jname.lsh:1:1: expected the protocol name but found the end of the file"
    )


def test_an_all_blanked_file_gives_one_error_not_an_echo() -> None:
    # The first line blanked out, nothing is left: no "expected the protocol name".
    assert errors_of("  \x0bTiny") == [
        "x.lsh:1:3: unexpected character '\\x0b'; expected the end of the line or the "
        "protocol name"
    ]


# Names -------------------------------------------------------------------------------


@pytest.mark.parametrize("keyword", ["who", "what", "do", "sayso", "nono", "nogo"])
def test_a_clause_keyword_cannot_name_an_action_or_attribute(keyword: str) -> None:
    action = MINIMAL + f"  A : {keyword}(id)\n"
    assert errors_of(action) == [
        f"x.lsh:6:7: '{keyword}' is a clause keyword, so it cannot name an action: a line "
        "that starts with it begins a clause; rename it"
    ]
    attribute = MINIMAL.replace("Go(id)", f"Go(id, {keyword})") + f"sayso\n  A : {keyword}\n"
    assert errors_of(attribute) == [
        f"x.lsh:5:14: '{keyword}' is a clause keyword, so it cannot name an attribute: a "
        "line that starts with it begins a clause; rename it"
    ]


def test_a_role_named_like_a_clause_is_explained_where_it_acts() -> None:
    text = MINIMAL.replace("who A", "who A, do") + "  do : Stop(id)\n"
    assert errors_of(text) == [
        "x.lsh:6:12: expected ':' but found '(id)' ('do' at the start of a line begins a "
        "clause, so it cannot name a role that performs an action: rename the role)"
    ]


def test_a_role_named_like_a_clause_that_never_acts_is_an_error() -> None:
    assert errors_of(MINIMAL.replace("who A", "who A, nogo")) == [
        "x.lsh:2:8: 'nogo' is a clause keyword, so it cannot name a role: a line that "
        "starts with it begins a clause; rename it"
    ]


def test_a_protocol_without_a_completion_clause_is_warned_about() -> None:
    protocol = LangshawProtocol.parse(MINIMAL.replace("what id key, Go", "what id key"))
    assert [str(w) for w in protocol.warnings] == [
        "<string>:3:1: warning: the protocol declares no completion clause (after its keys "
        "in 'what', e.g. 'what id key, Done'), so an enactment is complete once its first "
        "action occurs"
    ]


# Files that are not protocol files ------------------------------------------------------


def test_load_reports_non_utf8_at_its_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "latin1.lsh"
    path.write_bytes(MINIMAL.replace("Go(id)", "Gö(id)").encode("latin-1"))
    with pytest.raises(LangshawError) as caught:
        LangshawProtocol.load(path)
    assert str(caught.value) == f"{path}:5:8: not UTF-8 text (byte 0xf6)"


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_load_refuses_a_pipe_or_a_device_without_reading_it(
    tmp_path: Path, special: str
) -> None:
    path = Path(special)
    if special == "fifo":
        path = tmp_path / "p.lsh"
        os.mkfifo(path)
    with pytest.raises(LangshawError) as caught:
        LangshawProtocol.load(path)
    assert str(caught.value) == f"{path}:1:1: cannot read: not a regular file"


def strabo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strabo.cli", *args], capture_output=True,
                          text=True, timeout=60)


def test_check_reports_each_unreadable_file_in_one_line_and_exits_1(tmp_path: Path) -> None:
    latin = tmp_path / "latin1.lsh"
    latin.write_bytes(b"Tiny\nwho A\nwhat id key, Go\ndo\n  A : G\xf6(id)\n")
    pipe = tmp_path / "pipe.lsh"
    os.mkfifo(pipe)
    folder = tmp_path / "folder.lsh"
    folder.mkdir()
    result = strabo("check", "-q", str(latin), str(pipe), str(folder), "")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{latin}:5:8: not UTF-8 text (byte 0xf6)",
        f"{pipe}:1:1: cannot read: not a regular file",
        f"{folder}:1:1: cannot read: Is a directory",
        "'':1:1: cannot read: the file name is empty",
        "4 of 4 file(s) invalid",
    ]


# Sizes ----------------------------------------------------------------------------------


def upward_chain(n: int) -> str:
    """n actions, each depending on the one declared below it."""
    lines = "\n".join(f"  A : X{i}(id, X{i - 1})" if i else "  A : X0(id)"
                      for i in reversed(range(n)))
    return f"Chain\nwho A\nwhat id key, X{n - 1}\ndo\n{lines}\n"


def test_checking_a_chain_written_upwards_is_linear() -> None:
    # The CPU this process spent, not the time: on a loaded machine (the suite
    # runs in 4 workers beside other work) wall time stretched the ratio to 52x.
    def seconds(n: int) -> float:
        text = upward_chain(n)
        start = time.process_time()
        LangshawProtocol.parse(text)
        return time.process_time() - start

    seconds(200)  # warm up the parser
    small, large = min(seconds(250) for _ in range(3)), min(seconds(4000) for _ in range(2))
    assert large < small * 16 * 3, (small, large)  # 16x the size: ~21x; it was ~115x


def test_a_ref_inside_a_schema_file_to_a_device_or_a_huge_file_is_refused_unread(
    tmp_path: Path,
) -> None:
    """The protocol's own schema names are checked before anything is read; a
    $ref inside a schema file reaches the files it names only through the
    loader, which looks at them first, as it does for the protocol's."""
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "huge.json").write_bytes(b'{"type": "string", "description": "'
                                         + b"x" * (5 * 2**20) + b'"}')
    for name, target, says in (
        ("pipe", "pipe.json", "not a regular file"),
        ("zero", "/dev/zero", "not a regular file"),
        ("huge", "huge.json", "more than a schema file may be"),
    ):
        (tmp_path / f"{name}-ref.json").write_text(json.dumps({"$ref": target}))
        text = MINIMAL.replace("Go(id)", f'Go(id, x: "{name}-ref.json")') + "sayso\n  A : x\n"
        (tmp_path / f"{name}.lsh").write_text(text, encoding="utf-8")
        with pytest.raises(LangshawError) as caught:
            LangshawProtocol.load(tmp_path / f"{name}.lsh")
        [error] = caught.value.errors
        assert says in str(error), str(error)
