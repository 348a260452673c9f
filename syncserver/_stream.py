"""An event stream's response: committed batches as server-sent events.

A stream takes a batch already queued without yielding to the loop, and writes
it in pieces. So it must look at its connection before every write: once the
transport finds its peer gone (a reset, on a write or a read) it is closing,
but the protocol's ``connection_lost`` comes only a loop step later. Until
then uvicorn wrote the rest of the backlog to the dead transport (asyncio logs
``socket.send() raised exception.`` for each write past the fifth), and after
it, uvicorn writing nothing more, the stream still went through the rest of
its backlog without yielding: up to a thousand pieces for a stream 8 MB
behind. When bench/soak.py aborted 3,000 such streams, that took the loop 7 to
30 s, and the memory the streams freed at the end stayed with the process (the
trimmer, ``syncserver._trim``, had run before). The connection guard
(``syncserver._guard``) gives every request the transport's ``is_closing``
under :data:`CLOSING`; a stream ends at the first piece it would write to a
closing connection, and its subscriber and backlog are freed at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from syncserver.batch import Batch
from syncserver.feed import Lagging

#: The scope extension (``scope["extensions"]``) through which the connection
#: guard tells the app, between two writes, that the client is gone: a callable
#: that returns True once the connection is closing or lost.
CLOSING = "strabo.closing"


class EventStream(StreamingResponse):
    """The event stream of one subscriber: runs ``on_close`` however it ends,
    even if the client left before the first byte (then the body never starts)."""

    def __init__(
        self,
        batches: AsyncGenerator[Batch | None, None],
        on_close: Callable[[], None],
        *,
        chunk: int,
        lagging: Callable[[int], bytes],
    ) -> None:
        super().__init__(
            self._frames(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self._batches = batches
        self._on_close = on_close
        self._chunk = chunk
        self._lagging = lagging
        self._closing: Callable[[], bool] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._closing = (scope.get("extensions") or {}).get(CLOSING)
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()

    async def _frames(self) -> AsyncIterator[bytes]:
        """The frames to write, in pieces of at most ``chunk`` bytes (a slow
        reader's buffer then holds a piece, not a whole batch), until the batches
        end or the client is gone."""
        closing = self._closing
        stream, chunk = self._batches, self._chunk
        yield b": connected\n\n"
        try:
            # The batch is awaited inline (no task in between): a committed batch
            # reaches the client in the loop's next step (see Subscriber.get).
            async for batch in stream:
                frame = _PING if batch is None else batch.sse_frame
                for start in range(0, len(frame), chunk):
                    if closing is not None and closing():
                        return
                    yield frame if len(frame) <= chunk else frame[start : start + chunk]
                    if closing is None:
                        # Served without the guard: a step for connection_lost to
                        # come in, after which uvicorn writes nothing more.
                        await asyncio.sleep(0)
        except Lagging as lag:
            if closing is None or not closing():
                yield self._lagging(lag.last)  # the client catches up from the log
        finally:
            await stream.aclose()  # the subscriber and its backlog are freed now


_PING = b": ping\n\n"
