"""The fast lane: ``POST .../attempts`` read and answered by the guarded
protocol itself, before uvicorn makes an ASGI request of it.

Why: measured with ``bench/syncserver.py`` (issue 32), an attempt through
uvicorn (h11's parser, the scope, the request cycle, the ASGI messages, the
app's middleware) cost 1.5 times a request to a bare JSON echo, most of the
difference being the carrying, not the attempt. Here the request's head is
parsed by hand, the endpoint's own two steps run (``AttemptsEndpoint.admit``:
the agent, its protocol, the body's type and size; ``AttemptsEndpoint.finish``:
the attempt, finalized, as an :class:`~syncserver._attempts.Answer`) and the
answer is written to the socket in one piece, with the headers uvicorn would
have written (its Date and Server first): the same bytes, by construction.

Only the plain case is taken: a whole ``POST`` to the endpoint's path, in
HTTP/1.1, with a ``Host``, a ``Content-Length`` and no header twice, no
``Transfer-Encoding``, ``Expect``, ``Upgrade`` or ``Connection`` other than
``keep-alive``, every line as h11 would accept it. Anything else, and any
request that arrives while h11 holds part of the connection, is handed to h11
unchanged, bytes and all, as if the lane were not there. Requests are answered
one at a time and in order: what a client sends ahead waits, and reading stops
while it does (as h11 stops, "PAUSED"): a client that never reads its answers
costs one read's worth of memory, and one that shuts its side down after its
requests gets every answer before the server sees the end of the stream.

The guard's timers keep working: :meth:`Lane.owed` tells it what the client
owes (a head, a body), as h11's state does for the requests h11 reads.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, NamedTuple, Protocol
from urllib.parse import unquote

import h11
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES
from uvicorn.protocols.utils import get_path_with_query_string
from uvicorn.server import ServerState

from syncserver._attempts import Answer, AttemptsEndpoint, route
from syncserver.config import AgentConfig
from syncserver.ledger import Ledger

log = logging.getLogger("strabo.syncserver")

#: What every request the lane takes begins with.
PREFIX = b"POST /mas/"
#: A longer head is h11's (it has its own bound, and its own error for it).
MAX_HEAD = 8192
#: h11 refuses a longer Content-Length (h11._headers.CONTENT_LENGTH_MAX_DIGITS).
MAX_DIGITS = 20

# h11's grammar (h11/_abnf.py), narrowed: what does not match is h11's to judge.
_REQUEST_LINE = re.compile(rb"POST ([\x21-\x7e]+) HTTP/1\.1")
_FIELDS = re.compile(  # header lines, each with its CRLF, checked in one go
    rb"(?:[-!#$%&'*+.^_`|~0-9A-Za-z]+:[ \t]*"
    rb"(?:[\x21-\x7e\x80-\xff]+(?:[ \t]+[\x21-\x7e\x80-\xff]+)*)?[ \t]*\r\n)*"
)
_END = re.compile(rb"\n\r?\n")  # where h11 sees a head end
_REFUSED = frozenset({b"transfer-encoding", b"expect", b"upgrade"})

# The lane's states.
IDLE = 0  # between requests: the next bytes may be the lane's or h11's
HEAD = 1  # part of a head that may be the lane's
BODY = 2  # a head admitted, its body arriving
DRAIN = 3  # a head refused and answered, its body arriving (thrown away)
BUSY = 4  # the attempt is being finalized
WAIT = 5  # answered; the client reads nothing, so nothing more is read
CLOSED = 6


class Head(NamedTuple):
    """A request head the lane takes."""

    mas: str
    protocol: str
    target: bytes
    authorization: str
    content_type: str | None
    length: int


def parse_head(raw: bytes) -> Head | None:
    """The head ``raw`` (up to and with its blank line) if the lane takes it."""
    if not raw.endswith(b"\r\n\r\n") or raw.count(b"\n") != raw.count(b"\r\n"):
        return None  # bare line feeds: h11 reads them
    end = raw.index(b"\r\n")
    request = _REQUEST_LINE.fullmatch(raw, 0, end)
    if request is None:
        return None
    target = request.group(1)
    names = route(unquote(target.partition(b"?")[0].decode("ascii")))
    if names is None:
        return None
    block = raw[end + 2 : -2]
    if _FIELDS.fullmatch(block) is None:
        return None
    fields: dict[bytes, bytes] = {}
    for line in block[:-2].split(b"\r\n") if block else ():
        name, _, value = line.partition(b":")
        name = name.lower()
        if name in fields or name in _REFUSED:
            return None
        fields[name] = value.strip(b" \t")
    length = fields.get(b"content-length")
    connection = fields.get(b"connection")
    if (
        b"host" not in fields
        or length is None
        or not length.isdigit()
        or len(length) > MAX_DIGITS
        or (connection is not None and connection.lower() != b"keep-alive")
    ):
        return None
    kind = fields.get(b"content-type")
    return Head(
        names[0],
        names[1],
        target,
        fields.get(b"authorization", b"").decode("latin-1"),
        None if kind is None else kind.decode("latin-1"),
        int(length),
    )


def endpoint_of(app: Any) -> AttemptsEndpoint | None:
    """The endpoint the app (under uvicorn's wrappers) offers the lane, if any
    (``app.state.fast_lane``, set by ``create_app``)."""
    for _ in range(16):
        if app is None:
            return None
        endpoint = getattr(getattr(app, "state", None), "fast_lane", None)
        if isinstance(endpoint, AttemptsEndpoint):
            return endpoint
        app = getattr(app, "app", None)
    return None


class Connection(Protocol):
    """What the lane needs of its connection: uvicorn's h11 protocol, guarded
    (syncserver._guard.GuardedProtocol, which imports this module)."""

    @property
    def conn(self) -> h11.Connection: ...
    @property
    def flow(self) -> FlowControl: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def tasks(self) -> set[asyncio.Task[None]]: ...
    @property
    def client(self) -> tuple[str, int] | None: ...
    @property
    def server_state(self) -> ServerState: ...
    @property
    def transport(self) -> asyncio.Transport: ...
    @property
    def access_log(self) -> bool: ...
    @property
    def access_logger(self) -> logging.Logger: ...

    def _unset_keepalive_if_required(self) -> None: ...
    def h11_received(self, data: bytes) -> None: ...
    def write_now(self, data: bytes) -> None: ...
    def rest(self) -> None: ...
    def track(self) -> None: ...


class Lane:
    """One connection's fast lane; the guarded protocol hands it every byte it
    receives (:meth:`feed`), and takes back those the lane does not want."""

    __slots__ = (
        "agent",
        "buffer",
        "close_after",
        "endpoint",
        "head",
        "ledger",
        "protocol",
        "remaining",
        "rested",
        "scanned",
        "state",
    )

    def __init__(self, protocol: Connection, endpoint: AttemptsEndpoint) -> None:
        self.protocol = protocol
        self.endpoint = endpoint
        self.buffer = bytearray()
        self.state = IDLE
        self.head: Head | None = None
        self.agent: AgentConfig | None = None
        self.ledger: Ledger | None = None
        self.remaining = 0  # DRAIN: body bytes still to throw away
        self.close_after = False  # the server shuts down: close after this answer
        self.rested = False  # IDLE after an answer, nothing received since
        self.scanned = 0  # HEAD: bytes of the buffer searched for the head's end

    # What the protocol calls ------------------------------------------------------

    def feed(self, data: bytes) -> bool:
        """Take ``data`` (True), or leave it to h11 (False): h11 holds part of
        the connection, or the bytes cannot begin a request of the lane's."""
        state = self.state
        # A request is under way: uvicorn stops its keep-alive timer on every read.
        self.protocol._unset_keepalive_if_required()
        if state == IDLE:
            self.rested = False
            conn = self.protocol.conn
            if (
                conn.their_state is not h11.IDLE
                or conn.our_state is not h11.IDLE
                or conn.trailing_data[0]
                or not (data.startswith(PREFIX) or PREFIX.startswith(data))
            ):
                return False
            self.buffer += data
            self._next()
            return True
        if state == CLOSED:
            return True
        self.buffer += data
        if state == HEAD:
            self._next()
        elif state == BODY:
            assert self.head is not None
            if len(self.buffer) >= self.head.length:
                self._start()
        elif state == DRAIN:
            if self._drained() and self._answered():
                self._continue()
        else:  # BUSY, WAIT: the client sends ahead; read on after the answer
            self.protocol.flow.pause_reading()
        return True

    def owed(self) -> str | None:
        """What the client owes the lane: "head" (the rest of one), "body",
        "drain" (a body whose answer went already), "" (nothing: the lane
        answers, or the connection rests after an answer); None when the lane
        holds nothing of the connection (h11's state tells)."""
        state = self.state
        if state == IDLE:
            return "" if self.rested else None
        if state == HEAD:
            return "head"
        if state == BODY:
            return "body"
        if state == DRAIN:
            return "drain"
        return ""

    def answering(self) -> bool:
        """Whether the lane still owes an answer to a request the client sent
        whole: one being finalized (BUSY), or requests sent ahead that wait for
        the answer before them to be written or read (bytes held in IDLE or
        WAIT; a part of a request among them is found out when it is taken up).
        The guard keeps a half-closed connection open for these only."""
        state = self.state
        return state == BUSY or (state in (IDLE, WAIT) and bool(self.buffer))

    def shutdown(self) -> bool:
        """The server shuts down: True if the lane closes the connection itself,
        after the answer it owes."""
        if self.state in (BODY, BUSY):
            self.close_after = True
            return True
        return False

    def writable(self) -> None:
        """The client reads its answers again: go on with what it sent ahead."""
        if self.state == WAIT:
            self.state = IDLE
            self._continue()

    def lost(self) -> None:
        """The connection is gone."""
        if self.state == BODY and self.head is not None:
            client = self.protocol.client
            where = f"{client[0]}:{client[1]}" if client else "a client"
            log.info("%s left before sending the whole body of %s", where, self._path())
        self.state = CLOSED
        self.buffer.clear()

    # Requests -----------------------------------------------------------------------

    def _next(self) -> None:
        """Take the requests that begin the buffer while they are the lane's and
        answered at once (refused on their heads); stop at one to finalize, at a
        part of one, or at the first that is h11's."""
        buffer = self.buffer
        endpoint = self.endpoint
        while True:
            if not buffer:
                self.state = IDLE
                self.rested = True
                return
            if not buffer.startswith(PREFIX) and not PREFIX.startswith(buffer):
                self._hand_over()
                return
            # A head trickled in byte by byte is searched once, not once a byte.
            end = _END.search(buffer, max(self.scanned - 2, 0))
            if end is None:
                if len(buffer) > MAX_HEAD:
                    self._hand_over()
                else:
                    self.state = HEAD
                    self.scanned = len(buffer)
                return
            self.scanned = 0
            size = end.end()
            head = parse_head(bytes(buffer[:size])) if size <= MAX_HEAD else None
            if head is None:
                self._hand_over()
                return
            del buffer[:size]
            self.protocol._unset_keepalive_if_required()  # as uvicorn does for a request
            # h11 frames its own answers (a 400 to a bad request after this one)
            # by the version of the last request it saw, as if it had seen this.
            self.protocol.conn.their_http_version = b"1.1"
            self.head = head
            try:
                self.agent, self.ledger = endpoint.admit(
                    head.mas, head.protocol, head.authorization, head.content_type,
                    str(head.length),
                )
            except Exception as exc:  # refused on its head: answered now, as uvicorn would
                self._send(endpoint.failure(exc, self._path()))
                self.remaining = head.length
                self.state = DRAIN
                if self._drained() and self._answered():
                    continue
                return
            if len(buffer) >= head.length:
                self._start()
            else:
                self.state = BODY
            return

    def _hand_over(self) -> None:
        """h11 reads the connection from here on, from the buffer's first byte."""
        data = bytes(self.buffer)
        self.buffer.clear()
        self.state = IDLE
        self.scanned = 0
        self.protocol.h11_received(data)

    def _start(self) -> None:
        head, agent, ledger = self.head, self.agent, self.ledger
        assert head is not None and agent is not None and ledger is not None
        body = bytes(self.buffer[: head.length])
        del self.buffer[: head.length]
        self.state = BUSY
        protocol = self.protocol
        if self.buffer:  # sent ahead: no more reading until the answer
            protocol.flow.pause_reading()
        task = protocol.loop.create_task(self._run(head, agent, ledger, body))
        protocol.tasks.add(task)  # uvicorn waits for these at shutdown
        task.add_done_callback(protocol.tasks.discard)

    async def _run(self, head: Head, agent: AgentConfig, ledger: Ledger, body: bytes) -> None:
        try:
            answer = await self.endpoint.finish(
                head.mas, head.protocol, agent, ledger, body, self._path()
            )
        except BaseException:  # cancelled (a shutdown past its grace): no answer
            self.protocol.transport.close()
            raise
        if self.state == CLOSED:
            return
        self._send(answer)
        if self._answered():
            self._continue()

    def _drained(self) -> bool:
        """Throw away what arrived of a refused request's body; True once all of it has."""
        taken = min(self.remaining, len(self.buffer))
        del self.buffer[:taken]
        self.remaining -= taken
        return not self.remaining

    def _answered(self) -> bool:
        """An answer is written and its request read whole; True if the lane
        may go on with what the client sent after it."""
        protocol = self.protocol
        self.head = self.agent = self.ledger = None
        self.state = IDLE
        if self.close_after:
            protocol.transport.close()
            self.state = CLOSED
            return False
        protocol.rest()
        if protocol.flow.write_paused:
            self.state = WAIT
            return False
        return True

    def _continue(self) -> None:
        """Go on with what the client sent while its answer was made."""
        self.protocol.flow.resume_reading()
        if self.buffer:
            self._next()
            self.protocol.track()
        else:
            self.rested = True

    def _send(self, answer: Answer) -> None:
        protocol = self.protocol
        status = answer.status
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, STATUS_PHRASES[status])]
        for name, value in protocol.server_state.default_headers:
            lines.append(b"%s: %s\r\n" % (name, value))
        for name, value in answer.headers():
            lines.append(b"%s: %s\r\n" % (name, value))
        lines.append(b"\r\n")
        lines.append(answer.body)
        protocol.write_now(b"".join(lines))
        if protocol.access_log:
            client = protocol.client
            protocol.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                f"{client[0]}:{client[1]}" if client else "",
                "POST",
                get_path_with_query_string(self._scope()),  # type: ignore[arg-type]
                "1.1",
                status,
            )

    def _path(self) -> str:
        assert self.head is not None
        return unquote(self.head.target.partition(b"?")[0].decode("ascii"))

    def _scope(self) -> dict[str, Any]:
        assert self.head is not None
        query = self.head.target.partition(b"?")[2]
        return {"root_path": "", "path": self._path(), "query_string": query}
