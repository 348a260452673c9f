"""Which agents are connected to the server, and since when.

An agent is connected while it holds an event stream: that is how it hears of
what others do, so an agent without one cannot take part however often it
attempts. The table also bounds the streams per agent (a client that opens
streams in a loop would otherwise hold a task and a buffer for each) and is
what ``GET /mas/{mas}/agents`` and ``strabo inspect`` report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class _Connection:
    streams: dict[str, int] = field(default_factory=dict)  # protocol -> open streams
    since: float = 0.0  # wall-clock time the oldest open stream began
    last_attempt: float | None = None


class Presence:
    """Open event streams per (MAS, agent) and protocol, and attempts' times."""

    def __init__(self) -> None:
        self._table: dict[tuple[str, str], _Connection] = {}
        self._attempts: dict[tuple[str, str], float] = {}

    def streams(self, mas: str, agent: str) -> int:
        connection = self._table.get((mas, agent))
        return sum(connection.streams.values()) if connection else 0

    @property
    def total(self) -> int:
        return sum(sum(c.streams.values()) for c in self._table.values())

    def opened(self, mas: str, agent: str, protocol: str) -> None:
        connection = self._table.get((mas, agent))
        if connection is None:
            connection = self._table[(mas, agent)] = _Connection(since=time.time())
        connection.streams[protocol] = connection.streams.get(protocol, 0) + 1

    def closed(self, mas: str, agent: str, protocol: str) -> None:
        connection = self._table.get((mas, agent))
        if connection is None:
            return
        left = connection.streams.get(protocol, 1) - 1
        if left > 0:
            connection.streams[protocol] = left
        else:
            connection.streams.pop(protocol, None)
        if not connection.streams:
            del self._table[(mas, agent)]

    def attempted(self, mas: str, agent: str) -> None:
        self._attempts[(mas, agent)] = time.time()

    def describe(self, mas: str, agent: str) -> dict[str, object]:
        """What the agents listing says of one agent's connection."""
        connection = self._table.get((mas, agent))
        last = self._attempts.get((mas, agent))
        return {
            "connected": connection is not None,
            "streams": dict(sorted(connection.streams.items())) if connection else {},
            "connected_since": _iso(connection.since) if connection else None,
            "last_attempt": _iso(last) if last is not None else None,
        }


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
