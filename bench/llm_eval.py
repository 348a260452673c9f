"""LLM agent evaluation: Ahoy's scenarios on strabo, against the real Anthropic API.

    ANTHROPIC_API_KEY=... .venv/bin/python bench/llm_eval.py            # all, once
    .venv/bin/python bench/llm_eval.py --scenario purchase --runs 3
    .venv/bin/python bench/llm_eval.py --model claude-haiku-4-5 --json out.json
    .venv/bin/python bench/llm_eval.py --recorded    # offline: the tests' recorded answers

Each scenario (samples/llm/scenarios.py) runs one LLM agent against coded
counterparts on an embedded SyncServer; the UCP one also runs the bundled
merchant and the Business proxy over loopback HTTP. For each run it reports:
success (judged on the finalized log, not on what the model said), LLM calls,
actions attempted, rejected attempts, protocol violations accepted (the log is
replayed through the semantics from scratch: must be 0), tokens and wall time.

--recorded replays tests/fixtures/llm instead of calling the API: it checks the
harness, not the model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

from peach.llm import DEFAULT_MODEL, Budget  # noqa: E402
from samples.llm.scenarios import SCENARIOS, Outcome  # noqa: E402


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run the LLM agent scenarios and report how they went.",
        epilog="Without ANTHROPIC_API_KEY (and without --recorded) nothing runs.",
    )
    parser.add_argument(
        "--scenario", action="append", choices=sorted(SCENARIOS), metavar="NAME",
        help=f"a scenario to run (repeatable; default all: {', '.join(SCENARIOS)})",
    )
    parser.add_argument("--runs", type=int, default=1, help="runs per scenario (default 1)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"default {DEFAULT_MODEL}")
    parser.add_argument("--max-calls", type=int, default=20, help="per run (default 20)")
    parser.add_argument("--max-seconds", type=float, default=180, help="per run (default 180)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--transcripts", metavar="DIR", help="save each run's transcript there")
    parser.add_argument("--recorded", action="store_true",
                        help="replay the tests' recorded answers instead of calling the API")
    return parser.parse_args()


def client_for(name: str, recorded: bool) -> Any:
    if not recorded:
        import anthropic

        return anthropic.AsyncAnthropic()
    from tests.llm.fake import FakeModel, load

    return FakeModel(load(name)).client()


async def run_one(name: str, args: argparse.Namespace, n: int) -> dict[str, Any]:
    options: dict[str, Any] = {
        "client": client_for(name, args.recorded),
        "model": args.model,
        "budget": Budget(max_calls=args.max_calls, max_seconds=args.max_seconds),
    }
    if args.transcripts:
        options["transcript"] = Path(args.transcripts) / f"{name}-{n}.json"
    started = time.monotonic()
    try:
        outcome: Outcome = await SCENARIOS[name].run(**options)
    except Exception as exc:  # a harness failure is a result too, not a crash of the table
        return {"scenario": name, "run": n, "success": False, "detail": f"{type(exc).__name__}: "
                f"{exc}", "calls": 0, "attempted": 0, "rejected": 0, "violations": 0,
                "tokens": 0, "seconds": time.monotonic() - started}
    report = outcome.report
    return {
        "scenario": name,
        "run": n,
        "success": outcome.success,
        "detail": outcome.detail,
        "calls": report.llm_calls,
        "attempted": outcome.attempted,
        "rejected": report.rejections,
        "violations": outcome.violations,
        "tokens": report.input_tokens + report.output_tokens,
        "seconds": time.monotonic() - started,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'scenario':<18} {'run':>3} {'ok':>3} {'calls':>5} {'attempted':>9} "
            f"{'rejected':>8} {'violations':>10} {'tokens':>7} {'seconds':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['scenario']:<18} {r['run']:>3} {'yes' if r['success'] else 'NO':>3} "
            f"{r['calls']:>5} {r['attempted']:>9} {r['rejected']:>8} {r['violations']:>10} "
            f"{r['tokens']:>7} {r['seconds']:>7.1f}"
        )
    ok = sum(r["success"] for r in rows)
    lines.append("-" * len(head))
    lines.append(
        f"{ok}/{len(rows)} runs succeeded; {sum(r['calls'] for r in rows)} LLM calls; "
        f"{sum(r['rejected'] for r in rows)} rejected attempts; "
        f"{sum(r['violations'] for r in rows)} protocol violations accepted"
    )
    for r in rows:
        if not r["success"]:
            lines.append(f"  {r['scenario']} run {r['run']}: {r['detail']}")
    return "\n".join(lines)


async def run_all(names: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        for n in range(1, args.runs + 1):
            rows.append(await run_one(name, args, n))
            print(f"  {name} run {n}: {'ok' if rows[-1]['success'] else 'FAILED'}", flush=True)
    return rows


def main() -> int:
    args = arguments()
    if not args.recorded and not os.environ.get("ANTHROPIC_API_KEY"):
        print("llm_eval: set ANTHROPIC_API_KEY to run against the API (or --recorded to "
              "replay the recorded answers offline)", file=sys.stderr)
        return 2
    if args.transcripts:
        Path(args.transcripts).mkdir(parents=True, exist_ok=True)
    names = args.scenario or list(SCENARIOS)
    mode = "recorded answers" if args.recorded else f"model {args.model}"
    print(f"LLM agent evaluation: {len(names)} scenario(s) x {args.runs} run(s), {mode}\n")
    rows = asyncio.run(run_all(names, args))
    print()
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"model": mode, "runs": rows}, indent=2))
    violations = sum(r["violations"] for r in rows)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
