"""How long verification takes (docs/performance.md quotes these tables).

    .venv/bin/python bench/verify.py [--runs N] [--full] [--random N] [--seed S]

First every shipped protocol under both semantics: each time is the median of N
runs (default 5) of ``langshaw.verify.verify``, traces included. ``--full`` adds
the unreduced exploration (every interleaving and state, same cap) to show
what the reduction saves.

Then protocols whose trace searches grow exponentially (``chain(n)`` of
tests/langshaw/randproto.py): the searches must stop at their deadline.

Then ``--random N`` (default 100; 0 skips it) random protocols of 8 to 10
actions, two or three roles (the generator of tests/langshaw/randproto.py),
each verified once under both semantics: the slowest, how many took over 5 s
(the target is none), and on the unsafe ones how long finding the shortest
traces took against exploring (the target is at most 2x).
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
from langshaw.verify import MAX_STATES, SEMANTICS, verify  # noqa: E402
from tests.langshaw.randproto import chain, generate  # noqa: E402

LIMIT = 5.0  # seconds, for any protocol of at most 10 actions
TRACES = 2.0  # finding traces against exploring, on unsafe protocols


def shipped(runs: int, full: bool) -> None:
    print("| protocol | semantics | states | transitions | time (ms) | verdict |")
    print("|---|---|---:|---:|---:|---|")
    slowest = 0.0
    for path in sorted((ROOT / "protocols").glob("*.lsh")):
        protocol = LangshawProtocol.load(path)
        for semantics in SEMANTICS:
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                report = verify(protocol, semantics=semantics)
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            slowest = max(slowest, median)
            print(
                f"| {protocol.name} | {semantics} | {report.states} | {report.transitions} "
                f"| {median * 1000:.1f} | {report.verdict} |"
            )
            if full:
                started = time.perf_counter()
                unreduced = verify(protocol, semantics=semantics, reduce=False)
                took = time.perf_counter() - started
                states = f"{unreduced.states}" + ("" if unreduced.complete else " (cut)")
                print(
                    f"| {protocol.name} (unreduced) | {semantics} | {states} | "
                    f"{unreduced.transitions} | {took * 1000:.1f} | {unreduced.verdict} |"
                )
    print(f"\nslowest shipped: {slowest * 1000:.1f} ms (target: under 1 s each)")


def random_protocols(count: int, seed: int) -> bool:
    print(f"\n{count} random protocols of 8-10 actions (seed {seed}), both semantics:")
    rows = []
    for i, (text, protocol) in enumerate(generate(seed, count, actions=(8, 10)), 1):
        for semantics in SEMANTICS:
            report = verify(protocol, semantics=semantics)
            rows.append((report.seconds, report, text))
        if i % 25 == 0:
            print(f"  {i}/{count}", file=sys.stderr, flush=True)
    cut = [r for r in rows if not r[1].complete]
    rows = [r for r in rows if r[1].complete]
    times = sorted(r[0] for r in rows)
    over = [r for r in rows if r[0] > LIMIT]
    print(
        f"  verifications: {len(rows) + len(cut)}; {len(cut)} reached the state cap "
        f"({MAX_STATES:,}; at most {max((r[0] for r in cut), default=0):.1f} s to say so)"
    )
    print(
        f"  explored in full: {len(rows)}; seconds: median {statistics.median(times):.3f}, "
        f"90th percentile {times[int(len(times) * 0.9)]:.3f}, max {times[-1]:.3f}"
    )
    print(f"  over {LIMIT:.0f} s: {len(over)}")
    unsafe = [r[1] for r in rows if r[1].safe is False]
    ratios = sorted(
        (rep.trace_seconds / (rep.seconds - rep.trace_seconds), rep.seconds, rep.states)
        for rep in unsafe
        if rep.seconds - rep.trace_seconds > 0.05  # too quick to time a ratio
    )
    if ratios:
        worst = ratios[-1]
        print(
            f"  unsafe: {len(unsafe)}; of those explored in over 50 ms ({len(ratios)}), "
            f"finding traces took at most {worst[0]:.2f}x exploring (median "
            f"{statistics.median(r[0] for r in ratios):.2f}x; target {TRACES:.0f}x)"
        )
    slowest = max(rows, key=lambda r: r[0])
    print(
        f"  slowest: {slowest[0]:.2f} s, {slowest[1].states} states, {slowest[1].semantics}, "
        f"{slowest[1].verdict}:"
    )
    print("    " + slowest[2].rstrip().replace("\n", "\n    "))
    return not over and all(r[0] <= TRACES for r in ratios)


def chains() -> bool:
    """Protocols whose trace searches grow as 2^n (a role's step may take any set
    of the n deliveries in flight): the deadline must still hold."""
    print("\nchains (B's step may take any of 2^n sets of deliveries), decentralized:")
    held = True
    for n in (12, 16, 20):
        report = verify(LangshawProtocol.parse(chain(n)), semantics="decentralized")
        explore = report.seconds - report.trace_seconds
        bound = max(0.5, explore) + 0.25  # the deadline, and shortening the fallback
        held &= report.trace_seconds <= bound
        print(
            f"  n={n}: exploring {explore:.3f} s, traces {report.trace_seconds:.2f} s "
            f"(deadline {max(0.5, explore):.2f} s), shortest: {report.shortest}"
        )
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--full", action="store_true", help="also explore without reduction")
    parser.add_argument("--random", type=int, default=100, metavar="N")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    shipped(args.runs, args.full)
    held = chains()
    if args.random and not random_protocols(args.random, args.seed):
        sys.exit(1)
    if not held:
        sys.exit(1)


if __name__ == "__main__":
    main()
