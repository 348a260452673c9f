"""The verifier's budget in seconds (``max_seconds``, ``--max-seconds``) and its
progress lines (``--progress``, or stderr a terminal).

A long verification used to say nothing until it gave up at --max-states (the
market pattern at --sub-keys 4: 22 s of silence), and nothing bounded its time.
The budget is checked by verdict and message, never by timing: the protocol
here takes tens of seconds to explore, so a budget of a fraction of a second
runs out whatever the machine's load. Progress is checked with its thresholds
set to zero, so that it does not depend on how long anything takes either."""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import pytest

import langshaw.verify as verify_module
from langshaw import LangshawProtocol
from langshaw._verify_cli import summary
from langshaw._vmodel import SharedModel
from langshaw._vsearch import CHECK_EVERY, Search
from langshaw.verify import Progress, _abstract, verify
from strabo.cli import main
from tests.conftest import PROTOCOLS

MARKET = PROTOCOLS / "patterns" / "market.lsh"
PURCHASE = PROTOCOLS / "purchase.lsh"


@pytest.fixture(scope="module")
def market() -> LangshawProtocol:
    return LangshawProtocol.load(MARKET)


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from an empty folder: 'market' is the bundled protocol."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress from the start, at every reading of the clock."""
    monkeypatch.setattr(verify_module, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(verify_module, "PROGRESS_EVERY", 0.0)


@pytest.mark.parametrize("semantics", ["shared", "decentralized"])
def test_out_of_seconds_is_unknown_and_says_which_budget(
    market: LangshawProtocol, semantics: str
) -> None:
    report = verify(market, semantics=semantics, sub_keys=4, max_seconds=0.2)
    assert not report.complete and report.verdict == "unknown"
    assert report.ran_out == "max_seconds" and report.max_seconds == 0.2
    assert report.live is None and report.safe is None and report.dead is None
    assert 0 < report.states < verify_module.MAX_STATES  # how far it got, not the cap
    document = report.to_json()
    assert document["ran_out"] == "max_seconds" and document["explored_all"] is False


def test_out_of_states_still_names_the_state_budget(market: LangshawProtocol) -> None:
    report = verify(market, semantics="decentralized", sub_keys=4, max_states=50)
    assert report.verdict == "unknown" and report.ran_out == "max_states"
    assert report.states == 50


def test_a_run_within_its_budgets_ran_out_of_nothing() -> None:
    protocol = LangshawProtocol.load(PURCHASE)
    report = verify(protocol, semantics="decentralized", max_seconds=math.inf)
    assert report.complete and report.verdict == "unsafe" and report.ran_out is None
    assert report.to_json()["ran_out"] is None
    assert verify(protocol, semantics="decentralized", max_seconds=None).verdict == "unsafe"


@pytest.mark.parametrize("seconds", [0, -1.0, math.nan])
def test_a_budget_that_is_no_time_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="max_seconds must be a positive number"):
        verify(LangshawProtocol.load(PURCHASE), max_seconds=seconds)


def test_the_search_reads_the_clock_every_few_hundred_steps(market: LangshawProtocol) -> None:
    """A deadline already past stops the exploration at the first reading, not
    at the first step; progress hears each reading, with the states so far."""
    model = SharedModel(_abstract(market), 3, True, symmetry=True)
    heard: list[int] = []
    search = Search(model, reduce=True, max_states=10**6, deadline=0.0, progress=heard.append)
    assert search.explore() is False and search.ran_out == "seconds"
    assert search.transitions == CHECK_EVERY - 1  # the first state is a step too
    assert heard == []  # out of time: stopped before telling
    search = Search(model, reduce=True, max_states=10**6, progress=heard.append)
    assert search.explore() is True and search.ran_out is None
    assert len(heard) == (search.transitions + 1) // CHECK_EVERY >= 3
    assert heard == sorted(heard) and heard[0] > 0


