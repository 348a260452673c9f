"""enabled() against history: prints its figures (docs/performance.md quotes them).

    .venv/bin/python bench/enabled.py            # 10, 100 and 1000 versions
    .venv/bin/python bench/enabled.py --quick    # fewer samples

One IncrementalUCP enactment (protocols/incremental-ucp.lsh) with 10, 100 and
1000 versions (each an Update and its Updated), side by side in one run, and
``SocialState.enabled("Platform", root)`` on it:

* after a change: the call that follows one new instance, the common case (an
  agent asks what it may do after each step). The changes alternate between a
  new version (Update), a step in an existing version (SetBuyer) and the
  undoing of either (``SocialState.undo``), the state staying the same size;
* unchanged: the call repeated with nothing applied in between;
* first call: on a state just built, the whole enactment to decide.

The entries returned grow with the versions (six of Platform's actions stay
enabled in each version): that is the answer's size, not the cost of finding
it. The target is on the call after a change: at most 3x from 10 to 1000
versions.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langshaw import ActionInstance, LangshawProtocol, SocialState  # noqa: E402

PROTOCOL = ROOT / "protocols" / "incremental-ucp.lsh"
ROOT_KEY = ("e1",)
ITEMS = [{"item": {"id": "sku-1"}, "quantity": 1}]


def instance(protocol: LangshawProtocol, name: str, **bindings: Any) -> ActionInstance:
    return ActionInstance(protocol.action(name), bindings)


def built(protocol: LangshawProtocol, versions: int) -> SocialState:
    """One enactment: Create, Created, then ``versions`` Update/Updated pairs."""
    p = protocol
    state = SocialState(p)
    state.apply(
        [
            instance(
                p, "Create", eid="e1", line_items=ITEMS, currency="USD", payment={"handlers": []}
            ),
            instance(p, "Created", eid="e1", Create=True, id="chk", messages=[]),
        ]
    )
    for i in range(versions):
        state.apply(
            [
                instance(
                    p,
                    "Update",
                    eid="e1",
                    v=f"v{i}",
                    Created=True,
                    id="chk",
                    line_items=ITEMS,
                    currency="USD",
                ),
                instance(
                    p, "Updated", eid="e1", v=f"v{i}", Update=True, line_items=ITEMS, messages=[]
                ),
            ]
        )
    return state


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def after_change(state: SocialState, versions: int, samples: int) -> float:
    """Median seconds of enabled() right after one instance is applied or undone."""
    p = state.protocol
    rng = random.Random(versions)
    enabled = lambda: state.enabled("Platform", ROOT_KEY)  # noqa: E731
    enabled()
    enabled()  # (a state keeps its answer up to date from the second call on)
    times = []
    for n in range(samples):
        if n % 2:
            change = instance(
                p,
                "Update",
                eid="e1",
                v=f"new{n}",
                Created=True,
                id="chk",
                line_items=ITEMS,
                currency="USD",
            )
        else:
            change = instance(
                p,
                "SetBuyer",
                eid="e1",
                v=f"v{rng.randrange(versions)}",
                Created=True,
                id="chk",
                buyer={"email": "a@b.c"},
            )
        journal: list[Any] = []
        state.apply([change], journal)
        times.append(timed(enabled))
        state.undo(journal)
        times.append(timed(enabled))
    return statistics.median(times)


def unchanged(state: SocialState, samples: int) -> float:
    state.enabled("Platform", ROOT_KEY)
    state.enabled("Platform", ROOT_KEY)
    return statistics.median(
        timed(lambda: state.enabled("Platform", ROOT_KEY)) for _ in range(samples)
    )


def first_call(protocol: LangshawProtocol, versions: int, runs: int) -> float:
    times = []
    for _ in range(runs):
        state = built(protocol, versions)
        gc.collect()  # the garbage of building it is not the call's
        times.append(timed(lambda s=state: s.enabled("Platform", ROOT_KEY)))  # type: ignore[misc]
    return statistics.median(times)


def main(quick: bool) -> None:
    protocol = LangshawProtocol.load(PROTOCOL)
    sizes = (10, 100, 1000)
    samples = 100 if quick else 500
    runs = 3 if quick else 9
    print(f"enabled('Platform', root), one {protocol.name} enactment, median of each")
    print(
        f"{'versions':>8}  {'entries':>7}  {'after a change':>14}  {'unchanged':>10}  "
        f"{'first call':>10}"
    )
    figures: dict[int, tuple[float, float, float]] = {}
    for versions in sizes:
        state = built(protocol, versions)
        entries = len(state.enabled("Platform", ROOT_KEY))
        changed = after_change(state, versions, samples)
        same = unchanged(state, samples)
        first = first_call(protocol, versions, runs)
        figures[versions] = (changed, same, first)
        print(
            f"{versions:>8}  {entries:>7}  {changed * 1e6:11.1f} us  {same * 1e6:7.1f} us  "
            f"{first * 1e6:7.0f} us"
        )
    small, large = figures[sizes[0]], figures[sizes[-1]]
    print(
        f"ratio {sizes[-1]}/{sizes[0]}: after a change {large[0] / small[0]:.2f}x "
        f"(target <= 3x), unchanged {large[1] / small[1]:.2f}x, "
        f"first call {large[2] / small[2]:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    main(parser.parse_args().quick)
