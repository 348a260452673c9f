"""``strabo check``, run as a real command."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import FIXTURES, PROTOCOLS


def strabo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strabo.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_check_valid_files_prints_summaries_and_exits_0() -> None:
    files = sorted(str(p) for p in PROTOCOLS.glob("*.lsh"))
    result = strabo("check", *files)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "SimpleUCP (" in result.stdout
    assert "  roles: Platform, Business" in result.stdout
    assert "  keys: eid, v (root: eid)" in result.stdout
    assert (
        '    Business : Created(cid: string, Create, id: "ucp/checkout_id.json", totals: '
        '"ucp/totals.json", payment: "ucp/payment.json", discounts?: "ucp/discounts.json", '
        'fulfillment?: "ucp/fulfillment.json")'
    ) in result.stdout
    assert "  complete when: Completed or Failed" in result.stdout
    assert result.stdout.rstrip().endswith(f"{len(files)} file(s) valid")


def test_check_reports_located_errors_and_exits_1() -> None:
    good = str(PROTOCOLS / "atomic-ucp.lsh")
    bad = str(FIXTURES / "lsh" / "bad" / "unknown-action-nogo.lsh")
    result = strabo("check", good, bad)
    assert result.returncode == 1
    assert f"{bad}:13:14: unknown action 'Instruction' in nogo; did you mean 'Instruct'?" in (
        result.stderr
    )
    assert result.stderr.rstrip().endswith("1 of 2 file(s) invalid")
    assert "SimpleUCP (" in result.stdout  # the valid file is still summarized


def test_check_prints_warnings_without_failing() -> None:
    path = str(FIXTURES / "lsh" / "warn" / "never-enabled.lsh")
    result = strabo("check", "--quiet", path)
    assert result.returncode == 0
    assert f"{path}:10:11: warning: action 'Refund' can never be enabled" in result.stderr
    assert result.stdout == ""


def test_check_missing_file_is_a_clear_error(tmp_path) -> None:
    result = strabo("check", str(tmp_path / "nope.lsh"))
    assert result.returncode == 1
    assert "nope.lsh:1:1: cannot read: No such file or directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_explains_the_command() -> None:
    result = strabo("check", "--help")
    assert result.returncode == 0
    assert "Exit status: 0 when every file is valid (and, with --verify, live and safe)" in (
        result.stdout
    )
    assert "--semantics {shared,decentralized,both}" in result.stdout
