"""Bad input to the documented commands is one line on stderr and status 2, never
a traceback: the cases a review of every CLI's error paths found (a file that is
not UTF-8 text given where text is read, a database URL of another kind)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strabo.cli import main
from tests.conftest import ROOT

# A model that is never reached: each error below comes before any call.
OFFLINE = ["--provider", "openai", "--base-url", "http://127.0.0.1:1/v1", "--model", "m"]
BINARY = b"\xff\xfe\x00 not text"


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_a_goal_file_that_is_not_text_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    goal = tmp_path / "goal.txt"
    goal.write_bytes(BINARY)
    args = ["agent", "--protocol", "purchase", "--role", "Buyer", "--embedded",
            "--goal-file", str(goal), *OFFLINE]
    assert main(args) == 2
    assert _one_line(capsys) == f"strabo agent: cannot read {goal}: not UTF-8 text\n"


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_mandate_that_is_not_text_is_a_usage_error(
    suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mandate = tmp_path / f"mandate{suffix}"
    mandate.write_bytes(BINARY)
    args = ["agent", "--protocol", "purchase", "--role", "Buyer", "--embedded",
            "--goal", "buy a pen", "--mandate", str(mandate), *OFFLINE]
    assert main(args) == 2
    assert _one_line(capsys) == f"strabo agent: --mandate: {mandate}: not UTF-8 text\n"


@pytest.mark.parametrize("url", ["mysql://u:secret@db.internal/shop", "sqlite:///tmp/x.db"])
def test_a_database_url_of_another_kind_is_named_as_such(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Taken for a SQLite path, 'mysql://h/db' was refused as a missing directory
    'mysql:'; the message says what is wrong, and shows no password."""
    config = str(ROOT / "samples" / "purchase" / "mas.toml")
    assert main(["syncserver", "--config", config, "--db", url]) == 2
    err = _one_line(capsys)
    scheme = url.split(":", 1)[0]
    assert err == (f"strabo syncserver: --db {scheme}://...: a SQLite file or a "
                   "postgresql:// URL, no other database\n")
    assert "secret" not in err
