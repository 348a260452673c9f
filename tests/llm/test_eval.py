"""The evaluation harness itself, offline: bench/llm_eval.py --recorded."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_harness_runs_every_scenario_and_reports_the_figures(tmp_path):
    out = tmp_path / "eval.json"
    result = subprocess.run(
        [sys.executable, "bench/llm_eval.py", "--recorded", "--json", str(out),
         "--transcripts", str(tmp_path / "transcripts")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "7/7 runs succeeded" in result.stdout
    assert "0 protocol violations accepted" in result.stdout
    for column in ("calls", "attempted", "rejected", "violations", "seconds"):
        assert column in result.stdout
    runs = json.loads(out.read_text())["runs"]
    assert [r["scenario"] for r in runs] == [
        "purchase", "logistics", "concurrent", "flexible-urgent", "flexible-cheapest",
        "event", "ucp",
    ]
    assert all(r["success"] and r["violations"] == 0 for r in runs)
    assert all(r["calls"] <= r["attempted"] + 1 for r in runs)
    assert len(list((tmp_path / "transcripts").glob("*.json"))) == 7


def test_harness_without_a_key_says_what_to_do():
    env = {"PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "bench/llm_eval.py"], capture_output=True, text=True, cwd=ROOT,
        env=env, timeout=60,
    )
    assert result.returncode == 2
    assert "set ANTHROPIC_API_KEY" in result.stderr
