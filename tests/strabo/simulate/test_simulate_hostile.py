"""``strabo simulate`` with scenarios and policies that are wrong, slow or
hostile: every mistake in a file is reported at its line (never a traceback),
populations and files are bounded, a policy that raises, returns nonsense or
never returns ends the run with an error naming it, Ctrl-C still writes the
report, and what agents say cannot turn the report into a spreadsheet formula
or break its table or chart."""

from __future__ import annotations

import asyncio
import csv
import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from strabo.simulate import ScenarioError, load_scenario, parse_scenario, simulate
from strabo.simulate.move import Move
from strabo.simulate.report import write_report
from tests.conftest import PROTOCOLS
from tests.processes import ROOT

BROADCAST = PROTOCOLS / "patterns" / "broadcast.lsh"
HERE = "tests.strabo.simulate.test_simulate_hostile"


def text(member: str = f"{HERE}:nothing", extra: str = "", count: int = 2,
         chair: str = "strabo.simulate.policies.broadcast:chair") -> str:
    return f"""\
[scenario]
name = "Hostile"
protocol = "{BROADCAST}"
{extra}
[rounds]
key = "round"
end = "Wrap"
limit = 1

[stop]
timeout = 20
policy_timeout = 0.5

[report]
rows = "Post"
columns = ["round", "author", "text"]

[agents.chair]
role = "Chair"
policy = "{chair}"

[agents.member]
role = "Member"
count = {count}
policy = "{member}"
"""


def problems(source: str, tmp_path: Path | None = None) -> list[str]:
    with pytest.raises(ScenarioError) as error:
        parse_scenario(source, source="s.toml", base=tmp_path or Path("."))
    return error.value.problems


# Policies, good and bad -----------------------------------------------------------------

def nothing(move: Move) -> None:
    return None


def a_list(move: Move) -> Any:
    return ["author", "x"] if move.name == "Post" and "post" in move.action.new_keys else None


def a_coroutine(move: Move) -> Any:
    async def later() -> dict[str, Any]:
        return {}

    return later() if move.name == "Post" and "post" in move.action.new_keys else None


def a_set(move: Move) -> Any:
    if move.name == "Post" and "post" in move.action.new_keys:
        return {"author": {"a", "b"}, "text": "t"}
    return None


def raising(move: Move) -> Any:
    raise LookupError("the oracle is down")


RELEASE = threading.Event()


def never_returns(move: Move) -> Any:
    RELEASE.wait(60)  # released when the test ends, so the abandoned thread ends too
    return None


async def coroutine_function(move: Move) -> None:
    return None


class NotAFunction:
    def __init__(self, move: Move) -> None:
        pass


NUMBER = 3


def untrusted(move: Move) -> Any:
    """A member who says what an LLM might: formulas, newlines, pipes, TeX."""
    if move.name != "Post" or "post" not in move.action.new_keys or move.occurred("Post"):
        return None
    return {"author": "a$\\frac{1$b", "text": '=HYPERLINK("http://evil")\n| two | cells ☕'}


def lone_chair(move: Move) -> Any:
    """Opens one round and never ends it."""
    if move.name == "Open" and move.initiating and not move.memory.get("opened"):
        move.memory["opened"] = True
        return {"round": 1, "topic": "anything"}
    return None


def chatterbox(move: Move) -> Any:
    """Posts for ever (tells the test once it has started)."""
    if move.name != "Post" or "post" not in move.action.new_keys:
        return None
    if not move.memory.get("said"):
        move.memory["said"] = True
        print("posting", flush=True)
    return {"author": move.agent, "text": "again"}


