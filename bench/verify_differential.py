"""The verifier against a naive explorer of every interleaving, on thousands of
random protocols (tests/langshaw/test_differential.py runs a few hundred).

    .venv/bin/python bench/verify_differential.py [--count N] [--seed S] [--sub-keys K]

Each protocol is compared under both semantics on every verdict and on the
length of each shortest counterexample. Prints progress every 100 protocols,
then counts: compared, agreed, disagreed (the first few texts in full, and the
disagreements by what differed), skipped (the naive exploration exceeded its
cap) and unparsable. Exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langshaw import LangshawError, LangshawProtocol  # noqa: E402
from tests.langshaw.randproto import random_protocol  # noqa: E402
from tests.langshaw.test_differential import NAIVE_CAP, compare  # noqa: E402

SHOWN = 3  # disagreeing texts printed in full


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="protocols to generate")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sub-keys", type=int, default=2)
    parser.add_argument("--cap", type=int, default=NAIVE_CAP, help="naive exploration cap")
    parser.add_argument(
        "--no-collisions",
        dest="collisions",
        action="store_false",
        help="read sub-key values as fresh (verify(..., collisions=False))",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.perf_counter()
    counts: collections.Counter[str] = collections.Counter()
    categories: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    for n in range(1, args.count + 1):
        text = random_protocol(rng)
        try:
            protocol = LangshawProtocol.parse(text)
        except LangshawError:
            counts["unparsable"] += 1
            continue
        for semantics in ("shared", "decentralized"):
            outcome = compare(protocol, text, semantics, args.sub_keys, args.cap, args.collisions)
            if outcome.skipped:
                counts["skipped (cap)"] += 1
                continue
            counts["compared"] += 1
            if outcome.problem is None:
                counts["agreed"] += 1
                continue
            counts["disagreed"] += 1
            problems.append(outcome.problem)
            for category in outcome.categories:
                categories[f"{semantics}: {category}"] += 1
        if n % 100 == 0:
            print(
                f"{n} protocols, {counts['compared']} compared, {counts['disagreed']} "
                f"disagreed, {time.perf_counter() - started:.1f} s",
                flush=True,
            )
    for problem in problems[:SHOWN]:
        print("\n" + problem)
    print(f"\nprotocols: {args.count} (seed {args.seed}, sub-keys {args.sub_keys})")
    for name in ("compared", "agreed", "disagreed", "skipped (cap)", "unparsable"):
        print(f"{name}: {counts[name]}")
    for name, count in sorted(categories.items()):
        print(f"  {name}: {count}")
    print(f"{time.perf_counter() - started:.1f} s")
    return 1 if counts["disagreed"] else 0


if __name__ == "__main__":
    sys.exit(main())
