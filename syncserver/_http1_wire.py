"""The wire format of the lean HTTP/1.1 client (``syncserver.http1``): its
errors, a response, the parsing of a response head, the content codings it
reads, and the bounds on what it reads (a head, a body, an event of a stream).
Kept apart from the connections and the client, which read and write through
these; everything here is re-exported by ``syncserver.http1``."""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

#: Longest response head (status line and headers) accepted.
MAX_HEAD = 64 * 1024
#: Largest response body read (bytes, both as it arrives and once decoded), and
#: largest event of a stream. The SyncServer's answers are far smaller: an
#: event is one batch (its attempts at most the server's ``max_body``, 1 MiB by
#: default), a log page the executor asks for is 1,000 batches of a few hundred
#: bytes each (64 KiB each on average would reach this bound); a peer's message
#: and an A2A one are at most 8 MiB. 64 MiB leaves room for all of them, and
#: bounds what a hostile service can make an agent hold.
MAX_BODY = 64 * 1024 * 1024


class TransportError(Exception):
    """No usable answer: the connection was refused, reset, closed early, timed out."""


class ProtocolError(TransportError):
    """The answer is not HTTP/1.1 as this client reads it (garbled or truncated)."""


class TooLarge(ProtocolError):
    """The answer is longer than the client reads (``max_body``): refused as it
    arrives, the connection dropped. It did arrive: the request was sent."""

    def __init__(self, url: str, limit: int, detail: str = "") -> None:
        super().__init__(
            f"the answer of {url} exceeds {size(limit)}{detail}: this client reads at "
            f"most max_body={limit} bytes"
        )
        self.url = url
        self.limit = limit


def size(count: int) -> str:
    """A byte count as people say it: ``64 MiB``, ``512 KiB``, ``1000 bytes``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    return f"{count} bytes"


class RequestError(ValueError):
    """The request cannot go on the wire: a header with a line break in it, a
    body that is not JSON. Nothing was sent."""


class Response:
    """A response head, and its body once read."""

    __slots__ = ("body", "headers", "reason", "status")

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes = b""):
        self.status = status
        self.reason = reason
        self.headers = headers  # lower-cased names; repeated headers joined by ", "
        self.body = body

    @property
    def status_code(self) -> int:
        return self.status

    @property
    def reason_phrase(self) -> str:
        return self.reason

    @property
    def content(self) -> bytes:
        return self.body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


def event_end(data: bytes) -> int:
    """Where the last event of an event stream in ``data`` ends (just after its
    blank line: two line ends in a row, of CRLF, LF or CR), or -1."""
    ends = (data.rfind(b"\n\n"), data.rfind(b"\r\r"), data.rfind(b"\n\r"))
    end = max(ends)
    return end + 2 if end >= 0 else -1


class Bound:
    """A streamed body counted as it arrives: at most ``limit`` bytes in all, or
    with ``events`` in each event of an event stream (between two blank lines;
    a live stream is endless, its events are not). :meth:`add` raises
    :class:`TooLarge` for ``url`` past it."""

    __slots__ = ("events", "last", "limit", "pending", "url")

    def __init__(self, limit: int, url: str, events: bool) -> None:
        self.limit = limit
        self.url = url
        self.events = events
        self.pending = 0  # bytes since the end of the last event (or the start)
        self.last = b""  # the byte before the next piece: a blank line may straddle two

    def add(self, chunk: bytes) -> None:
        if self.events:
            seen = self.last + chunk
            end = event_end(seen)
            self.pending = len(seen) - end if end >= 0 else self.pending + len(chunk)
            self.last = chunk[-1:]
        else:
            self.pending += len(chunk)
        if self.pending > self.limit:
            where = " in one event of its stream" if self.events else ""
            raise TooLarge(self.url, self.limit, where)


def is_event_stream(response: Response) -> bool:
    """Whether a streamed body is an event stream, bounded event by event (an
    upgraded connection's is: the SyncServer's channel), else as a whole."""
    kind = response.headers.get("content-type", "").lower()
    return response.status == 101 or kind.startswith("text/event-stream")


def chunked(response: Response) -> bool:
    return "chunked" in response.headers.get("transfer-encoding", "").lower()


def digits(text: str) -> bool:
    return text.isascii() and text.isdigit()  # not "²", which int() refuses


def header_lines(headers: Mapping[str, str]) -> str:
    """Header lines, refusing what would break the request's framing (a CR or
    LF would let a value smuggle headers, or a second request, onto the wire)."""
    lines = []
    for name, value in headers.items():
        if not name or any(c in name for c in ":\r\n \t") or "\r" in value or "\n" in value:
            raise RequestError(f"invalid header {name!r}: {value[:40]!r}")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines)


def decoded(body: bytes, coding: str, limit: int = MAX_BODY, url: str = "the server") -> bytes:
    """A body in the content coding the server chose although none was asked,
    inflated to at most ``limit`` bytes (a few KiB of gzip can make GiBs)."""
    if coding not in ("gzip", "x-gzip", "deflate"):
        raise ProtocolError(f"a response in a content coding this client cannot read: {coding!r}")
    inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib, told by its header
    try:
        data = inflater.decompress(body, limit + 1)  # one byte past the bound, no more
    except zlib.error as exc:
        if coding != "deflate":
            raise ProtocolError(f"the {coding} body does not decode: {exc}") from None
        # Bare deflate data without zlib's header, as servers have long sent
        # under "deflate" (httpx reads it so too).
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        try:
            data = inflater.decompress(body, limit + 1)
        except zlib.error:
            raise ProtocolError(f"the {coding} body does not decode: {exc}") from None
    if len(data) > limit:
        raise TooLarge(url, limit, f" once its {coding} is decoded ({len(body)} bytes before)")
    if not inflater.eof:
        raise ProtocolError(f"the {coding} body does not decode: it is cut short")
    return data


def parse_head(raw: bytes) -> tuple[Response, bool]:
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
        raise ProtocolError("undecodable response head") from None
    lines = text[:-4].split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not digits(code):
        raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"bad header line {line[:80]!r}")
        name = name.lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
    return Response(int(code), reason, headers), keep
