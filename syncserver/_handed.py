"""What a protocol that takes a connection over from the guard shares: a
channel (``syncserver._channel``) and an event stream written straight to its
socket (``syncserver._rawstream``).

Both write what the server has for a client that may read slowly or not at
all: past the transport's high-water mark they write nothing more (what is
left waits in the subscriber's bounded backlog, and ``drained`` says when to go
on), and a client that reads nothing for ``write_timeout`` seconds is dropped.
Both leave the server's set of connections when theirs is lost, and say so
once (``on_close``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from syncserver.limits import Limits

log = logging.getLogger("strabo.syncserver")


class HandedOver(asyncio.Protocol):
    """A connection the guard handed over (``_guard.GuardedProtocol._hand_over``)."""

    def __init__(self, limits: Limits, on_close: Callable[[], None] | None) -> None:
        self.limits = limits
        self.on_close = on_close
        #: The server's connection set (uvicorn's), which the protocol leaves when it closes.
        self.connections: set[Any] | None = None
        self.transport: asyncio.Transport | None = None
        self._drained: asyncio.Future[None] | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._paused = False  # the client reads slowly: nothing more is written
        self._closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=self.limits.write_buffer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._write_timer is not None:
            self._write_timer.cancel()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self.connections is not None:
            self.connections.discard(self)
        if self.on_close is not None:
            self.on_close()
            self.on_close = None

    def pause_writing(self) -> None:
        loop = asyncio.get_running_loop()
        self._paused = True
        self._drained = loop.create_future()
        self._write_timer = loop.call_later(self.limits.write_timeout, self._write_expired)

    def resume_writing(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._paused = False

    async def drained(self) -> None:
        """Return once the client has read enough for writing to go on."""
        if self._drained is not None and not self._drained.done():
            await self._drained

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if not self._closed and transport is not None and not transport.is_closing():
            transport.write(data)

    def _write_expired(self) -> None:
        self._write_timer = None
        log.debug("dropped %s: it read nothing for %ss", self._who(), self.limits.write_timeout)
        self._closed = True
        if self.transport is not None:
            self.transport.abort()  # close() would wait to flush to a client that never reads

    def _who(self) -> str:
        return "a connection"
