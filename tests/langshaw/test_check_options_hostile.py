"""Hostile review of ``strabo check``'s options: bad values, bad targets for
--diagram, mixes of valid and invalid files, --json with errors, a huge
--sub-keys. A user's error is one line on stderr and exit 2 (bad usage) or 1
(an invalid or unverified protocol), never a traceback, and in bounded time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from strabo.cli import main

OK = "Ok\nwho A\nwhat ID key, Go\ndo\n  A : Go(ID, x: string)\nsayso\n  A : x\n"
BAD = "Bad\nwho A\nwhat ID key\ndo\n  A : Go(\n"


@pytest.fixture
def ok(tmp_path: Path) -> Path:
    path = tmp_path / "ok.lsh"
    path.write_text(OK, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "option", [["--sub-keys", "0"], ["--sub-keys", "-1"], ["--sub-keys", "abc"],
               ["--max-states", "0"], ["--format", "png", "--diagram", "x.svg"],
               ["--format", "svg"], ["--semantics", "neither"]]
)
def test_bad_values_are_one_line_and_exit_2(
    option: list[str], ok: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", *option, str(ok)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_diagram_onto_the_protocol_file_is_refused(
    ok: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the check, the protocol file was replaced by its own SVG."""
    assert main(["check", "-q", "--diagram", str(ok.parent / "." / ok.name), str(ok)]) == 2
    assert ok.read_text(encoding="utf-8") == OK
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "protocol file itself" in err[0]


@pytest.mark.parametrize("target", ["dir", "/dev/full", "missing/x.svg"])
def test_unwritable_diagram_is_one_line_and_exit_2(
    target: str, ok: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = str(ok.parent) if target == "dir" else (
        target if target.startswith("/") else str(ok.parent / target))
    assert main(["check", "-q", "--diagram", where, str(ok)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("strabo check: cannot write the diagram")


def test_diagram_with_several_files_is_usage(
    ok: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--diagram", str(ok.parent / "d.svg"), str(ok), str(ok)]) == 2
    assert not (ok.parent / "d.svg").exists()
    assert "one protocol" in capsys.readouterr().err


def test_json_with_errors_is_one_object_per_file(
    ok: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = ok.parent / "bad.lsh"
    bad.write_text(BAD, encoding="utf-8")
    files = [str(ok), str(bad), str(ok.parent / "nosuch.lsh"), str(ok.parent), str(ok)]
    assert main(["check", "--json", *files]) == 1
    out, err = capsys.readouterr()
    documents = json.loads(out)
    assert [d["file"] for d in documents] == files
    assert [d["valid"] for d in documents] == [True, False, False, False, True]
    assert all(d["diagnostics"] for d in documents[1:4])
    assert "Traceback" not in err and "3 of 5" in err


def test_huge_sub_keys_says_so_at_once(tmp_path: Path) -> None:
    """The verifier builds every (action, key values) scope before its first
    state: --sub-keys 1000000 ran for minutes without a word."""
    proc = subprocess.run(
        [sys.executable, "-m", "strabo.cli", "check", "--verify", "-q",
         "--sub-keys", "1000000", "purchase"],
        capture_output=True, text=True, timeout=20, cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert "--sub-keys 1000000 gives more than 60000" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_huge_sub_keys_in_json_is_an_error_diagnostic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--verify", "--json", "--sub-keys", str(10**30), "purchase"]) == 1
    (document,) = json.loads(capsys.readouterr().out)
    assert document["valid"] is False and document["reports"] == []
    assert document["diagnostics"][-1]["severity"] == "error"


def test_sub_keys_within_max_states_still_verify(
    ok: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--verify", "--sub-keys", "3", "--max-states", "10", str(ok)]) == 0
    assert "1 file(s) verified" in capsys.readouterr().out
