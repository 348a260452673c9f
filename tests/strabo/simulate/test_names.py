"""The pattern protocols and scenarios by name: ``patterns/market`` and
``market`` wherever a protocol is expected, and a clear answer for a name
that is neither a file nor a shipped scenario."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from syncserver import bundled
from syncserver.config import build_config
from tests.conftest import PROTOCOLS

PATTERNS = PROTOCOLS / "patterns"


def strabo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strabo.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.fixture
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bundle with a top-level ``a``, ``x/a`` (shadowed), ``x/b`` and ``y/b``
    (ambiguous), and ``x/c`` (unique)."""
    root = tmp_path / "bundle"
    for name in ("a", "x/a", "x/b", "y/b", "x/c"):
        (root / f"{name}.lsh").parent.mkdir(parents=True, exist_ok=True)
        (root / f"{name}.lsh").write_text(f"# {name}\n")
    monkeypatch.setattr(bundled, "directory", lambda: root)
    return root


def test_a_folders_protocol_is_found_by_its_full_name_or_alone_if_unique(bundle: Path) -> None:
    assert bundled.names() == ["a", "x/a", "x/b", "x/c", "y/b"]
    assert bundled.path("x/c") == bundled.path("c.lsh") == bundle / "x" / "c.lsh"
    assert bundled.path("a") == bundle / "a.lsh"  # the top-level one keeps its name
    assert bundled.path("x/a") == bundle / "x" / "a.lsh"
    assert bundled.path("y/b.lsh") == bundle / "y" / "b.lsh"
    with pytest.raises(KeyError, match="'b' is ambiguous: say which, x/b or y/b"):
        bundled.path("b")
    assert bundled.find("b") is None


def test_only_the_bundles_own_names_are_looked_up(bundle: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.lsh").write_text("# beside the bundle, not in it\n")
    (tmp_path / "work").mkdir()
    for name in ("../outside", "x/../a", "/nonexistent/a", "x\\c", "x/", ""):
        assert bundled.find(name, base=tmp_path / "work") is None, name
    assert bundled.find("x/c", base=tmp_path / "work") == bundle / "x" / "c.lsh"


def test_the_shipped_pattern_protocols_resolve(tmp_path: Path) -> None:
    shipped = sorted(p.stem for p in PATTERNS.glob("*.lsh"))
    assert {"market", "sequential", "broadcast", "queue"} <= set(shipped)
    for stem in shipped:
        assert bundled.find(f"patterns/{stem}", base=tmp_path) == bundled.find(stem, tmp_path)
        assert bundled.path(stem).resolve() == PATTERNS / f"{stem}.lsh"
    assert bundled.scenario_names() == sorted(p.stem for p in PATTERNS.glob("*.toml"))


def test_a_configuration_names_a_pattern_protocol(tmp_path: Path) -> None:
    config = build_config(
        {"mas": {"m": {"protocols": ["patterns/market", "queue"],
                       "agents": {"a": {"roles": ["Market"], "token": "t"}}}}},
        base=tmp_path,
    )
    assert sorted(config.mas["m"].protocols) == ["Market", "Queues"]


def test_an_unknown_scenario_name_lists_the_shipped_ones(tmp_path: Path) -> None:
    result = strabo("simulate", "nosuchpattern", cwd=tmp_path)
    shipped = ", ".join(sorted(p.stem for p in PATTERNS.glob("*.toml")))
    assert "market-llm" in shipped
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "strabo simulate: 'nosuchpattern' is neither a scenario file nor a scenario "
        f"shipped with strabo (shipped: {shipped})\n")
    # A path is only ever a path: it is reported as one.
    result = strabo("simulate", "./nosuch.toml", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("nosuch.toml: cannot read")


def test_simulate_help_describes_the_shipped_market(tmp_path: Path) -> None:
    scenario = tomllib.loads((PATTERNS / "market.toml").read_text())
    sellers = [a["policy"].rsplit(":", 1)[1] for a in scenario["agents"].values()
               if a["role"] == "Seller"]
    assert sorted(sellers) == ["fixed", "undercut", "undercut"]  # what the help describes
    text = " ".join(strabo("simulate", "--help", cwd=tmp_path).stdout.split())
    assert ("runs three coded sellers (one keeps a fixed price, two undercut the cheapest "
            "rival down to a floor, then start high again) and twelve buyers") in text
    assert scenario["rounds"]["limit"] == 12 and "pattern for twelve rounds" in text
    assert "follow" not in text
    assert "(market, sequential, broadcast, queue, and market-llm," in text
