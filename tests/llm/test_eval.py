"""The evaluation harness itself, offline: bench/llm_eval.py with the scripted
answers (--recorded), and against an OpenAI-compatible endpoint that always calls
the first offered tool (samples/llm/fake_openai.py), as a separate process over
real HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

from samples.llm import fake_openai
from samples.llm.scenarios import SCENARIOS
from strabo import serve
from tests.conftest import ROOT

KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY",
        "OPENAI_BASE_URL")


def keyless() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in KEYS}


def test_harness_runs_every_scenario_and_reports_the_figures(tmp_path):
    out = tmp_path / "eval.json"
    result = subprocess.run(
        [sys.executable, "bench/llm_eval.py", "--recorded", "--json", str(out),
         "--transcripts", str(tmp_path / "transcripts")],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env=keyless(),
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


async def test_every_run_against_a_first_tool_endpoint_ends_within_budget(tmp_path):
    """The acceptance of any-model agents: a model with no judgement at all (the
    first offered tool, schema-valid arguments) reached with --provider openai
    --base-url, and no key. No run succeeds; each must end within its budget, with
    no protocol violation accepted and no traceback."""
    out = tmp_path / "fake.json"
    calls, seconds = 6, 3.0
    async with serve(fake_openai.app()) as url:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "bench/llm_eval.py", "--provider", "openai",
            "--base-url", f"{url}/v1", "--model", "fake", "--max-calls", str(calls),
            "--max-seconds", str(seconds), "--json", str(out),
            cwd=ROOT, env=keyless(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = (s.decode() for s in await asyncio.wait_for(process.communicate(), 180))
    assert process.returncode == 0, stderr
    assert "Traceback" not in stdout + stderr
    assert "0 protocol violations accepted" in stdout
    runs = json.loads(out.read_text())["runs"]
    assert [r["scenario"] for r in runs] == list(SCENARIOS)
    for run in runs:
        assert run["status"] in ("done", "complete", "budget", "error"), run  # not the harness
        assert "could not be reached" not in run["reason"], run
        assert run["calls"] >= 1 and run["calls"] + run["failed_calls"] <= calls, run
        assert run["agent_seconds"] <= seconds + 1.0, run
        assert run["violations"] == 0, run


def test_fake_openai_runs_in_process():
    result = subprocess.run(
        [sys.executable, "bench/llm_eval.py", "--fake-openai", "--scenario", "logistics",
         "--max-calls", "3"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env=keyless(),
    )
    assert result.returncode == 0, result.stderr
    assert "the fake OpenAI endpoint" in result.stdout
    assert "logistics run 1: FAILED (budget)" in result.stdout
    assert "3 LLM calls" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_harness_without_a_way_to_the_model_says_what_to_do():
    cases = [
        ([], "set ANTHROPIC_API_KEY"),
        (["--provider", "openai"], "--provider openai needs --model"),
        (["--provider", "openai", "--model", "m"], "set OPENAI_API_KEY, or give --base-url"),
    ]
    for args, says in cases:
        result = subprocess.run(
            [sys.executable, "bench/llm_eval.py", *args], capture_output=True, text=True,
            cwd=ROOT, env={"PATH": "/usr/bin:/bin"}, timeout=60,
        )
        assert result.returncode == 2, (args, result.stderr)
        assert says in result.stderr, (args, result.stderr)
