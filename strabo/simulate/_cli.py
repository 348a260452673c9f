"""``strabo simulate SCENARIO``: run a scenario and write its report."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from syncserver.options import count

DESCRIPTION = """\
Run a multiagent simulation from a scenario file (TOML): an embedded
SyncServer, the agents it lists (coded policies, or LLM agents with a persona
and a goal), until the protocol's stop condition: the enactment completes, a
round beyond the round limit opens, the action budget is used, or the timeout
passes. A progress bar counts the rounds. Then it writes a report:

  trace.jsonl    every finalized action, in log order
  outcomes.csv   one row per instance of [report] rows (e.g. one per seller
  outcomes.md      per round), as CSV and as a Markdown table
  chart.png      [report.chart]: y against x, a line per series
  report.md      how the run ended, who played, the table and the chart

SCENARIO is a file, or the name of a scenario shipped with the pattern
protocols (market, sequential, broadcast, queue, and market-llm, the market
with LLM sellers, which needs a provider's API key). For example:

  strabo simulate market --out market-report
  strabo simulate protocols/patterns/market.toml --rounds 12

runs three coded sellers (one keeps a fixed price, two undercut the cheapest
rival down to a floor, then start high again) and twelve buyers on the Market
pattern for twelve rounds, and charts each seller's price and balance per
round. docs/patterns.md describes the patterns and the scenario format.

Ctrl-C (or SIGTERM) ends the run early: the report is still written, with
what was finalized until then; a second Ctrl-C gives up on the report.

Exit status: 0 when a stop condition of the scenario ended the run
(complete, rounds, budget), 1 when it stalled, timed out or a policy failed,
2 for a scenario that cannot run (each problem as file:line: key: message) or
a report folder that cannot be written, 130 when interrupted.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", metavar="SCENARIO",
                        help="a scenario file, or a shipped scenario's name (e.g. market)")
    parser.add_argument("--out", metavar="DIR",
                        help="where to write the report (default: [report] output, "
                             "else SCENARIO-report in the working directory)")
    parser.add_argument("--rounds", type=count, metavar="N",
                        help="the round limit, instead of the scenario's [rounds] limit")
    parser.add_argument("--http", action="store_true",
                        help="serve the SyncServer on a loopback port and connect the agents "
                             "over HTTP (default: in process)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress bar and no table: just where the report is")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import dataclasses
    import logging

    from strabo.simulate import ScenarioError, bundled_scenario, load_scenario, simulate
    from strabo.simulate.report import markdown_table, outcome_rows, write_report

    logging.basicConfig(level=logging.WARNING, format="  ! %(name)s: %(message)s")
    path = Path(args.scenario)
    if not path.is_file() and "/" not in args.scenario and os.sep not in args.scenario:
        found = bundled_scenario(args.scenario)
        if found is None:
            print(f"strabo simulate: {_unknown(args.scenario)}", file=sys.stderr)
            return 2
        path = found
    try:
        scenario = load_scenario(path)
    except ScenarioError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 2
    if args.rounds is not None:
        if args.rounds < 1 or scenario.rounds is None:
            why = ("must be at least 1" if args.rounds < 1
                   else "the scenario has no [rounds] to limit")
            print(f"strabo simulate: --rounds {args.rounds}: {why}", file=sys.stderr)
            return 2
        scenario = dataclasses.replace(
            scenario, rounds=dataclasses.replace(scenario.rounds, limit=args.rounds))
    out = Path(args.out) if args.out else scenario.default_output()
    problem = _unwritable(out)
    if problem:
        print(f"strabo simulate: cannot write the report to {out}: {problem}", file=sys.stderr)
        return 2
    try:
        result = asyncio.run(simulate(scenario, progress=not args.quiet, http=args.http or None,
                                      interruptible=True))
    except KeyboardInterrupt:
        print("strabo simulate: interrupted again; no report written", file=sys.stderr)
        return 130
    except Exception as exc:  # the run could not start or went wrong beyond a policy
        print(f"strabo simulate: the run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    try:
        written = write_report(result, out)
    except OSError as exc:
        print(f"strabo simulate: {result.reason}: {result.detail}", file=sys.stderr)
        print(f"strabo simulate: cannot write the report to {out}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    print(f"{scenario.name}: {result.reason}: {result.detail}")
    print(f"  {len(result.trace)} actions, {result.rounds_ended} rounds ended, "
          f"{result.seconds:.1f} s")
    rows = outcome_rows(result)
    if rows and not args.quiet:
        shown = markdown_table(scenario.report.columns, rows[:40]).rstrip("\n")
        print("\n" + "\n".join("  " + line for line in shown.splitlines()))
        if len(rows) > 40:
            print(f"  ... {len(rows) - 40} more rows in {written['table']}")
    print(f"\nreport in {out}/: " + ", ".join(p.name for p in written.values()))
    if result.reason == "interrupted":
        return 130
    return 0 if result.ok else 1


def _unknown(name: str) -> str:
    """Why a bare name runs nothing: a typo of a shipped name is likelier than a
    missing file, so the shipped names are the help (read from the installed
    folder, so that a scenario added there is listed without a change here)."""
    from syncserver.bundled import scenario_names

    shipped = ", ".join(scenario_names()) or "none: this installation has no patterns folder"
    return (f"{name!r} is neither a scenario file nor a scenario shipped with strabo "
            f"(shipped: {shipped})")


def _unwritable(out: Path) -> str | None:
    """Why the report folder cannot be written, checked before the run (a run
    may take minutes; its report should not be lost to a typo)."""
    if out.exists() and not out.is_dir():
        return "it is a file, not a folder"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return exc.strerror or str(exc)
    if not os.access(out, os.W_OK | os.X_OK):
        return "the folder is not writable"
    return None
