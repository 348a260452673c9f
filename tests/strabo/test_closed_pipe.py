"""A closed stdout (``strabo ... | head``): the command stops quietly, with 141
(128 + SIGPIPE, as a command SIGPIPE ended), or with the status it had already
decided on, so that ``set -o pipefail`` never reads a failed check as success.

It used to exit 0 whenever the pipe broke inside the verb (a failed
``check --verify`` too), and 120 with "Exception ignored" on stderr when it broke
at the interpreter's final flush. Each command here runs with its stdout the
write end of a pipe whose read end is closed before it starts, so every write
fails, deterministically; once with stdout unbuffered (the pipe breaks at the
first print, inside the verb) and once buffered (at the final flush, after the
verb has returned its status)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, ROOT

UNSAFE = str(FIXTURES / "lsh" / "faulty" / "unsafe-nogo.lsh")
BAD = str(FIXTURES / "lsh" / "faulty" / "never-completes.lsh")


def closed(*args: str, buffered: bool) -> tuple[int, str]:
    """Run ``strabo ARGS`` with nobody reading its stdout: (status, stderr)."""
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    read, write = os.pipe()
    os.close(read)  # nobody will read: every write raises BrokenPipeError
    try:
        done = subprocess.run(
            [sys.executable, "-m", "strabo.cli", *args],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT, env=env,
        )
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    return done.returncode, done.stderr


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
@pytest.mark.parametrize(
    "args",
    [["protocols"], ["protocols", "atomic-ucp"], ["check", "--verify", "atomic-ucp"],
     ["--help"], ["check", "--help"]],
    ids=" ".join,
)
def test_output_cut_short_is_141_and_silent(args: list[str], buffered: bool) -> None:
    assert closed(*args, buffered=buffered) == (141, "")


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
def test_a_failure_found_before_the_pipe_broke_wins(buffered: bool) -> None:
    """--json prints once every file is checked: the failure is already known
    (unbuffered, in the verb, which stops there; buffered, at the final flush,
    after the verb's last words)."""
    status, err = closed("check", "--verify", "-q", "--json", UNSAFE, buffered=buffered)
    assert (status, err) == (1, "1 of 1 file(s) failed\n" if buffered else "")


def test_a_failed_file_before_the_output_that_breaks_wins() -> None:
    """Unbuffered, the pipe breaks at the second file's first line, after the
    first file failed: the check had decided (1), and stops there."""
    status, err = closed("check", BAD.replace(".lsh", "-missing.lsh"), "atomic-ucp",
                         buffered=False)
    assert status == 1 and err.endswith("cannot read: No such file or directory\n"), err


def test_a_failed_check_that_had_not_failed_yet_is_141_not_0() -> None:
    """Unbuffered, the first print (the protocol's summary, before verifying) is
    where the pipe breaks: the command stops there, and exits 141."""
    assert closed("check", "--verify", UNSAFE, buffered=False) == (141, "")


def test_a_failed_check_keeps_its_status_when_its_output_was_buffered() -> None:
    status, err = closed("check", "--verify", UNSAFE, buffered=True)
    assert status == 1 and "unsafe (nogo)" in err and err.endswith("1 of 1 file(s) failed\n")


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
def test_nothing_on_stdout_nothing_changes(buffered: bool) -> None:
    status, err = closed("check", "--verify", "-q", UNSAFE, buffered=buffered)
    assert status == 1 and err.endswith("1 of 1 file(s) failed\n")
    assert closed("check", "-q", "atomic-ucp", buffered=buffered) == (0, "")


def test_help_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from strabo.cli import main

    for args in (["--help"], ["check", "--help"]):
        assert main(args) == 0
        said = " ".join(capsys.readouterr().out.split())
        assert "141" in said and "closed" in said
