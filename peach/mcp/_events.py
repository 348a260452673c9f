"""What happened since a role server started, for its ``wait_event`` tool.

An MCP client cannot be called back the way an adapter's handlers are: it asks.
So the server keeps, in order, what its adapter's listener saw (actions
finalized by anyone, actions newly enabled for the role, enactments completed),
each with the sequence number of its batch, and answers "what happened after
sequence number N", waiting for it if nothing has yet. The number is the
SyncServer's (or the peer's own log order), so a client that read an
enactment's ``history`` up to N can ask for what came after without a gap.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from typing import Any


class _Wait:
    """One wait in progress; ``ended`` when more recent ones pushed it out."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        self.ended = False


class EventLog:
    """The latest ``limit`` events, in sequence order; waiters woken on each batch."""

    def __init__(self, last: int = 0, limit: int = 10_000, max_waits: int = 64) -> None:
        self.last = last  # the highest sequence number seen (at start: the log's end)
        self.horizon = last  # events at or before this number are not kept
        self._events: deque[dict[str, Any]] = deque()
        self._limit = limit
        self._changed = asyncio.Event()
        self.closed = False
        # Waits in progress, oldest first. A client that goes away mid-wait is not
        # told to the server (its wait runs to its timeout), so their number is
        # bounded: past ``max_waits``, the oldest ends at once, with no events.
        self._waits: list[_Wait] = []
        self.max_waits = max_waits
        self.idle = asyncio.Event()  # set while no wait is in progress
        self.idle.set()

    @property
    def waiting(self) -> int:
        return len(self._waits)

    def add(self, seq: int, events: list[dict[str, Any]]) -> None:
        """Record one batch's events (all with ``seq``) and wake the waiters."""
        self.last = max(self.last, seq)
        for event in events:
            self._events.append({"seq": seq, **event})
        while len(self._events) > self._limit:
            self.horizon = max(self.horizon, self._events.popleft()["seq"])
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()  # the next wait waits for the next change

    def close(self) -> None:
        """The server is stopping: every wait ends now (and says so)."""
        self.closed = True
        self._wake()

    def since(self, after: int) -> list[dict[str, Any]]:
        return [e for e in self._events if e["seq"] > after]

    async def wait(self, after: int | None, seconds: float) -> dict[str, Any]:
        """The events after ``after`` (by default: the latest now, so the next
        ones), waiting up to ``seconds`` for at least one (a NaN is no time).
        Raises ``EOFError`` once the log is closed."""
        start = self.last if after is None else after
        deadline = time.monotonic() + (seconds if math.isfinite(seconds) and seconds > 0 else 0)
        mine = _Wait()
        self._waits.append(mine)
        self.idle.clear()
        if len(self._waits) > self.max_waits:
            self._waits.pop(0).ended = True
            self._wake()
        try:
            while True:
                if self.closed:
                    raise EOFError("the role server is stopping")
                found = self.since(start)
                remaining = deadline - time.monotonic()
                if found or remaining <= 0 or mine.ended:
                    break
                changed = self._changed
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    continue  # one more look, then the deadline ends the loop
        finally:
            self._waits = [w for w in self._waits if w is not mine]
            if not self._waits:
                self.idle.set()
        answer: dict[str, Any] = {
            "events": found,
            "last": max((e["seq"] for e in found), default=start),
            "timed_out": not found,
        }
        if mine.ended and not found:
            answer["ended"] = (
                f"more than {self.max_waits} waits at once: this one, the oldest, ended "
                "early; call wait_event again"
            )
        if start < self.horizon:
            answer["missed"] = (
                f"events up to {self.horizon} are no longer kept: read the history of "
                "the enactments concerned"
            )
        return answer
