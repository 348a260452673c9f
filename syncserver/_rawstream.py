"""An event stream written straight to its socket.

Served through the ASGI stack (``syncserver._stream``), every subscriber of a
committed batch cost a task wake-up, a heartbeat timer re-armed, and a trip
down four layers of generators and ``send`` wrappers (Starlette, uvicorn, h11's
chunked framing) before its frame reached the transport: about 25 us of the
server's CPU per subscriber per event, where the socket write itself costs
about 3 (``bench/syncserver.py --fanout 128``). So when the connection guard
(``syncserver._guard``) lets it, ``GET .../events`` takes the connection over,
as a channel does (``syncserver._channel``), writes the response head itself
(``Connection: close``: the body ends when the stream does, so there is no
chunked framing to keep), and a caught-up stream takes each batch during the
commit that publishes it: one ``transport.write`` of the frame that every
subscriber shares.

The bounds are the channel's: a client that reads slowly is written nothing
more (its batches wait in the subscriber's backlog, bounded in bytes; past it
the stream ends with the ``lagging`` error), and one that reads nothing for
``write_timeout`` seconds is dropped. What the client sends after its request
is ignored, and its end of input closes the stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from syncserver._handed import HandedOver
from syncserver.batch import Batch
from syncserver.feed import Lagging
from syncserver.ledger import Ledger
from syncserver.limits import Limits

log = logging.getLogger("strabo.syncserver")

#: The ASGI scope extension through which the app takes a connection over:
#: ``hand_over(protocol, head) -> bool`` writes ``head`` and gives the
#: connection to ``protocol``; False if the client is gone.
HANDOVER = "strabo.handover"

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-store\r\n"
    b"x-accel-buffering: no\r\nconnection: close\r\n\r\n"
)
_CONNECTED = b": connected\n\n"
_PING = b": ping\n\n"


class RawStream(HandedOver):
    """One subscriber's event stream, once the connection is handed over."""

    def __init__(
        self,
        ledger: Ledger,
        after: int,
        limits: Limits,
        heartbeat: float,
        lagging: Callable[[int], bytes],
        on_close: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(limits, on_close)
        self.ledger = ledger
        self.after = after
        self.heartbeat = heartbeat
        self.lagging = lagging
        self._task: asyncio.Task[None] | None = None

    # asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._write(_CONNECTED)
        self._task = asyncio.get_running_loop().create_task(self._follow(), name="event stream")

    def data_received(self, data: bytes) -> None:
        pass  # a stream takes no input (a request pipelined after it goes unanswered)

    def eof_received(self) -> bool | None:
        self.shutdown()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self._task is not None:
            self._task.cancel()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown (and the client's end of input): close
        once what is written is sent."""
        if not self._closed:
            self._closed = True
            if self._task is not None and self._task is not asyncio.current_task():
                self._task.cancel()
            if self.transport is not None:
                self.transport.close()

    # The stream -----------------------------------------------------------------------

    async def _follow(self) -> None:
        stream = self.ledger.subscribe(
            self.after,
            max_bytes=self.limits.stream_backlog_bytes,
            heartbeat=self.heartbeat,
            sink=self._sink,
        )
        try:
            async for batch in stream:
                self._write(_PING if batch is None else batch.sse_frame)
                await self.drained()  # the client reads slowly: the backlog grows instead
        except Lagging as lag:
            self._write(self.lagging(lag.last))
        except Exception:
            log.exception("an event stream of %s failed", self.ledger.mas)
        finally:
            await stream.aclose()
            self.shutdown()  # the stream ended (the server is stopping, it lagged)

    def _sink(self, batch: Batch) -> bool:
        """Take a batch as it is committed (the stream is caught up), unless
        the client reads slowly: then the stream queues it."""
        if self._paused or self._closed:
            return False
        self._write(batch.sse_frame)
        return True

    def _who(self) -> str:
        return f"an event stream of {self.ledger.mas}"
