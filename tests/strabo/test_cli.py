"""The ``strabo`` command itself: version, bundled protocols by name."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from strabo import __version__
from tests.conftest import PROTOCOLS


def strabo(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strabo.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_version() -> None:
    result = strabo("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"strabo {__version__}"


def test_protocols_lists_every_bundled_file(tmp_path) -> None:
    result = strabo("protocols", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()]
    patterns = sorted(f"patterns/{p.stem}" for p in PROTOCOLS.glob("patterns/*.lsh"))
    assert len(patterns) >= 4  # market, sequential, broadcast, queue at least
    assert names == sorted(p.stem for p in PROTOCOLS.glob("*.lsh")) + patterns
    assert "patterns/market      Market: A posted-price market in rounds" in result.stdout
    assert re.search(r"^purchase +Purchase: A buyer asks for quotes on an item$", result.stdout,
                     re.M)


def test_protocols_prints_one_and_its_path(tmp_path) -> None:
    text = strabo("protocols", "purchase", cwd=str(tmp_path)).stdout
    assert text == (PROTOCOLS / "purchase.lsh").read_text()
    where = strabo("protocols", "--path", "purchase.lsh", cwd=str(tmp_path)).stdout.strip()
    assert where.endswith("purchase.lsh")


def test_an_unknown_protocol_is_named_with_the_known_ones() -> None:
    result = strabo("protocols", "purchse")
    assert result.returncode == 2
    assert "no bundled protocol named 'purchse' (bundled: a2a-task, atomic-ucp," in result.stderr


def test_check_takes_bundled_names_from_anywhere(tmp_path) -> None:
    result = strabo("check", "-q", "atomic-ucp", "incremental-ucp", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    # A file of that name in the working directory wins over the bundled one.
    (tmp_path / "atomic-ucp").write_text("not a protocol\n")
    result = strabo("check", "-q", "atomic-ucp", cwd=str(tmp_path))
    assert result.returncode == 1


def test_pattern_protocols_are_found_with_or_without_their_folder(tmp_path) -> None:
    result = strabo("check", "patterns/market", "market", "queue", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Market (") == 2 and "3 file(s) valid" in result.stdout
    text = strabo("protocols", "market", cwd=str(tmp_path)).stdout
    assert text == (PROTOCOLS / "patterns" / "market.lsh").read_text()
    where = strabo("protocols", "--path", "patterns/queue.lsh", cwd=str(tmp_path)).stdout
    assert where.strip().endswith("patterns/queue.lsh")
    # A file of that name wins over the bundled one, in a folder as at the top.
    (tmp_path / "patterns").mkdir()
    (tmp_path / "patterns" / "market").write_text("not a protocol\n")
    assert strabo("check", "-q", "patterns/market", cwd=str(tmp_path)).returncode == 1
    assert strabo("check", "-q", "market", cwd=str(tmp_path)).returncode == 0


def test_check_help_says_how_patterns_are_named() -> None:
    text = " ".join(strabo("check", "--help").stdout.split())
    assert "named with their folder, 'patterns/market', or without it, 'market'," in text


def test_only_the_subcommand_given_is_imported() -> None:
    """``strabo --help`` lists every subcommand but imports none of their modules
    (the MCP SDK alone took most of a second); a subcommand imports its own."""
    probe = (
        "import sys\n"
        "from strabo.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('peach.mcp.cli', 'syncserver.cli', 'peach.llm.cli',"
        " 'syncserver.server', 'asyncpg') if m in sys.modules))\n"
    )

    def imported(*args: str) -> tuple[str, str]:
        result = subprocess.run(
            [sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=60
        )
        return result.stdout.splitlines()[-1], result.stdout

    listed, text = imported("--help")
    assert listed == "[]"
    assert "mcp" in text and "syncserver" in text  # listed all the same
    assert imported("syncserver", "--help")[0] == "['syncserver.cli']"
    # The language's commands load the language, not the engine (0.4 s at every start).
    assert imported("check", "--help")[0] == "[]"
    assert imported("protocols")[0] == "[]"


def test_the_engine_exports_every_name_it_lists_on_first_use() -> None:
    """``syncserver`` loads its names lazily (``strabo check`` needs only a corner
    of it): each listed name resolves, to the object its module defines."""
    import importlib

    import syncserver

    assert sorted(syncserver.__all__) == sorted(syncserver._EXPORTS)
    for name, module in syncserver._EXPORTS.items():
        assert getattr(syncserver, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        syncserver.Nothing  # noqa: B018
    assert "SyncServer" in dir(syncserver)
