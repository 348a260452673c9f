"""The agent channel: attempts, their answers and the event stream on one connection.

Over plain HTTP an action costs an agent a request (``POST .../attempts``) and
every other agent an event on its stream (``GET .../events``): on the proxy
benchmark's two vCPUs, uvicorn's request machinery was about half of the
server's CPU per attempt, and the other agents heard of an action only after
the attempter's answer had gone out. A channel is the event stream of one
agent and one protocol, upgraded (``Connection: Upgrade``, ``Upgrade:
strabo-channel``) from ``GET .../channel`` so that the agent also sends its
attempts on it:

* agent to server: one attempt per line, the JSON body of ``POST .../attempts``
  with its ``attempt_id`` (which names its answer), ended by ``\\n``;
* server to agent: server-sent events, the batches exactly as on
  ``.../events``, and ``event: answer`` frames whose data is the attempt's HTTP
  answer (or error body) with its ``id`` and ``status``.

Nothing about finalization changes: an attempt goes through the same code as a
POST, and its answer is written only once its batch is committed. The channel
writes a committed batch to its socket during the commit itself, while its
stream is caught up (no task to wake: every other agent has it before the
attempter's answer is even written).

What the agent reads is one ordered sequence: every batch after ``after``
once, in order, each either as a batch event or inside the answer of the
channel's own attempt it holds (its positions and the other entries), in the
batch's place. So a batch that holds an attempt of this channel still waiting
for its outcome is not written at commit time: the stream stops there (the
batches after it wait in its bounded backlog) until the attempt's outcome is
known, then writes the answer instead of the batch if the answer carries it,
or the batch if not (an error, or another attempt under the id). An answer
that carries a batch the stream has not reached yet waits for it; one that
carries a batch already given (a resend of an old attempt) is written at once,
as are errors. A channel whose stream ends (it lags, the server stops) writes
the answers still waiting before it closes. The limits
stay bounded: a line longer than ``max_body`` closes the channel, at most
:data:`MAX_IN_FLIGHT` attempts are checked at once (more are answered 429), a
client that stops reading has its lines left unread (each would cost an answer
the server must hold) and is dropped after ``write_timeout`` seconds, and one
that falls behind the stream's backlog gets the stream's ``lagging`` error. A
channel that closes (the client's end of input, the server's shutdown, a
lagging stream) first answers the attempts in flight, within
``write_timeout``.
docs/syncserver.md describes the wire format.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from syncserver._attempts import encode, finalize
from syncserver._handed import HandedOver
from syncserver.batch import Batch
from syncserver.config import AgentConfig
from syncserver.errors import ServiceError, describe, error_bytes, error_json
from syncserver.feed import Lagging
from syncserver.ledger import Ledger
from syncserver.limits import Limits
from syncserver.server import SyncServer
from syncserver.wire import AttemptIn

log = logging.getLogger("strabo.syncserver")

#: The ``Upgrade`` token of a channel.
UPGRADE = "strabo-channel"
#: The ASGI scope extension through which the app hands a connection over.
EXTENSION = "strabo.channel"
#: Attempts of one channel checked at once; more are answered 429.
MAX_IN_FLIGHT = 64

SWITCHING = (
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: strabo-channel\r\n\r\n"
)


def answer_frame(data: dict[str, Any]) -> bytes:
    return b"event: answer\ndata: %s\n\n" % encode(data)


def error_frame(code: str, message: str) -> bytes:
    return b"event: error\ndata: %s\n\n" % error_bytes(code, message)


class _Flight:
    """One attempt line of a channel, until its outcome is known."""

    __slots__ = ("ident", "settled")

    def __init__(self, ident: str, settled: asyncio.Future[None]) -> None:
        self.ident = ident
        self.settled = settled  # done once the answer is written or waits for its batch


class Channel(HandedOver):
    """One agent's channel for one protocol, once the connection is handed over."""

    def __init__(
        self,
        server: SyncServer,
        ledger: Ledger,
        agent: AgentConfig,
        after: int,
        limits: Limits,
        heartbeat: float,
        lagging: Callable[[int], bytes],
        on_attempt: Callable[[str, str], None] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(limits, on_close)
        self.server = server
        self.ledger = ledger
        self.agent = agent
        self.after = after
        self.heartbeat = heartbeat
        self.lagging = lagging
        self.on_attempt = on_attempt
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no end of line
        self._attempts: set[asyncio.Task[None]] = set()
        # attempt id -> the lines under it whose outcome is not known yet
        self._in_flight: dict[str, list[_Flight]] = {}
        # seq -> the answers that carry that batch, waiting for the stream to reach it
        self._deferred: dict[int, list[bytes]] = {}
        self._sent = after  # the last batch given (as a batch or in an answer)
        self._streaming = True  # the stream still gives batches
        self._follow_task: asyncio.Task[None] | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._closing = False  # no more attempts: close once those in flight are answered

    # asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        loop = asyncio.get_running_loop()
        self._follow_task = loop.create_task(self._follow(), name="channel stream")

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._buffer += data
        self._lines()

    def _lines(self) -> None:
        """Take the complete lines buffered, unless the client does not read
        (each line costs an answer: they would pile up in the server)."""
        while not self._closing and not self._paused:
            end = self._buffer.find(b"\n", self._scanned)
            if end < 0:
                # Only the new bytes are searched next time: a line trickled in
                # small pieces costs time linear in its length.
                self._scanned = len(self._buffer)
                if self._scanned > self.limits.max_body:
                    self._fail("too-large", f"an attempt line exceeds {self.limits.max_body} bytes")
                return
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            self._scanned = 0
            self._line(line)

    def eof_received(self) -> bool | None:
        self._close()  # the client is done sending: close once the answers are out
        return True  # keep the transport open (for writing) until then

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._linger is not None:
            self._linger.cancel()
        if self._follow_task is not None:
            self._follow_task.cancel()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.transport is not None:
            self.transport.pause_reading()  # the client's attempts wait in its buffers

    def resume_writing(self) -> None:
        super().resume_writing()
        if not self._closing and self.transport is not None:
            self.transport.resume_reading()
            self._lines()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: close once what is written is sent."""
        self._close()

    # Attempts -------------------------------------------------------------------------

    def _line(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        try:
            parsed = AttemptIn.model_validate_json(line)
        except ValidationError as exc:
            ident = _attempt_id(line)
            code, message = describe(exc)
            if ident is None:
                self._fail(
                    code,
                    f"{message} (an attempt line must be a JSON object with an "
                    "attempt_id, which its answer names)",
                )
            else:
                self._write(answer_frame({"id": ident, "status": 400, **error_json(code, message)}))
            return
        if parsed.attempt_id is None:
            self._fail("bad-request", "attempt_id: required on a channel (its answer names it)")
            return
        if len(self._attempts) >= MAX_IN_FLIGHT:
            self._write(
                answer_frame(
                    {
                        "id": parsed.attempt_id,
                        "status": 429,
                        **error_json(
                            "too-many-in-flight",
                            f"this channel already has {MAX_IN_FLIGHT} attempts in flight: "
                            "wait for their answers before sending more",
                        ),
                    }
                )
            )
            return
        loop = asyncio.get_running_loop()
        flight = _Flight(parsed.attempt_id, loop.create_future())
        self._in_flight.setdefault(flight.ident, []).append(flight)
        task = loop.create_task(self._attempt(parsed, flight))
        self._attempts.add(task)
        task.add_done_callback(self._answered)

    def _answered(self, task: asyncio.Task[None]) -> None:
        self._attempts.discard(task)
        if self._closing:
            self._finish_if_done()

    async def _attempt(self, parsed: AttemptIn, flight: _Flight) -> None:
        ident = flight.ident
        frame, seq = b"", None
        try:
            if self.on_attempt is not None:
                self.on_attempt(self.ledger.mas, self.agent.name)
            data = await finalize(
                self.server,
                self.ledger.mas,
                self.ledger.protocol.name,
                self.agent,
                parsed,
                others=True,
            )
            # The batch goes out on every stream first: channels took it during
            # the commit, and the event streams' tasks it woke run before this
            # one resumes.
            await asyncio.sleep(0)
            frame, seq = answer_frame({"id": ident, "status": 200, **data}), data["seq"]
        except ServiceError as exc:
            frame = answer_frame({"id": ident, "status": exc.status, **exc.to_json()})
        except Exception as exc:
            log.exception("unexpected error on an attempt of a channel of %s", self.agent.name)
            frame = answer_frame(
                {
                    "id": ident,
                    "status": 500,
                    **error_json("internal", f"internal error: {type(exc).__name__}"),
                }
            )
        finally:
            self._settle(flight, frame, seq)

    def _settle(self, flight: _Flight, frame: bytes, seq: int | None) -> None:
        """An attempt's outcome is known: its answer goes out now, or, if it
        carries a batch the stream has not given yet, in that batch's place."""
        flights = self._in_flight.get(flight.ident)
        if flights is not None:
            flights.remove(flight)
            if not flights:
                del self._in_flight[flight.ident]
        if seq is not None and seq > self._sent and self._streaming:
            self._deferred.setdefault(seq, []).append(frame)
        elif frame:
            self._write(frame)
        if not flight.settled.done():
            flight.settled.set_result(None)

    # The stream -----------------------------------------------------------------------

    async def _follow(self) -> None:
        stream = self.ledger.subscribe(
            self.after,
            max_bytes=self.limits.stream_backlog_bytes,
            heartbeat=self.heartbeat,
            sink=self._sink,
        )
        try:
            self._write(b": connected\n\n")
            async for batch in stream:
                if batch is None:
                    self._write(b": ping\n\n")
                else:
                    # The answers that may carry it first: the batches after it
                    # wait meanwhile (in the stream's bounded backlog).
                    for flight in self._holding(batch):
                        await flight.settled
                    self._give(batch)
                await self.drained()  # the client reads slowly: the backlog grows instead
        except Lagging as lag:
            self._end_stream()
            self._write(self.lagging(lag.last))
        except Exception:  # a channel without its stream would hear of nothing
            log.exception("the stream of a channel of %s failed", self.agent.name)
        finally:
            self._end_stream()
            await stream.aclose()
            self._close()  # the stream ended (the server is stopping, it lagged, it failed)

    def _sink(self, batch: Batch) -> bool:
        """Take a batch as it is committed (the stream is caught up): given
        now, unless the client reads slowly or the batch holds an attempt of
        this channel whose outcome is not known yet, when the stream queues it."""
        if self._paused or self._closed or self._holding(batch):
            return False
        self._give(batch)
        return True

    def _holding(self, batch: Batch) -> list[_Flight]:
        """The lines of this channel, outcome unknown, whose attempt id ``batch``
        holds: the answer of any of them may carry it."""
        if not self._in_flight:
            return []
        name = self.agent.name
        idents = {
            e.attempt_id
            for e in batch.entries
            if e.performer == name and e.attempt_id in self._in_flight
        }
        return [flight for ident in idents for flight in self._in_flight.get(ident, ())]

    def _give(self, batch: Batch) -> None:
        """Write ``batch`` in its place: inside the answers that carry it, if
        any, else as a batch event."""
        answers = self._deferred.pop(batch.seq, None) if self._deferred else None
        if answers is None:
            self._write(batch.sse_frame)
        else:
            for frame in answers:
                self._write(frame)
        self._sent = batch.seq
        if answers is not None and self._closing:
            self._finish_if_done()

    def _end_stream(self) -> None:
        """No more batches: the answers waiting for theirs go out now."""
        self._streaming = False
        deferred, self._deferred = self._deferred, {}
        for seq in sorted(deferred):
            for frame in deferred[seq]:
                self._write(frame)

    # Writing and closing --------------------------------------------------------------

    def _fail(self, code: str, message: str) -> None:
        self._write(error_frame(code, message))
        self._close()

    def _close(self) -> None:
        """Take no more attempts; close once those in flight are answered (their
        answers would otherwise be lost, and their attempts resent)."""
        if self._closing:
            return
        self._closing = True
        if self.transport is not None:
            self.transport.pause_reading()
            # Answers and closing both wait on the client and the attempts: bounded.
            loop = asyncio.get_running_loop()
            self._linger = loop.call_later(self.limits.write_timeout, self._linger_expired)
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        """Close once every attempt is answered (answers waiting for their batch
        included: the stream gives them, or writes them as it ends)."""
        if not self._attempts and not self._deferred:
            self._finish()

    def _finish(self) -> None:
        if not self._closed:
            self._closed = True
            if self.transport is not None:
                self.transport.close()

    def _linger_expired(self) -> None:
        self._linger = None
        log.debug(
            "dropped a closing channel of %s after %ss", self.agent.name, self.limits.write_timeout
        )
        self._closed = True
        if self.transport is not None:
            self.transport.abort()

    def _write_expired(self) -> None:
        self._closing = True
        super()._write_expired()

    def _who(self) -> str:
        return f"a channel of {self.agent.name}"


def _attempt_id(line: bytes) -> str | None:
    """The attempt id of a line that failed validation, if it has a usable one."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python goes
        return None
    ident = data.get("attempt_id") if isinstance(data, dict) else None
    return ident if isinstance(ident, str) and 0 < len(ident) <= 200 else None
