"""Connection-level limits that an ASGI app cannot enforce by itself.

A client that opens a connection and sends nothing, trickles its headers or its
body one byte at a time (slowloris), or stops reading a response, never reaches
the app in a way the app can time out: uvicorn keeps such connections forever.
This protocol, uvicorn's own h11 protocol with timers, closes them:

* headers must be complete ``header_timeout`` seconds after a request's first
  byte (or the connection's opening): else ``408 header-timeout``;
* the declared body must have arrived ``body_timeout`` seconds after the
  headers: else ``408 body-timeout``;
* a response the client does not read (the transport's buffer above
  ``write_buffer`` bytes) for ``write_timeout`` seconds is dropped;
* past ``max_connections`` open connections, a request gets ``503 overloaded``.

Each ends in a JSON error body, like every other error of the API, and the
connection is closed. Timers cost nothing per byte: they are armed and disarmed
on state changes only.

A client that shuts its side down after its requests (``shutdown(SHUT_WR)``,
``nc -N``, a script) still gets their answers: uvicorn's ``eof_received``
returns None, so asyncio closed the connection at the client's end of input and
an answer a batch window away was lost (uvicorn issue 1264). Here what the
client sent whole is answered, in order, and the connection closes after the
last answer; a part of a request, or nothing at all, is closed at once. The
timers above still bound what is left (an answer the client does not read). A
connection handed over (an event stream, a channel) follows its new protocol's
rule for the end of input, whether the end came before the hand-over or after.

It also carries the fast lane (syncserver/_fastlane.py): ``POST .../attempts``
read and answered here, without uvicorn's request cycle or the ASGI app around
the endpoint, unless the app says not to (``create_app(fast_lane=False)``,
``[server] fast_lane = false``). The timers above apply to it alike.

It subclasses uvicorn's ``H11Protocol`` and uses its internals (``conn``,
``cycle``, ``transport``, ``flow``), which uvicorn does not promise to keep:
pyproject.toml pins uvicorn to the minor versions in ``TESTED_UVICORN``, and a
test fails when the installed one is not among them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from syncserver._channel import EXTENSION, SWITCHING, UPGRADE
from syncserver._fastlane import Lane, endpoint_of
from syncserver._rawstream import HANDOVER
from syncserver._stream import CLOSING
from syncserver._trim import trimmer
from syncserver.errors import error_bytes
from syncserver.limits import Limits

log = logging.getLogger("strabo.syncserver")

_PHRASES = {408: "Request Timeout", 503: "Service Unavailable"}
# h11's states of a client whose request is read to its end (an upgrade's too;
# h11 defines MIGHT_SWITCH_PROTOCOL at its top level, but leaves it out of __all__).
_WHOLE = (h11.DONE, h11.MUST_CLOSE, h11.MIGHT_SWITCH_PROTOCOL)  # type: ignore[attr-defined]

# The uvicorn minor versions this protocol is tested with (and pinned to).
TESTED_UVICORN = ("0.54",)


class GuardedProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with the timers and the connection bound above."""

    limits: ClassVar[Limits] = Limits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._raw = transport
        self.transport = _Coalescing(transport)  # type: ignore[assignment]
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._switched = False  # the connection now belongs to a channel
        self._partial = False  # bytes of a request head have arrived
        self._must_close = False  # the request's framing is ambiguous: close after it
        self._ended = False  # the client shut its side down: answer, then close
        self._refuse = len(self.connections) > self.limits.max_connections
        # The fast lane (syncserver/_fastlane.py), unless the app turned it off
        # or uvicorn is set to do what it does not (a root path, a concurrency cap).
        plain = not self.root_path and self.limit_concurrency is None
        endpoint = endpoint_of(self.app) if plain else None
        self._lane = Lane(self, endpoint) if endpoint is not None else None
        transport.set_write_buffer_limits(high=self.limits.write_buffer)
        self._arm("head", self.limits.header_timeout, self._head_expired)

    def data_received(self, data: bytes) -> None:
        if self._refuse:
            self._reply(
                503,
                "overloaded",
                f"the server holds its maximum of {self.limits.max_connections} connections; "
                "retry later",
                retry_after=True,
            )
            return
        if self._lane is None or not self._lane.feed(data):
            super().data_received(data)
        self._track()

    # The fast lane (syncserver/_fastlane.py) -------------------------------------------

    def h11_received(self, data: bytes) -> None:
        """Bytes the fast lane leaves to h11 and the ASGI app."""
        super().data_received(data)

    def write_now(self, data: bytes) -> None:
        """A whole response, in one write (after anything held)."""
        self.transport.flush()  # type: ignore[attr-defined]
        if not self._raw.is_closing():
            self._raw.write(data)

    def rest(self) -> None:
        """The fast lane answered a request: what uvicorn does after a response."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )
        self._close_if_ended()

    def track(self) -> None:
        self._track()

    def shutdown(self) -> None:
        if self._lane is not None and self._lane.shutdown():
            return  # the lane closes the connection after its answer
        super().shutdown()

    # Channels (syncserver/_channel.py) -------------------------------------------------

    def _should_upgrade(self) -> bool:
        # Called for every request, its scope just made: the app's event streams
        # look at the transport before each write (syncserver/_stream.py).
        names = [name for name, _ in self.headers]
        if b"transfer-encoding" in names and b"content-length" in names:
            # h11 reads the chunks; a front end may read the length: where the
            # next request begins is in doubt. RFC 9112 6.1: answer, then close.
            self._must_close = True
        extensions: dict[str, Any] = dict(self.scope.get("extensions") or {})
        extensions[CLOSING] = self.transport.is_closing
        extensions[HANDOVER] = self._hand_over
        self.scope["extensions"] = extensions
        upgrade = self._get_upgrade()
        if upgrade is not None and upgrade.decode("latin-1") == UPGRADE:
            # The app decides (it authenticates the agent and answers errors as
            # JSON); if it accepts, it hands the connection over through this.
            extensions[EXTENSION] = self._switch
            return False
        return super()._should_upgrade()

    def _switch(self, channel: asyncio.Protocol) -> bool:
        """Answer 101 and give the connection to ``channel``; False if it is gone."""
        return self._hand_over(channel, SWITCHING)

    def _hand_over(self, channel: asyncio.Protocol, head: bytes) -> bool:
        """Write ``head`` (the response's status line and headers) and give the
        connection to ``channel`` (a channel, an event stream); False if the
        client is gone."""
        if self.transport.is_closing():
            return False
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._switched = True
        if self.cycle is not None:  # the app's own (empty) answer goes nowhere
            self.cycle.response_started = self.cycle.response_complete = True
            self.cycle.disconnected = True
        self.transport.write(head)
        self.connections.discard(self)
        self.connections.add(channel)  # type: ignore[arg-type]
        channel.connections = self.connections  # type: ignore[attr-defined]
        # What the client sent after the request without waiting for the 101 (its
        # first attempts) is in h11's buffer, not the transport's: it is the channel's.
        early, _ = self.conn.trailing_data
        self.transport.flush()  # type: ignore[attr-defined]
        self._raw.set_protocol(channel)
        channel.connection_made(self._raw)
        # After the client's end there is nothing to read (and resumed, asyncio
        # would report the end again).
        if not self._ended:
            self._raw.resume_reading()
        if early:
            channel.data_received(bytes(early))
        if self._ended and not channel.eof_received():
            # The client ended before the hand-over: the new protocol hears it
            # as if it had come after (a stream ends, a channel answers and closes).
            self._raw.close()
        return True

    def _owed(self) -> str:
        """What the client owes us next: "head" (between requests), "body",
        "drain" (a body whose answer went already) or "" (nothing)."""
        owed = self._lane.owed() if self._lane is not None else None
        if owed is not None:
            return owed
        state = self.conn.their_state
        if state is h11.IDLE:
            return "head"
        if state is h11.SEND_BODY:
            return "drain" if self.cycle is not None and self.cycle.response_started else "body"
        return ""

    def _track(self) -> None:
        """Arm the timer of whatever the client owes us next, disarm the others."""
        if self.transport.is_closing() or self._switched:
            return
        owed = self._owed()
        if owed == "head":  # between requests: data so far is a partial head
            self._partial = True
            self._disarm("body")
            self._arm("head", self.limits.header_timeout, self._head_expired)
        elif owed:  # a body
            self._partial = False
            self._disarm("head")
            self._arm("body", self.limits.body_timeout, self._body_expired)
        else:
            self._partial = False
            self._disarm("head")
            self._disarm("body")
        self._close_if_ended()

    # The client's end of input ---------------------------------------------------------

    def eof_received(self) -> bool:  # type: ignore[override]
        """The client has sent all it will (a half-close). uvicorn returns None
        here, and asyncio then closes the connection: an answer still being
        made was lost. True keeps the transport open for writing; the
        connection closes once nothing the client sent whole is left to answer
        (at once if nothing is). asyncio may report the end again (reading
        resumed after it): this is idempotent."""
        self._ended = True
        self._close_if_ended()
        return True

    def _answering(self) -> bool:
        """Whether a request the client sent whole is being answered, or waits
        to be: the lane's (:meth:`Lane.answering`), or h11's request cycle, its
        request read to the end and its response not complete. (Requests h11
        holds sent ahead are taken up when that response completes.)"""
        if self._lane is not None and self._lane.answering():
            return True
        cycle = self.cycle
        return (
            cycle is not None
            and not cycle.response_complete
            and self.conn.their_state in _WHOLE
        )

    def _close_if_ended(self) -> None:
        """After the client's end of input: close once nothing is owed. Called
        wherever an answer ends or a request is taken up (an answer written,
        requests sent ahead read, the client reading again)."""
        if (
            self._ended
            and not self._switched
            and not self.transport.is_closing()
            and not self._answering()
        ):
            self.transport.close()  # after what is written (the timers still bound it)

    def on_response_complete(self) -> None:
        self.transport.flush()  # type: ignore[attr-defined]
        if self._must_close:  # nothing after it is read as a request
            self.transport.close()
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE:
            # The next request's head is governed by the keep-alive timeout until
            # its first byte arrives (uvicorn's own timer).
            self._disarm("head")
            self._close_if_ended()
        else:  # a request sent ahead, taken up now: its body is owed from now
            self._track()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._arm("write", self.limits.write_timeout, self._write_expired)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._disarm("write")
        if self._lane is not None:
            self._lane.writable()
        self._close_if_ended()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._lane is not None:
            self._lane.lost()
        super().connection_lost(exc)
        trimmer.closed(self.loop)

    # Timers ---------------------------------------------------------------------------

    def _arm(self, name: str, seconds: float, callback: Any) -> None:
        if name not in self._timers:
            self._timers[name] = self.loop.call_later(seconds, callback)

    def _disarm(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def _head_expired(self) -> None:
        self._timers.pop("head", None)
        if self.transport.is_closing() or self._owed() != "head":
            return
        if not self._partial:  # nothing sent at all: nobody to answer
            log.debug("closed %s: no request within %ss", self.client, self.limits.header_timeout)
            self.transport.close()
            return
        self._reply(
            408,
            "header-timeout",
            f"the request headers were not complete within {self.limits.header_timeout} s",
        )

    def _body_expired(self) -> None:
        self._timers.pop("body", None)
        owed = self._owed()
        if self.transport.is_closing() or owed not in ("body", "drain"):
            return
        if owed == "drain":  # answered already: nothing more to say
            self.transport.close()
            return
        self._reply(
            408,
            "body-timeout",
            f"the request body did not arrive within {self.limits.body_timeout} s",
        )

    def _write_expired(self) -> None:
        self._timers.pop("write", None)
        log.debug(
            "dropped %s: it read nothing for %ss", self.client, self.limits.write_timeout
        )
        self.transport.abort()  # close() would wait to flush to a client that never reads

    def _reply(self, status: int, code: str, message: str, retry_after: bool = False) -> None:
        """Answer outside the request cycle (it may not have started) and close."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app's own answer would go nowhere
        body = error_bytes(code, message)
        head = (
            f"HTTP/1.1 {status} {_PHRASES[status]}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            + ("retry-after: 1\r\n" if retry_after else "")
            + "connection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


class _Coalescing:
    """The transport as uvicorn's response cycle writes to it: the response's
    head, then its body, then (chunked) its end, each a ``write``, each a
    ``send`` to the socket and, on a VM, a wake-up of the reader for each.
    Held and joined, a response is one ``send``: written when the response is
    complete, or at the end of the loop's step (a streamed response)."""

    __slots__ = ("_held", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self._held is None:
            self._held = bytes(data)
            asyncio.get_running_loop().call_soon(self.flush)
        else:
            self._held += data

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return len(self._held or b"") + self._transport.get_write_buffer_size()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def guarded_protocol(limits: Limits) -> type[GuardedProtocol]:
    """The protocol class for uvicorn's ``http=`` option, bound to ``limits``."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits})


def uvicorn_options(limits: Limits) -> dict[str, Any]:
    """The uvicorn settings that enforce ``limits`` (merge them into a Config)."""
    return {
        "http": guarded_protocol(limits),
        "timeout_keep_alive": limits.keep_alive_timeout,
    }
