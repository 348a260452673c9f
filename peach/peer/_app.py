"""The HTTP face of a peer: ``POST /peer/messages`` and ``POST /peer/flush``.

Everything else (authentication, parsing, the checks, the answer) is the
executor's endpoint, the same function the in-memory network calls; this module
only carries requests to it, over asyncio, parsed by hand. Why not uvicorn and
Starlette, as before: a round trip between two agents is two requests, and on
the benchmark machine a small JSON POST and its answer took 210 us through
uvicorn (its h11 parser) and Starlette, 187 us with a bare ASGI app instead of
Starlette, 57 us through this server (the lean client's part included, both
ends in one process): most of what made a peer round trip slower than one
through a SyncServer (docs/performance.md, "Peer to peer"). The two routes need
little of HTTP/1.1, and that little is here:

* a request line and headers (at most :data:`MAX_HEAD` bytes, else ``431``;
  a control character in them, a bare CR or LF, is ``400``, as is an HTTP/1.1
  request without one ``Host``), then a body framed by ``Content-Length`` (at
  most :data:`MAX_BODY`, refused with ``413`` before it is read); a chunked
  body is answered ``411`` (the peers' client always sends a length),
  ``Expect: 100-continue`` gets its ``100``;
* keep-alive (HTTP/1.1, unless ``Connection: close``), requests answered one at
  a time and in order (what a client pipelines waits, unread, meanwhile); a
  client that shuts its side down gets the answers to what it sent whole;
* the answer as JSON, with ``Content-Length``, in one write.

Bounded in time as well, since nothing in front of it does it: a request must
be complete ``timeout`` seconds after its first byte (``408``), a connection
idle for as long is closed, and one whose client stops reading its answers
stops being read (the transport's write buffer, above its high-water mark,
pauses reading until it drains), as does one that sends more than a head's
worth ahead of its answers; answers still unread a timeout later (the
connection idle or closing) and the connection is dropped.
What does not parse is ``400`` and the connection closed: it cannot be known
where the next request would begin.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from typing import Any

from peach.peer._wire import MAX_BODY, Endpoint

log = logging.getLogger("strabo.peach.peer")

MAX_HEAD = 16 * 1024
ROUTES = frozenset({"messages", "flush"})
#: A control character (HTAB aside) in a head whose CRLFs are taken out: a NUL,
#: or a CR or LF on its own, which another reader may take for a line's end (a
#: header that one reader sees and another does not: a request hidden in a body).
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")

_PHRASES = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def response(status: int, answer: dict[str, Any], close: bool = False) -> bytes:
    """A whole response: head and JSON body, as written in one go."""
    body = json.dumps(answer, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    data = body.encode()
    head = (
        f"HTTP/1.1 {status} {_PHRASES.get(status, 'Unknown')}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(data)}\r\n"
        + ("connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode() + data


class BadRequest(Exception):
    """A request this server will not read further: answered, then the
    connection is closed (where the next request would begin is unknown)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class _Request:
    """A request head, parsed: the route's ``kind``, the headers (lower-case
    names), the body's length and whether the connection stays open after."""

    __slots__ = ("headers", "keep", "kind", "length")

    def __init__(self, kind: str, headers: dict[str, str], length: int, keep: bool) -> None:
        self.kind = kind
        self.headers = headers
        self.length = length
        self.keep = keep


