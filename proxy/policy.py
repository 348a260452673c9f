"""The failure policy of a route: how long to insist, and what to say when it fails.

A request that fails in a way a retry may fix (no answer, a timeout, 408, 429 or
a 5xx: ``syncserver.retry``) is sent again under the **same idempotency key**,
with exponential back-off and jitter (``syncserver.retry.Backoff``),
``Retry-After`` honoured up to ``max_delay``, at most ``retries`` times and
never starting a try after ``budget`` seconds. Both bounds matter: a
merchant that keeps failing must turn into an answer (a failure action, or an
``on_error`` call) in bounded time, or the agents waiting for it hang.

What happens next is the route's ``failure`` (an action of the proxy's role,
bound from the error) or, when there is none or it cannot be performed, the
adapter's ``on_error`` handlers. Everything here is checked when the route is
declared, so a typo surfaces at start-up, not at the first outage.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from email.utils import parsedate_to_datetime
from typing import Any

from langshaw import ActionInstance, LangshawProtocol
from strabo.proxy.errors import ProxyError, RouteError
from syncserver.client import Answer
from syncserver.retry import Backoff

FailureFunction = Callable[[ProxyError, ActionInstance], Mapping[str, Any] | None]
"""``fn(error, trigger) -> bindings`` of the failure action, or None for none
(the error then goes to the ``on_error`` handlers)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How a route insists before it gives up.

    ``retries``: resends after the first try (0: no retry). ``backoff``: the first
    delay in seconds, doubled at each retry and capped at ``max_delay``, less up
    to a quarter at random (``syncserver.retry.Backoff``).
    ``max_delay``: the longest single wait; a ``Retry-After`` asking for longer
    ends the retries at once (waiting less would only earn another 429).
    ``budget``: no try starts more than this many seconds after the first, so a
    failure is known within ``budget`` plus one request timeout.
    """

    retries: int = 3
    backoff: float = 0.1
    max_delay: float = 10.0
    budget: float = 30.0

    def __post_init__(self) -> None:
        for setting in fields(self):
            _check(setting.name, getattr(self, setting.name), "RetryPolicy")

    def with_overrides(self, overrides: Mapping[str, Any]) -> RetryPolicy:
        return replace(self, **overrides) if overrides else self

    def next_delay(
        self, attempt: int, elapsed: float, retry_after: float | None
    ) -> tuple[float, str | None]:
        """After failed try number ``attempt`` (1 for the first), ``elapsed``
        seconds after the first began: the delay before the next try, or a reason
        to stop now."""
        if attempt > self.retries:
            return 0.0, "retries exhausted" if self.retries else "retries disabled"
        if retry_after is not None and retry_after > self.max_delay:
            return 0.0, f"Retry-After {retry_after:g} s exceeds max_delay {self.max_delay:g} s"
        delay = Backoff(self.backoff, self.max_delay).delay(attempt)
        if retry_after is not None:
            delay = max(delay, retry_after)
        if elapsed + delay > self.budget:
            return 0.0, f"retry budget of {self.budget:g} s spent"
        return delay, None


def overrides(where: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The per-route settings given (not None), each checked like RetryPolicy's."""
    known = {f.name for f in fields(RetryPolicy)}
    checked: dict[str, Any] = {}
    for name, value in given.items():
        if value is None:
            continue
        if name not in known:  # pragma: no cover - callers pass RetryPolicy's names only
            raise RouteError(f"{where}: unknown retry setting {name!r}")
        _check(name, value, where)
        checked[name] = value
    return checked


def _check(name: str, value: Any, where: str) -> None:
    label = "retry_budget" if name == "budget" and where != "RetryPolicy" else name
    if name == "retries":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RouteError(f"{where}: retries must be an integer >= 0, not {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RouteError(f"{where}: {label} must be a finite number of seconds, not {value!r}")
    if name == "backoff" and value < 0:
        raise RouteError(f"{where}: backoff must be >= 0 seconds, not {value!r}")
    if name in ("max_delay", "budget") and value <= 0:
        raise RouteError(f"{where}: {label} must be > 0 seconds, not {value!r}")


def check_timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise RouteError(f"timeout must be a positive number of seconds, not {value!r}")
    if not math.isfinite(value):
        raise RouteError("timeout must be finite: a request that never ends hangs its trigger")
    return float(value)


def retry_after(response: Answer, now: float | None = None) -> float | None:
    """The ``Retry-After`` of an answer in seconds (delta or HTTP date), or None."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def unreachable_failure(
    protocol: LangshawProtocol, trigger: str, failure: str, where: str, kind: str = "failure"
) -> None:
    """Refuse a failure action (or, ``kind="response"``, a response action) that
    can never follow the trigger: one the trigger depends on (it has happened by
    then), or one the trigger, or an action it depends on, excludes (nono, nogo).
    SimpleUCP's ``Failed`` on ``Complete`` is one: Complete needs Created, and
    Created excludes Failed.
    Only actions in the root scope are judged here (every instance of the
    enactment is correlated with them); the others are left to the attempt, whose
    refusal sends the error to ``on_error``."""
    actions = protocol.actions
    if trigger not in actions or not set(actions[failure].keys) <= set(protocol.root_keys):
        # A failure action with keys of its own (a version) may be performed in a
        # scope the exclusion does not reach: only the attempt can tell.
        return
    before: list[str] = []
    pending = [trigger]
    while pending:
        name = pending.pop()
        if name in before:
            continue
        before.append(name)
        pending.extend(actions[name].dependencies)
    what = f"{kind} action {failure} can never follow {trigger}"
    advice = "; route the failure to on_error instead (no failure=)" if kind == "failure" else ""
    if failure in before:
        raise RouteError(
            f"{where}: {what}: {trigger} depends on {failure}, so {failure} has happened by "
            f"then{advice}"
        )
    for name in before:
        for group in protocol.nono:
            if name in group and failure in group and name != failure:
                raise RouteError(
                    f"{where}: {what}: {_needs(trigger, name)}{name} excludes {failure} "
                    f"(nono){advice}"
                )
        for blocker, blocked in protocol.nogo:
            if blocker == name and blocked == failure:
                raise RouteError(
                    f"{where}: {what}: {_needs(trigger, name)}{name} -/> {failure} (nogo){advice}"
                )


def _needs(trigger: str, name: str) -> str:
    return "" if name == trigger else f"{trigger} depends on {name}, and "
