"""The agent's end of a SyncServer channel (``syncserver/_channel.py``).

A channel is the event stream of one protocol, upgraded so that the agent also
writes its attempts on it, one JSON line each, and reads their answers among
the events. :class:`Line` is one open channel as the executor uses it: it
writes an attempt and waits for the answer that names its attempt id. The
server leaves the batch of an attempt in flight out of the stream, since the
answer carries it: the reader turns the answer into the batch and applies it
in its place, before any later batch of the stream. When
the channel closes, every attempt still waiting fails with a
:class:`~syncserver.http1.TransportError`; the executor then resends it under the
same attempt id (over HTTP if no channel is open), which the server
recognizes, so nothing is finalized twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from syncserver.batch import Batch
from syncserver.http1 import Connection, TransportError

#: Makes the batch an attempt's answer describes (its instances, the others').
Builder = Callable[[dict[str, Any]], Batch]

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

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._waiting: dict[str, asyncio.Future[tuple[dict[str, Any], Batch | None]]] = {}
        self._builders: dict[str, Builder] = {}
        self._closed: str | None = None
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)

    def usable(self) -> bool:
        return self._closed is None and self.connection.usable()

    async def attempt(
        self, body: dict[str, Any], build: Builder
    ) -> tuple[dict[str, Any], Batch | None]:
        """Send an attempt (``body`` as for ``POST .../attempts``, with its
        ``attempt_id``); its answer, with the ``status`` an HTTP answer would have,
        and for a finalized attempt the batch ``build`` made of it. The caller
        bounds the wait; the answer, if it comes later, is kept for a resend of
        the same attempt."""
        line = json.dumps(body, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        async with self._slots:  # past the server's bound it would answer 429
            if self._closed is not None:
                raise TransportError(self._closed)
            ident = body["attempt_id"]
            future = self._waiting.get(ident)
            if future is None or future.done():
                future = self._waiting[ident] = asyncio.get_running_loop().create_future()
            self._builders[ident] = build
            try:
                await self.connection.send(line)
                return await asyncio.shield(future)
            finally:
                if future.done() and self._waiting.get(ident) is future:
                    del self._waiting[ident]
                if ident not in self._waiting:
                    self._builders.pop(ident, None)

    def answered(self, data: Any) -> Batch | None:
        """An ``answer`` event arrived: the batch it describes, if it finalized
        an attempt of this line (the reader applies it before reading on)."""
        ident = data.get("id") if isinstance(data, dict) else None
        if not isinstance(ident, str):
            return None
        # Popped, not read: an answer that comes after its attempt gave up waiting
        # frees its place too (a resend waits on the same future, or asks again).
        future = self._waiting.pop(ident, None)
        build = self._builders.pop(ident, None)
        batch = None
        if build is not None and data.get("status") == 200:
            try:
                batch = build(data)
            except Exception as exc:  # a malformed answer: the attempt says so
                if future is not None and not future.done():
                    future.set_exception(exc)
                return None
        if future is not None and not future.done():
            future.set_result((data, batch))
        return batch

    def close(self, reason: str) -> None:
        """The channel is gone: attempts still waiting fail (to be resent)."""
        if self._closed is None:
            self._closed = reason
        waiting, self._waiting = self._waiting, {}
        self._builders.clear()
        for future in waiting.values():
            if not future.done():
                future.set_exception(TransportError(reason))
                future.exception()  # retrieved here: its waiter may have timed out
