"""How long verification takes: every shipped protocol under both semantics,
with and without the reduction (docs/performance.md quotes this table).

    .venv/bin/python bench/verify.py [--runs N] [--full]

Each time is the median of N runs (default 5) of ``langshaw.verify.verify``,
traces included. ``--full`` adds the unreduced exploration (every interleaving,
capped at 200,000 states) to show what the reduction saves.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langshaw import LangshawProtocol  # noqa: E402
from langshaw.verify import SEMANTICS, verify  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--full", action="store_true", help="also explore without reduction")
    args = parser.parse_args()
    print("| protocol | semantics | states | transitions | time (ms) | verdict |")
    print("|---|---|---:|---:|---:|---|")
    slowest = 0.0
    for path in sorted((ROOT / "protocols").glob("*.lsh")):
        protocol = LangshawProtocol.load(path)
        for semantics in SEMANTICS:
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                report = verify(protocol, semantics=semantics)
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            slowest = max(slowest, median)
            print(
                f"| {protocol.name} | {semantics} | {report.states} | {report.transitions} "
                f"| {median * 1000:.1f} | {report.verdict} |"
            )
            if args.full:
                started = time.perf_counter()
                full = verify(protocol, semantics=semantics, reduce=False)
                took = time.perf_counter() - started
                states = f"{full.states}" + ("" if full.complete else " (cut)")
                print(
                    f"| {protocol.name} (unreduced) | {semantics} | {states} | "
                    f"{full.transitions} | {took * 1000:.1f} | {full.verdict} |"
                )
    print(f"\nslowest: {slowest * 1000:.1f} ms (target: under 1 s each)")


if __name__ == "__main__":
    main()
