"""The agent's end of a SyncServer channel (``syncserver/_channel.py``).

A channel is the event stream of one protocol, upgraded so that the agent also
writes its attempts on it, one JSON line each, and reads their answers among
the events. :class:`Line` is one open channel as the executor uses it: it
writes an attempt and waits for the answer that names its attempt id. When
the channel closes, every attempt still waiting fails with a
:class:`~peach._http1.TransportError`; the executor then resends it under the
same attempt id (over HTTP if no channel is open), which the server
recognizes, so nothing is finalized twice.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from peach._http1 import TransportError, _Connection

#: The ``Upgrade`` token the SyncServer knows channels by.
UPGRADE = "strabo-channel"
#: Statuses that mean the server has no channels (an older or differently
#: served SyncServer): the executor uses the event stream and POSTs instead.
UNSUPPORTED = frozenset({404, 405, 426, 501})
#: Attempts a SyncServer checks at once per channel (``syncserver._channel``);
#: a line sends no more than that, the others wait their turn.
MAX_IN_FLIGHT = 64


class Line:
    """One open channel: attempts out, answers matched to them by id."""

    def __init__(self, connection: _Connection) -> None:
        self.connection = connection
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._closed: str | None = None
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)

    def usable(self) -> bool:
        return self._closed is None and self.connection.usable()

    async def attempt(self, body: dict[str, Any]) -> dict[str, Any]:
        """Send an attempt (``body`` as for ``POST .../attempts``, with its
        ``attempt_id``); its answer, with the ``status`` an HTTP answer would have.
        The caller bounds the wait; the answer, if it comes later, is kept for a
        resend of the same attempt."""
        line = json.dumps(body, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        async with self._slots:  # past the server's bound it would answer 429
            if self._closed is not None:
                raise TransportError(self._closed)
            ident = body["attempt_id"]
            future = self._waiting.get(ident)
            if future is None or future.done():
                future = self._waiting[ident] = asyncio.get_running_loop().create_future()
            try:
                await self.connection.send(line)
                return await asyncio.shield(future)
            finally:
                if future.done() and self._waiting.get(ident) is future:
                    del self._waiting[ident]

    def answered(self, data: Any) -> None:
        """An ``answer`` event arrived."""
        ident = data.get("id") if isinstance(data, dict) else None
        # Popped, not read: an answer that comes after its attempt gave up waiting
        # frees its place too (a resend waits on the same future, or asks again).
        future = self._waiting.pop(ident, None) if isinstance(ident, str) else None
        if future is not None and not future.done():
            future.set_result(data)

    def close(self, reason: str) -> None:
        """The channel is gone: attempts still waiting fail (to be resent)."""
        if self._closed is None:
            self._closed = reason
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(TransportError(reason))
                future.exception()  # retrieved here: its waiter may have timed out
