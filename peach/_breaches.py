"""Must-always constraints, checked after each batch an adapter applies.

A role's must-always constraint (peach.roles) is not something an attempt can
be refused for: it is a condition the enactment should keep, which other
agents' actions may break. So it is checked after each batch, and a breach is
reported (counted, logged, told to the breach listeners) once, until it holds
again.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from peach._handlers import notify
from peach.roles import evaluate

# The adapter (peach.adapter imports this module, so it is not named here).
PeachAdapter = Any

log = logging.getLogger("strabo.peach")


def check_always(adapter: PeachAdapter, seq: int) -> None:
    """Report each must-always constraint that stops holding (once, until it
    holds again)."""
    assert adapter.spec is not None
    now: set[str] = set()
    failing: set[str] = set()
    for constraint in adapter.spec.must_always:
        name = constraint.name
        try:
            holds = evaluate(constraint.check, adapter)
        except Exception as exc:
            # Counted each time, logged once until it passes again; what was
            # known of it (breached or not) stands meanwhile.
            adapter.counters["constraint check errors"] += 1
            failing.add(name)
            if name not in adapter._check_failing:
                log.error("%s: must-always check %s failed: %s: %s",
                          adapter.name, name, type(exc).__name__, exc)
            if name in adapter._breaching:
                now.add(name)
            continue
        if holds:
            continue
        now.add(name)
        if name in adapter._breaching:
            continue
        adapter.counters["breaches"] += 1
        adapter.breaches.append({"constraint": name, "after_batch": seq})
        log.warning(
            "%s (%s): must-always constraint %r does not hold after batch %s: %s",
            adapter.name, adapter.role, name, seq, constraint.description,
        )
        # As other listeners (notify): over a copy, so one that adds itself runs
        # next time, and an async def one is refused (logged, counted), never
        # left unawaited; what fails is counted as a breach listener error.
        failed: Counter[str] = Counter()
        for listener in tuple(adapter.breach_listeners):
            notify(listener, (constraint,), f"{adapter.name} (breach)", failed)
        if failed["listener errors"]:
            adapter.counters["breach listener errors"] += failed["listener errors"]
    adapter._breaching = now
    adapter._check_failing = failing