def test_the_command_line_and_the_api_share_one_default_budget() -> None:
    from langshaw.cli import configure

    parser = argparse.ArgumentParser()
    configure(parser)
    parsed = parser.parse_args(["x.lsh"])
    assert parsed.max_seconds == verify_module.MAX_SECONDS == 60
    assert parsed.progress is False
    assert parser.parse_args(["--max-seconds", "inf", "x.lsh"]).max_seconds == math.inf
    assert parser.parse_args(["--max-seconds", "0.5", "x.lsh"]).max_seconds == 0.5


@pytest.mark.parametrize("value", ["0", "-2", "nan", "soon"])
def test_the_cli_refuses_a_bad_budget_in_one_line(
    value: str, elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--verify", "--max-seconds", value, "market"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("strabo check: argument --max-seconds: ") and err.count("\n") == 1


def test_the_cli_says_the_time_ran_out_and_what_to_raise(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["check", "--verify", "--sub-keys", "4", "--max-seconds", "0.2", "market"])
    assert status == 1
    out, err = capsys.readouterr()
    for semantics in ("shared", "decentralized"):
        assert re.search(
            rf"market\.lsh:1:1: {semantics}: not verified: out of time after 0\.2 s, \d+ "
            r"states explored \(raise --max-seconds, or lower --sub-keys\)\n", err
        ), err
        assert f"  {semantics}: unknown (" in out
    assert err.endswith("1 of 1 file(s) failed\n")
    assert "explored," not in err  # no progress: not asked for, not a terminal


def test_the_state_cap_message_is_unchanged(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--verify", "-q", "--max-states", "50", "--semantics",
                 "decentralized", "market"]) == 1
    assert "decentralized: not verified: more than 50 states (raise --max-states, or " \
        "lower --sub-keys)" in capsys.readouterr().err


def _timeless(out: str) -> str:
    return re.sub(r"\d+\.\d{3} s\)", "T s)", out)


VERIFY = ["check", "--verify", "--semantics", "shared", "--sub-keys", "3", "market"]


def test_progress_goes_to_stderr_and_leaves_stdout_as_it_was(
    elsewhere: Path, eager: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(VERIFY) == 0
    quiet_out, quiet_err = capsys.readouterr()
    assert "explored" not in quiet_err  # not a terminal, no --progress: nothing
    assert main([*VERIFY, "--progress"]) == 0
    out, err = capsys.readouterr()
    assert _timeless(out) == _timeless(quiet_out)
    lines = err.splitlines()
    assert len(lines) >= 3, err  # 980 transitions: one line at each reading
    for line in lines:
        assert re.fullmatch(
            r".*market\.lsh: shared: \d+ states explored, \d+\.\d s "
            r"\(gives up at 60000 states or 60 s\)", line
        ), line


def test_progress_is_on_by_default_when_stderr_is_a_terminal(
    elsewhere: Path, eager: None, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(VERIFY) == 0
    assert re.search(r"market\.lsh: shared: \d+ states explored", capsys.readouterr().err)


def test_a_quick_run_says_nothing_even_when_asked(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real thresholds: purchase is verified in hundredths of a second."""
    assert main(["check", "--verify", "-q", "--progress", "--semantics", "shared",
                 "purchase"]) == 0
    assert capsys.readouterr().err == ""


def test_progress_says_when_the_exploration_is_over_and_traces_are_sought(
    eager: None,
) -> None:
    heard: list[Progress] = []
    report = verify(LangshawProtocol.load(PURCHASE), semantics="decentralized",
                    max_seconds=30, progress=heard.append)
    assert report.verdict == "unsafe"
    (last,) = [p for p in heard if p.tracing]
    assert heard[-1] is last and last.states == report.states
    assert last.deadline is not None and 0 < last.deadline <= 30
    assert str(last).startswith(f"all {report.states} states explored in ")
    assert "looking for the shortest traces (at most until " in str(last)


def test_out_of_seconds_summary_is_unknown(market: LangshawProtocol) -> None:
    report = verify(market, semantics="shared", sub_keys=4, max_seconds=0.2)
    assert re.fullmatch(r"  shared: unknown \(\d+ states, \d+ transitions, sub-keys 4, "
                        r"\d+\.\d{3} s\)", summary(report))
