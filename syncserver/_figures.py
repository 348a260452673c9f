"""What the dashboard shows of the server's work: attempts per second, their
latency, and the last refusals, per MAS.

The server keeps no history of refusals (a refused attempt changes nothing), so
an operator could not see why agents are turned away; a bounded ring of the
last :data:`REFUSALS` per MAS shows it without growing. The counters are on the
hot path (every attempt, over POST or a channel): an attempt costs a few
additions into per-second buckets, and the reader of ``GET .../stats`` does the
arithmetic. Nothing here is durable: the figures start again with the server.
"""

from __future__ import annotations

import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from syncserver.errors import Rejected
    from syncserver.server import SyncServer

#: Refusals kept per MAS (the oldest is dropped first).
REFUSALS = 100
#: Seconds of per-second buckets kept; ``GET .../stats`` averages over WINDOW.
BUCKETS = 64
WINDOW = 10
#: Longest refusal message, action or attribute kept (each may quote what an
#: agent sent).
MAX_MESSAGE = 500


class _Counters:
    """One MAS's attempts: totals, and per-second buckets (count, refused,
    summed and largest latency) in a ring indexed by the second."""

    __slots__ = ("count", "latency", "peak", "refused", "second", "seconds", "total",
                 "total_refused")

    def __init__(self) -> None:
        self.total = 0
        self.total_refused = 0
        self.second = int(time.monotonic())
        self.seconds = [0] * BUCKETS  # which second each bucket holds now
        self.count = [0] * BUCKETS
        self.refused = [0] * BUCKETS
        self.latency = [0.0] * BUCKETS
        self.peak = [0.0] * BUCKETS

    def add(self, now: float, took: float, refused: bool) -> None:
        second = int(now)
        i = second % BUCKETS
        if self.seconds[i] != second:  # a bucket last used BUCKETS seconds ago or more
            self.seconds[i] = second
            self.count[i] = self.refused[i] = 0
            self.latency[i] = self.peak[i] = 0.0
        self.count[i] += 1
        self.latency[i] += took
        if took > self.peak[i]:
            self.peak[i] = took
        self.total += 1
        if refused:
            self.refused[i] += 1
            self.total_refused += 1

    def window(self, now: float, seconds: int) -> dict[str, Any]:
        """The figures of the last ``seconds`` whole seconds (this one excluded:
        it has only begun)."""
        last = int(now) - 1
        wanted = range(last - seconds + 1, last + 1)
        picked = [i for i in range(BUCKETS) if self.seconds[i] in wanted]
        count = sum(self.count[i] for i in picked)
        latency = sum(self.latency[i] for i in picked)
        return {
            "attempts_per_second": round(count / seconds, 3),
            "refused_per_second": round(sum(self.refused[i] for i in picked) / seconds, 3),
            "latency_ms": {
                "mean": round(latency / count * 1000, 3) if count else None,
                "max": round(max((self.peak[i] for i in picked), default=0.0) * 1000, 3)
                if count else None,
            },
        }


class Figures:
    """The counters and refusals of every MAS of one server."""

    def __init__(self, refusals: int = REFUSALS) -> None:
        self.started = time.time()
        self._counters: dict[str, _Counters] = {}
        self._refusals: dict[str, deque[dict[str, Any]]] = {}
        self._size = refusals

    def attempted(self, mas: str, started: float, refused: bool) -> None:
        """Count one attempt that began at ``started`` (``time.monotonic()``)."""
        counters = self._counters.get(mas)
        if counters is None:
            counters = self._counters[mas] = _Counters()
        now = time.monotonic()
        counters.add(now, now - started, refused)

    def refused(self, mas: str, protocol: str, agent: str, rejected: Rejected) -> None:
        """Keep a refusal: its rule, the action, who attempted it, the message."""
        ring = self._refusals.get(mas)
        if ring is None:
            ring = self._refusals[mas] = deque(maxlen=self._size)
        violation = rejected.violation
        ring.append(
            {
                "time": _iso(time.time()),
                "protocol": protocol,
                "agent": agent,
                "rule": violation.rule,
                # The action and attribute may be names the agent made up: cut too.
                "action": _cut(violation.action),
                "attribute": _cut(violation.attribute),
                "message": _cut(violation.message),
            }
        )

    def refusals(self, mas: str, agent: str | None = None) -> list[dict[str, Any]]:
        """The MAS's kept refusals, newest first; only ``agent``'s if given."""
        ring = self._refusals.get(mas, ())
        return [r for r in reversed(ring) if agent is None or r["agent"] == agent]

    def stats(self, mas: str, window: int = WINDOW) -> dict[str, Any]:
        counters = self._counters.get(mas) or _Counters()
        return {
            "attempts": counters.total,
            "refused": counters.total_refused,
            "window_seconds": window,
            **counters.window(time.monotonic(), window),
            "since": _iso(self.started),
        }


_FIGURES: weakref.WeakKeyDictionary[SyncServer, Figures] = weakref.WeakKeyDictionary()


def figures_of(server: SyncServer) -> Figures:
    """The figures of ``server`` (made on first use: the app asks at start)."""
    figures = _FIGURES.get(server)
    if figures is None:
        figures = _FIGURES[server] = Figures()
    return figures


def counted(server: SyncServer) -> Figures | None:
    """The figures of ``server`` if an app keeps them (the hot path's lookup)."""
    return _FIGURES.get(server)


def _cut(text: str | None) -> str | None:
    """``text`` within :data:`MAX_MESSAGE` characters, so the ring stays bounded."""
    if text is None or len(text) <= MAX_MESSAGE:
        return text
    return text[: MAX_MESSAGE - 3] + "..."


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
