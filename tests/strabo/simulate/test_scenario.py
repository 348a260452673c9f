"""Scenario files: every mistake reported at its line with its key path, and
``strabo simulate`` from the command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from strabo.simulate import ScenarioError, bundled_scenario, load_scenario, parse_scenario
from strabo.simulate._llm import goal_of, llm_agent
from tests.conftest import PROTOCOLS

PATTERNS = PROTOCOLS / "patterns"
GOOD = (PATTERNS / "sequential.toml").read_text()


def problems(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, source="s.toml", base=PATTERNS)
    return caught.value.problems


def line(text: str, start: str) -> int:
    return next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith(start))


def test_a_toml_syntax_error_is_located() -> None:
    text = GOOD.replace('role = "Second"', 'role = "Second')
    [problem] = problems(text)
    at = line(text, 'role = "Second')
    assert problem.startswith(f"s.toml:{at}:")
    assert "not valid TOML" in problem


def test_wrong_settings_are_each_reported_at_their_line() -> None:
    text = (GOOD.replace('role = "Third"', 'role = "Thrid"')
            .replace("limit = 3", "limit = 0")
            .replace('end = "Say3"', 'end = "Say4"')
            .replace('policy = "strabo.simulate.policies.sequential:speaker"\n'
                     'params = { stance = "amends" }',
                     'policy = "strabo.simulate.policies.sequential:talker"'))
    found = problems(text)
    policy = line(text, 'policy = "strabo.simulate.policies.sequential:talker')
    role = line(text, 'role = "Thrid')
    assert found == [  # in the order of the file
        f"s.toml:{line(text, 'end = ')}: rounds.end: 'Say4' is not an action of Sequential "
        "(Open, Say1, Say2, Say3, Closed); did you mean 'Say3'?",
        f"s.toml:{line(text, 'limit = ')}: rounds.limit: must be a positive integer, not 0",
        f"s.toml:{policy}: agents.bob.policy: module 'strabo.simulate.policies.sequential' "
        "has no 'talker'",
        f"s.toml:{role}: agents.cat.role: 'Thrid' is not a role of Sequential (Chair, First, "
        "Second, Third); did you mean 'Third'?",
    ]


def test_unknown_keys_missing_roles_and_bad_report_columns() -> None:
    text = GOOD.replace("[stop]\ntimeout = 60", "[stop]\ntimout = 60").replace(
        '[agents.cat]\nrole = "Third"\npolicy = "strabo.simulate.policies.sequential:speaker"\n'
        'params = { stance = "sums up" }\n', "")
    found = problems(text)
    assert found == [
        f"s.toml:{line(text, 'timout')}: stop.timout: unknown setting (did you mean "
        "'timeout'? known: max_actions, timeout, policy_timeout)",
        "s.toml:" + str(line(text, "[agents.chair]")) + ": agents: no agent plays Third "
        "(add an [agents.NAME] table with role = 'Third')",
    ]
    chart = GOOD + '\n[report.chart]\nx = "round"\ny = "price"\n'
    assert problems(chart) == [
        f"s.toml:{line(chart, 'y = ')}: report.chart.y: 'price' is not a column of the "
        "table (round, topic, said1, said2, said3)"]


def test_a_policy_beside_the_scenario_can_be_named(tmp_path: Path) -> None:
    (tmp_path / "my_chair_policy.py").write_text(
        "from strabo.simulate.policies.sequential import chair\n")
    text = GOOD.replace('protocol = "sequential.lsh"', f'protocol = "{PATTERNS}/sequential.lsh"')
    text = text.replace("strabo.simulate.policies.sequential:chair", "my_chair_policy:chair")
    (tmp_path / "s.toml").write_text(text)
    loaded = load_scenario(tmp_path / "s.toml")
    assert loaded.agents[0].policy == "my_chair_policy:chair"


def test_an_llm_agent_is_a_goal_and_a_persona() -> None:
    text = GOOD.replace(
        '[agents.cat]\nrole = "Third"\npolicy = "strabo.simulate.policies.sequential:speaker"\n'
        'params = { stance = "sums up" }\n',
        '[agents.cat]\nrole = "Third"\nkind = "llm"\npersona = "A careful editor."\n'
        'goal = "Sum up what the others said."\nmodel = "claude-test"\nmax_calls = 7\n')
    loaded = parse_scenario(text, base=PATTERNS)
    spec = loaded.agents[-1]
    assert (spec.kind, spec.model, spec.max_calls) == ("llm", "claude-test", 7)
    goal = goal_of(spec, "cat", loaded, loaded.population())
    assert goal.startswith("You are cat, playing Third in Sequential.\n\nA careful editor.")
    assert "Your goal: Sum up what the others said." in goal
    assert "The simulation runs 3 rounds (key 'round')." in goal
    assert "Chair: chair; First: ann; Second: bob; Third: cat" in goal
    from peach import LocalExecutor, PeachAdapter
    from syncserver.server import SyncServer

    server = SyncServer.embedded([loaded.protocol], {"cat": ["Third"]})
    adapter = PeachAdapter("cat", loaded.protocol, "Third", LocalExecutor(server))
    agent = llm_agent(spec, adapter, loaded, loaded.population())
    assert (agent.goal, agent.model, agent.adapters) == (goal, "claude-test", [adapter])
    assert problems(text.replace('goal = "Sum up what the others said."\n', "")) == [
        f"s.toml:{line(text, '[agents.cat]')}: agents.cat.goal: missing: it is required"]


def strabo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strabo.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_strabo_simulate_runs_a_shipped_scenario_by_name(tmp_path: Path) -> None:
    assert bundled_scenario("queue").resolve() == PATTERNS / "queue.toml"
    result = strabo("simulate", "sequential", "--out", "rep", "--rounds", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Sequential: three speakers in turn: complete: ")
    assert "| 2 | the schedule | ann proposes on 'the schedule' (round 2) |" in re.sub(
        " +", " ", result.stdout  # cells are padded
    )
    written = sorted(p.name for p in (tmp_path / "rep").iterdir())
    assert written == ["outcomes.csv", "outcomes.md", "report.md", "trace.jsonl"]
    assert len((tmp_path / "rep" / "outcomes.csv").read_text().splitlines()) == 1 + 2


def test_strabo_simulate_refuses_a_bad_scenario_with_status_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[scenario]\nprotocol = "nowhere.lsh"\n[agents.a]\nrole = "X"\n'
                   'policy = "x:y"\n')
    result = strabo("simulate", str(bad), cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[0] == (
        f"{bad}:2: scenario.protocol: no protocol file 'nowhere.lsh' (relative to "
        f"{tmp_path}), nor a bundled protocol of that name")
    assert f"{bad}:5: agents.a.policy: cannot import 'x': No module named 'x'" in result.stderr
    assert strabo("simulate", "nonesuch", cwd=tmp_path).returncode == 2


def test_strabo_simulate_help_shows_an_example(tmp_path: Path) -> None:
    result = strabo("simulate", "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "strabo simulate market --out market-report" in result.stdout
    assert "Exit status: 0 when a stop condition" in result.stdout
