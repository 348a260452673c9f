"""The evaluation harness itself, offline: bench/llm_eval.py with the scripted
answers (--recorded), and against an OpenAI-compatible endpoint that always calls
the first offered tool (samples/llm/fake_openai.py), as a separate process over
real HTTP."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
from types import ModuleType

import pytest

from samples.llm import fake_openai
from samples.llm.scenarios import SCENARIOS
from strabo import serve
from syncserver.serving import free_port
from tests.conftest import ROOT

KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY",
        "OPENAI_BASE_URL")


def keyless() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in KEYS}


def in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """bench/llm_eval.py's ``main`` with ``args``, in this process, without the
    keys: (status, stdout, stderr). For what the harness finds before any run (usage
    errors, --help): a process of its own for each cost half a second of CPU in
    imports alone. The tests that run scenarios start it as a process, as a user
    does, so its start as a script stays covered."""
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # it sets sys.path[0] on import
    module: ModuleType = importlib.import_module("bench.llm_eval")
    monkeypatch.setattr(sys, "argv", ["bench/llm_eval.py", *args])
    capsys.readouterr()
    try:
        status = module.main()
    except SystemExit as exc:  # argparse: --help, or an option it refuses
        status = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return status, out, err


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
    for column in ("calls", "attempted", "rejected", "violations", "agent s"):
        assert column in result.stdout
    assert "which --max-seconds bounds (setup excluded" in result.stdout
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
    # Some runs wait for a move that never comes until the wall-time budget ends
    # them (asserted below): a short budget, since each of those waits it out.
    calls, seconds = 6, 1.5
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
    assert any("wall time budget" in run["reason"] for run in runs), runs


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


def test_harness_without_a_way_to_the_model_says_what_to_do(monkeypatch, capsys):
    cases = [
        ([], "set ANTHROPIC_API_KEY"),
        (["--provider", "openai"], "--provider openai needs --model"),
        (["--provider", "openai", "--model", "m"], "set OPENAI_API_KEY, or give --base-url"),
    ]
    for args, says in cases:
        status, _, err = in_process(monkeypatch, capsys, *args)
        assert status == 2, (args, err)
        assert says in err, (args, err)


def eval_run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "bench/llm_eval.py", *args], capture_output=True, text=True,
        cwd=ROOT, timeout=timeout, env=keyless(),
    )


def test_an_unreachable_model_is_the_reason_shown_and_fails_the_evaluation():
    """No run reached the model: the table says so (not the judge's 'found 0'),
    and the exit status is 1, since nothing was evaluated."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = eval_run("--provider", "openai", "--base-url", url, "--model", "m",
                      "--scenario", "purchase", "--scenario", "logistics")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    for name in ("purchase", "logistics"):
        assert f"{name} run 1 (error): the agent stopped on an error: the model could not " \
            "be reached" in result.stdout, result.stdout
        assert f"{name} run 1: FAILED (error: the model could not be reached" in result.stdout
    assert "2 stopped on an error" in result.stdout
    assert "llm_eval: every run stopped on an error" in result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--json", "/nonexistent/dir/x.json"],
         "--json /nonexistent/dir/x.json: the folder /nonexistent/dir does not exist"),
        (["--json", "{tmp}"], "--json {tmp}: that is a folder; give a file name"),
        (["--transcripts", "{tmp}/file"],
         "--transcripts {tmp}/file: that is a file, not a folder"),
        (["--transcripts", "{tmp}/file/sub"],
         "--transcripts {tmp}/file/sub: cannot make the folder"),
        (["--provider", "openai", "--base-url", "not-a-url", "--model", "m"],
         "--base-url 'not-a-url' is not an http(s) URL with a host"),
        (["--provider", "openai", "--base-url", "127.0.0.1:11434/v1", "--model", "m"],
         "write http://127.0.0.1:11434/v1"),
    ],
)
def test_bad_outputs_and_base_urls_are_usage_errors_before_any_run(
    tmp_path, monkeypatch, capsys, args, says
):
    (tmp_path / "file").write_text("not a folder")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    extra = [] if "--provider" in args else ["--recorded"]
    status, out, err = in_process(monkeypatch, capsys, *extra, "--scenario", "purchase", *args)
    assert status == 2, out + err
    assert err.startswith("llm_eval: "), err
    assert err.count("\n") == 1, err  # one line, no traceback
    assert says.replace("{tmp}", str(tmp_path)) in err
    assert out == ""  # no run started


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_results_are_shown_when_the_json_cannot_be_written_at_the_end():
    """/dev/full passes the check up front and fails at the write: the table
    still shows the finished runs, and a one-line error says what failed."""
    result = eval_run("--recorded", "--scenario", "purchase", "--json", "/dev/full")
    assert result.returncode == 1
    assert "1/1 runs succeeded" in result.stdout
    assert result.stderr.strip() == (
        "llm_eval: cannot write /dev/full: No space left on device (the table above has the "
        "results)"
    )


def test_the_help_documents_the_exit_status(monkeypatch, capsys):
    status, out, _ = in_process(monkeypatch, capsys, "--help")
    assert status == 0
    text = " ".join(out.split())
    assert "Exit status: 0 when the evaluation ran" in text
    assert "every run stopped on an error" in text