# The scenario file ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("a = " + "[" * 100_000, "s.toml: not a scenario: arrays or tables nested too deeply"),
        (f'[scenario]\nprotocol = "{BROADCAST}"\n[agents.chair]\n',  # empty: it ran no one
         "s.toml:3: agents.chair.role: missing: it is required"),
        (text(count=100_000), "agents.member.count: 100000 agents; a scenario runs at most 200"),
        (text(count=150) + '\n[agents.more]\nrole = "Member"\ncount = 150\npolicy = "'
         f'{HERE}:nothing"\n', "agents: 301 agents in all; a scenario runs at most 200"),
        (text().replace("timeout = 20", "timeout = nan"),
         "stop.timeout: must be a positive number, not nan"),
        (text().replace("timeout = 20", "timeout = inf"),
         "stop.timeout: must be a positive number, not inf"),
        (text().replace("policy_timeout = 0.5", "policy_timeout = -1"),
         "stop.policy_timeout: must be a positive number, not -1"),
        (text(member=f"{HERE}:NotAFunction"), "is a class, not a function policy(move)"),
        (text(member=f"{HERE}:NUMBER"), "is a int, not a function policy(move)"),
        (text(member=f"{HERE}:coroutine_function"), "is a coroutine function (async def)"),
        (text().replace("[agents.member]", '[agents."mem\\u0007ber"]'),
         "cannot name an agent: up to 64 printable characters"),
        (text().replace("count = 2", 'count = "2"'), "must be a positive integer, not '2'"),
        (text().replace("limit = 1", "limit = 0"),
         "rounds.limit: must be a positive integer, not 0"),
        (text().replace('name = "Hostile"', "name = 7\nnaem = 'x'"),
         "scenario.naem: unknown setting (did you mean 'name'?"),
        (text().replace("protocol = ", 'protocol = "nowhere.lsh"\n# '),
         "no protocol file 'nowhere.lsh'"),
    ],
)
def test_mistakes_are_reported_at_their_line(source: str, expected: str) -> None:
    found = problems(source)
    assert any(expected in p for p in found), found


def test_policy_modules_that_fail_to_import_are_mistakes_too(tmp_path: Path) -> None:
    (tmp_path / "raises_at_import.py").write_text("raise RuntimeError('half-written')\n")
    (tmp_path / "bad_syntax.py").write_text("def policy(move:\n")
    found = problems(text(member="raises_at_import:policy", chair="bad_syntax:policy"), tmp_path)
    assert found[0].endswith("agents.chair.policy: cannot import 'bad_syntax': SyntaxError: "
                             f"'(' was never closed ({tmp_path / 'bad_syntax.py'}:1)")
    assert found[1].endswith("agents.member.policy: cannot import 'raises_at_import': its code "
                             "raised RuntimeError: half-written")
    assert found[0].startswith("s.toml:20: ") and found[1].startswith("s.toml:25: ")


def test_too_many_problems_are_cut_short() -> None:
    source = text() + "".join(f"\n[agents.m{i}]\nrole = 'Membr'\n" for i in range(200))
    found = problems(source)  # two each: the role is not one, and no policy
    assert len(found) == 51 and found[-1] == "... and 350 more problems"


def test_a_scenario_too_large_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_text(text() + "# " + "x" * (1024 * 1024) + "\n")
    with pytest.raises(ScenarioError, match="a scenario is at most 1048576 bytes"):
        load_scenario(path)


def test_a_long_line_does_not_stall_the_error_report(tmp_path: Path) -> None:
    # A problem is located by scanning the file's lines; a line of spaces after
    # '[' (here inside a string) once made that scan cubic: minutes for 2000.
    path = tmp_path / "s.toml"
    path.write_text(text(extra='description = """\n[' + " " * 3000 + 'x\n"""')
                    .replace('role = "Member"', 'role = "Membr"'))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "strabo.cli", "simulate", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=20)
    assert done.returncode == 2 and "'Membr' is not a role" in done.stderr, done.stderr
    assert time.monotonic() - started < 10


# Policies that misbehave at run time ------------------------------------------------------

@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("raising", "agent member: its policy failed on Post: LookupError: the oracle is down"),
        ("a_list", "agent member: its policy returned list for Post: a policy returns a dict"),
        ("a_coroutine", "agent member: its policy returned an awaitable for Post: a policy is "
                        "a plain function (def, not async def)"),
        ("a_set", "agent member: its policy bound Post wrongly: Post: author is a set"),
        ("never_returns", "agent member: its policy failed on Post: TimeoutError: it did not "
                          "return within 0.5 s ([stop] policy_timeout)"),
    ],
)
async def test_a_misbehaving_policy_ends_the_run_with_an_error_naming_it(
    policy: str, expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    scenario = parse_scenario(text(member=f"{HERE}:{policy}", count=1))
    try:
        with caplog.at_level(logging.DEBUG, logger="strabo.simulate"):
            result = await asyncio.wait_for(simulate(scenario), 15)
    finally:
        RELEASE.set()
    RELEASE.clear()
    assert result.reason == "error" and result.detail.startswith(expected), result.detail
    assert [o.action for o in result.trace] == ["Open"]  # what happened before is kept
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.exc_info]


