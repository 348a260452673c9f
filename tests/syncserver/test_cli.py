"""``strabo syncserver`` as a command."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT
from tests.processes import LISTENING, spawn, strabo


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strabo.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_help_explains_every_option() -> None:
    result = run("syncserver", "--help")
    assert result.returncode == 0
    for option in (
        "--config",
        "--policy",
        "--batch-window-ms",
        "--db",
        "--host",
        "--port",
        "--sync",
        "--max-body",
        "--log-level",
    ):
        assert option in result.stdout
    assert "instant   each attempt is checked on arrival" in result.stdout
    assert "':memory:' keeps it in memory only" in result.stdout


def test_a_bad_config_is_refused_with_the_problems(tmp_path) -> None:
    config = tmp_path / "mas.toml"
    config.write_text('[mas.x]\nprotocols = ["none.lsh"]\n')
    result = run("syncserver", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.startswith("strabo syncserver: invalid configuration:")
    assert "mas.x.agents: no agent" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_busy_port_is_a_clear_error() -> None:
    config = ROOT / "samples" / "purchase" / "mas.toml"
    async with spawn(
        strabo("syncserver", "--config", str(config), "--db", ":memory:", "--port", "0"), "first"
    ) as first:
        port = (await first.line_matching(LISTENING)).group(1).rsplit(":", 1)[1]
        result = run("syncserver", "--config", str(config), "--db", ":memory:", "--port", port)
        assert result.returncode == 2  # configuration: as every other verb says it
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in result.stderr


def test_an_unusable_database_is_a_clear_error(tmp_path) -> None:
    config = ROOT / "samples" / "purchase" / "mas.toml"
    result = run(
        "syncserver",
        "--config",
        str(config),
        "--db",
        str(tmp_path / "no" / "dir.db"),
        "--port",
        "0",
    )
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr
