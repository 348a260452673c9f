"""The A2A SDK is an extra (``strabo[a2a]``): without it, ``strabo --help``
(which reads every verb's options) works, and ``strabo a2a`` is a usage error
that says what to install, never a traceback."""

from __future__ import annotations

import subprocess
import sys

HIDDEN = "import sys; sys.modules['a2a'] = None; from strabo.cli import main; "


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDDEN + code], capture_output=True, text=True, timeout=60
    )


def test_strabo_help_needs_no_a2a_sdk() -> None:
    done = run("sys.exit(main(['--help']))")
    assert done.returncode == 0, done.stderr
    assert "a2a" in done.stdout and "Traceback" not in done.stderr


def test_strabo_a2a_without_the_sdk_says_what_to_install() -> None:
    done = run("sys.exit(main(['a2a', '--protocol', 'purchase', '--role', 'Buyer', '--embedded']))")
    assert done.returncode == 2, done.stderr
    assert "pip install 'strabo[a2a]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert "--protocol" in run("sys.exit(main(['a2a', '--help']))").stdout