def parse_head(raw: bytes) -> _Request:
    """The request line and headers (without the blank line that ends them)."""
    if _CONTROL.search(raw.replace(b"\r\n", b"")) is not None:
        raise BadRequest(400, "bad-request", "a control character in the request's head")
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(400, "bad-request", f"not an HTTP/1.1 request line: {lines[0][:80]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or " " in name:
            raise BadRequest(400, "bad-request", f"bad header line {line[:80]!r}")
        name = name.lower()
        value = value.strip(" \t")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if "transfer-encoding" in headers:
        raise BadRequest(411, "length-required", "send the body with a Content-Length")
    declared = headers.get("content-length", "0")
    if not (declared.isascii() and declared.isdigit()):
        raise BadRequest(400, "bad-request", f"bad Content-Length {declared[:40]!r}")
    digits = declared.lstrip("0") or "0"  # int() of over 4300 digits is a ValueError
    length = int(digits) if len(digits) <= len(str(MAX_BODY)) else MAX_BODY + 1
    if length > MAX_BODY:
        raise BadRequest(413, "too-large", f"the body exceeds {MAX_BODY} bytes")
    path = target.partition("?")[0]
    prefix, _, kind = path.rpartition("/")
    if prefix != "/peer" or kind not in ROUTES:
        raise BadRequest(404, "not-found", f"no such request: {path[:80]!r}")
    if method != "POST":
        raise BadRequest(405, "method-not-allowed", f"{path} takes POST, not {method[:20]}")
    host = headers.get("host")
    if (host is None and version == "HTTP/1.1") or (host is not None and "," in host):
        raise BadRequest(400, "bad-request", "an HTTP/1.1 request takes one Host")
    connection = headers.get("connection", "").lower()
    keep = version == "HTTP/1.1" and "close" not in connection
    return _Request(kind, headers, length, keep)


class PeerServer:
    """Serves one agent's endpoint until :meth:`close`. ``timeout``: seconds a
    request may take to arrive from its first byte, and a connection may stay
    idle between requests. At most ``max_connections`` are open at once: one
    more is answered ``503 overloaded`` and closed (a peer keeps a few: its
    requests under way to this agent, and its catch-ups)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout: float = 10.0,
        grace: float = 5.0,
        max_connections: int = 1024,
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.grace = grace
        self.max_connections = max_connections
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int | None) -> str:
        """Listen on ``host:port`` (any free port when None); the base URL."""
        # IPPROTO_TCP, not 0: asyncio turns TCP_NODELAY on only for sockets that
        # say so (accepted ones inherit it), and without it a small answer can
        # wait ~40 ms for a delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port or 0))
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(lambda: _Connection(self), sock=sock)
        except BaseException:
            sock.close()
            raise
        return f"http://{host}:{sock.getsockname()[1]}"

    async def close(self) -> None:
        """Stop listening; idle connections close now, busy ones after their
        answer (waited for ``grace`` seconds, then dropped)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        tasks = [c.task for c in self.connections if c.task is not None]
        for connection in list(self.connections):
            connection.shut()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        for connection in list(self.connections):
            connection.drop()


class _Connection(asyncio.Protocol):
    """One client's connection: reads requests, one at a time, and answers them.

    Cheap per request on purpose: no timer is made or cancelled for each one (a
    deadline is moved, and the one timer, when it fires early, sleeps on until
    it), and reading goes on while the endpoint runs (pausing and resuming it
    would be two system calls a request); only a client that sends more than a
    head's worth ahead of its answers is paused."""

    def __init__(self, server: PeerServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.request: _Request | None = None  # the head read, its body not yet whole
        self.task: asyncio.Task[None] | None = None  # the endpoint, answering
        self.deadline = 0.0  # of the request begun, or of the idle connection
        self.timer: asyncio.TimerHandle | None = None
        self.closing = False  # answer what is in hand, then close
        self.paused = False  # reading, by this protocol (the client sent too much ahead)
        self.writable = True  # the transport's write buffer is below its high-water mark
        self.ended = False  # the client shut its side down: nothing more will come

    # asyncio's callbacks ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if len(self.server.connections) >= self.server.max_connections:
            self.closing = self.ended = True  # nothing of it is read
            transport.write(response(503, _error(
                "overloaded", f"this agent holds its maximum of "
                f"{self.server.max_connections} connections; retry later"), close=True))
            transport.close()
            return
        self.server.connections.add(self)
        self._expect()

    def data_received(self, data: bytes) -> None:
        if self.task is not None:  # the client sends ahead of its answer
            self.buffer += data
            if len(self.buffer) > MAX_HEAD:
                self._pause()
            return
        if not self.buffer:
            self._expect()  # a request begins
        self.buffer += data
        self._next()

    def eof_received(self) -> bool:
        """The client has sent all it will (a half-close, ``shutdown(SHUT_WR)``):
        what it sent whole is still answered, then the connection closes. (Not
        kept open, asyncio closed the connection at once: no answer at all.)"""
        self.ended = True
        if self.task is None:
            self.shut()  # nothing whole is waiting (a part of a request never ends)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True
        self.transport = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def pause_writing(self) -> None:
        self.writable = False
        self._pause()

    def resume_writing(self) -> None:
        self.writable = True
        if self.task is None:
            self._go_on()

    # Requests --------------------------------------------------------------------

    def _next(self) -> None:
        """Start on the next request if all of it is here (else wait for more)."""
        if self.closing:
            return
        request = self.request
        if request is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0 or end > MAX_HEAD:
                if end > MAX_HEAD or len(self.buffer) > MAX_HEAD:
                    self._fail(BadRequest(431, "head-too-large", f"over {MAX_HEAD} bytes"))
                return
            try:
                request = parse_head(bytes(self.buffer[:end]))
            except BadRequest as exc:
                self._fail(exc)
                return
            del self.buffer[: end + 4]
            self.request = request
            if "100-continue" in request.headers.get("expect", "").lower() and (
                len(self.buffer) < request.length
            ):
                self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if len(self.buffer) < request.length:
            return
        body = bytes(self.buffer[: request.length])
        del self.buffer[: request.length]
        self.request = None
        self.task = self.loop.create_task(self._answer(request, body))

    async def _answer(self, request: _Request, body: bytes) -> None:
        try:
            status, answer = await self.server.endpoint(request.kind, request.headers, body)
            data = response(status, answer, close=not request.keep or self.closing)
        except Exception:  # the endpoint's bug, or an answer JSON cannot carry
            log.exception("a peer endpoint failed on a %s request", request.kind)
            data = response(500, _error("internal", "the request failed"), close=True)
            request.keep = False
        self.task = None
        self._write(data)
        if not request.keep or self.closing:
            self.shut()
            return
        self._expect()  # the next request, or the connection idle
        self._go_on()

    def _go_on(self) -> None:
        """After an answer, or once the client reads its answers again: the next
        request sent ahead, if whole, and reading on, unless a head's worth is
        held ahead still. (Reading resumed after every answer, a read of up to
        256 KiB ahead of each: a client pipelining megabytes had them all read,
        and all their answers buffered, however little it read of them.)"""
        if not self.writable or self.closing:
            return  # resume_writing goes on
        if self.buffer:
            self._next()
        if self.task is None and self.ended:
            self.shut()
        elif self.task is None or len(self.buffer) <= MAX_HEAD:
            self._resume()

    def _fail(self, exc: BadRequest) -> None:
        log.info("refused a request on the peer endpoint: %s %s", exc.status, exc)
        self._write(response(exc.status, _error(exc.code, str(exc)), close=True))
        self.shut()

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.paused and self.transport is not None and not (self.closing or self.ended):
            self.paused = False
            self.transport.resume_reading()

    # Time and closing -------------------------------------------------------------

    def _expect(self) -> None:
        """Something must happen within the timeout: the request begun must be
        whole, or an idle connection must begin one."""
        self.deadline = self.loop.time() + self.server.timeout
        if self.timer is None and self.transport is not None:
            self.timer = self.loop.call_at(self.deadline, self._expired)

    def _expired(self) -> None:
        self.timer = None
        if self.transport is None or self.task is not None:
            return  # gone, or busy: the answer sets the next deadline
        if self.loop.time() < self.deadline:  # moved since: sleep on until it
            self.timer = self.loop.call_at(self.deadline, self._expired)
        elif self.closing or not self.writable:
            # Answers not read for the timeout (a closing transport waited for
            # ever to write them out): the client is dropped.
            self.transport.abort()
        elif self.buffer or self.request is not None:
            self._fail(
                BadRequest(
                    408,
                    "request-timeout",
                    f"the request was not complete within {self.server.timeout} s",
                )
            )
        else:
            self.shut()  # idle for too long

    def shut(self) -> None:
        """Close once the answer in hand (if any) is written, and read, within
        the timeout (else the connection is dropped)."""
        self.closing = True
        if self.task is None and self.transport is not None:
            self.transport.close()
            self._expect()

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.server.connections.discard(self)