async def test_agent_names_beyond_ascii_run_over_http() -> None:
    source = text(member=f"{HERE}:nothing").replace("[agents.member]", '[agents."café"]')
    result = await asyncio.wait_for(simulate(parse_scenario(source), http=True), 15)
    assert result.reason == "stalled", result.detail  # connected, then nobody posts
    assert result.trace[0].action == "Open"


# The report -------------------------------------------------------------------------------

async def test_what_agents_say_cannot_break_the_report(tmp_path: Path) -> None:
    columns = 'columns = ["round", "author", "text"]\n'
    chart = '[report.chart]\nx = "round"\ny = "round"\nseries = "author"\ntitle = "$\\\\frac{$"\n'
    source = text(member=f"{HERE}:untrusted", count=1).replace(columns, columns + chart)
    result = await asyncio.wait_for(simulate(parse_scenario(source)), 15)
    files = write_report(result, tmp_path / "report")
    with files["csv"].open(newline="", encoding="utf-8") as file:
        [row] = list(csv.DictReader(file))
    assert row["text"] == "'=HYPERLINK(\"http://evil\")\n| two | cells ☕"  # not a formula
    table = files["table"].read_text(encoding="utf-8").splitlines()
    assert len(table) == 3  # the header, the rule, and one row on one line
    # Backslashes escaped first, so that no value can unescape a pipe.
    assert table[2] == (
        '|     1 | a$\\\\frac{1$b | =HYPERLINK("http://evil") \\| two \\| cells ☕ |'
    )
    assert files["chart"].stat().st_size > 0  # drawn: the $ are text, not TeX


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real command; killed if it outlives ``timeout`` (the test then fails)."""
    return subprocess.run([sys.executable, "-m", "strabo.cli", "simulate", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_an_output_folder_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path,
) -> None:
    (tmp_path / "s.toml").write_text(text())
    (tmp_path / "taken").write_text("a file")
    done = run_cli(str(tmp_path / "s.toml"), "--out", str(tmp_path / "taken"))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"strabo simulate: cannot write the report to {tmp_path / 'taken'}: "
                           "it is a file, not a folder\n")
    done = run_cli(str(tmp_path / "s.toml"), "--out", str(tmp_path / "taken" / "below"))
    assert done.returncode == 2 and "Not a directory" in done.stderr, done.stderr


def test_an_agent_that_always_acts_still_stops_the_run_at_its_budget(tmp_path: Path) -> None:
    # Its attempts finish without suspending; unless it yields, nothing else
    # runs: not the budget's stop, not the timeout, not Ctrl-C.
    (tmp_path / "s.toml").write_text(
        text(member=f"{HERE}:chatterbox", chair=f"{HERE}:lone_chair")
        .replace("timeout = 20", "timeout = 5\nmax_actions = 40"))
    done = run_cli(str(tmp_path / "s.toml"), "--quiet", "--out", str(tmp_path / "out"),
                   timeout=20)
    assert done.returncode == 0, done.stderr
    assert "Hostile: budget: 40 actions, the budget of 40" in done.stdout


async def test_ctrl_c_ends_the_run_and_still_writes_the_report(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(text(member=f"{HERE}:chatterbox", chair=f"{HERE}:lone_chair")
                        .replace("timeout = 20", "timeout = 60"))
    out = tmp_path / "report"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "strabo.cli", "simulate", str(scenario), "--quiet",
        "--out", str(out), cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line == b"posting\n"  # the run is under way
        proc.send_signal(signal.SIGINT)
        rest, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err
    assert b"Hostile: interrupted: interrupted by SIGINT" in rest
    trace = (out / "trace.jsonl").read_text().splitlines()
    assert len(trace) >= 2 and '"action": "Open"' in trace[0]
    assert "- ended: **interrupted**: interrupted by SIGINT" in (out / "report.md").read_text()
