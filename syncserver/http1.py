"""A lean keep-alive HTTP/1.1 client over asyncio streams, for the agents' side:
the SyncExecutor's requests to a SyncServer, and a proxy's to its service.

An agent talking to a SyncServer spends most of an attempt's time in its HTTP
client, not on the network nor in the server; a proxy, most of its bridging cost
in its requests to the merchant. Measured on the 2-vCPU benchmark
machine (2026-11-23), one small JSON POST to a bare echo endpoint: httpx 1.63 ms
per round trip; h11 driven directly over asyncio streams 0.52 ms and 261 us of
client CPU; this client 0.39 ms and 128 us. h11's per-event validation and state
machine were the largest cost left, so the response is parsed here by hand:
the status line, the headers, and a body framed by ``Content-Length``, by
chunked transfer coding, or by the connection's end. What does not parse is a
:class:`ProtocolError` (the connection is dropped, never reused). Requests are
written by hand too: a few header lines.

Connections are kept alive and reused, one request at a time each; concurrent
requests open more (up to ``max_connections``). A reused connection that turns
out closed by the server before any byte of the answer (its keep-alive timeout,
a restart) is replaced and the request sent once more on a new one: callers
send only requests that are safe to repeat (reads, attempts carrying an
attempt id, which the server recognizes, and a proxy's requests, each with its
idempotency key).

What it does not do, where httpx would: follow redirects (neither does httpx by
default), use a proxy from the environment, speak HTTP/2, decode any content
coding but gzip and deflate (it asks for none).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

#: Longest response head (status line and headers) accepted.
MAX_HEAD = 64 * 1024
#: Idle connections kept for reuse.
KEEP_IDLE = 8


class TransportError(Exception):
    """No usable answer: the connection was refused, reset, closed early, timed out."""


class ProtocolError(TransportError):
    """The answer is not HTTP/1.1 as this client reads it (garbled or truncated)."""


class RequestError(ValueError):
    """The request cannot go on the wire: a header with a line break in it, a
    body that is not JSON. Nothing was sent."""


class _Stale(TransportError):
    """A reused connection was found closed before any byte of the answer."""


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


class Connection:
    """One TCP (or TLS) connection: writes requests, reads responses."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()

    async def send(self, data: bytes) -> None:
        try:
            self.writer.write(data)
            if self.writer.transport.get_write_buffer_size() > 65536:
                await self.writer.drain()
        except (ConnectionError, OSError) as exc:
            raise (_Stale if self.reused else TransportError)(f"cannot send: {exc!r}") from None

    async def head(self, switch: bool = False) -> tuple[Response, bool]:
        """Read a response head (skipping interim 1xx ones, but returning a 101
        if ``switch``); also whether the connection stays open after it."""
        while True:
            try:
                raw = await self.reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if not exc.partial and self.reused:
                    raise _Stale("the server had closed the connection") from None
                raise TransportError(
                    "the server closed the connection before answering"
                    if not exc.partial
                    else "the server closed the connection in the middle of the response head"
                ) from None
            except asyncio.LimitOverrunError:
                raise ProtocolError(f"the response head exceeds {MAX_HEAD} bytes") from None
            except (ConnectionError, OSError) as exc:
                if self.reused:
                    raise _Stale(f"connection lost: {exc!r}") from None
                raise TransportError(f"connection lost: {exc!r}") from None
            response, keep = _parse_head(raw)
            if not 100 <= response.status < 200:
                return response, keep
            self.reused = False  # an interim answer: the request got there, never resend it
            if response.status == 101:
                if switch:
                    return response, True
                raise ProtocolError("the server switched protocols")

    async def body(self, method: str, response: Response, keep: bool) -> tuple[bytes, bool]:
        """Read the body the head announces; whether the connection stays usable."""
        if method == "HEAD" or response.status in (204, 304):
            return b"", keep
        length = response.headers.get("content-length")
        if length is not None and not _chunked(response):  # the usual case, read at once
            if not _digits(length):
                raise ProtocolError(f"bad Content-Length {length[:40]!r}")
            try:
                return (await self.reader.readexactly(int(length)) if length != "0" else b""), keep
            except asyncio.IncompleteReadError:
                raise ProtocolError("the server closed the connection in mid-response") from None
            except (ConnectionError, OSError) as exc:
                raise TransportError(f"connection lost in mid-response: {exc!r}") from None
        parts = [chunk async for chunk in self.chunks(response)]
        framed = "content-length" in response.headers or _chunked(response)
        return b"".join(parts), keep and framed

    async def chunks(
        self, response: Response, read_timeout: float | None = None
    ) -> AsyncIterator[bytes]:
        """The body as it arrives, de-framed; with ``read_timeout``, a
        :class:`TransportError` when nothing arrives for that long."""
        reader = self.reader
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None) as quiet:
                async for chunk in self._chunks(response, reader, quiet, loop, read_timeout):
                    yield chunk
        except TimeoutError:
            raise TransportError(f"nothing received for {read_timeout}s") from None

    async def _chunks(
        self,
        response: Response,
        reader: asyncio.StreamReader,
        quiet: asyncio.Timeout,
        loop: asyncio.AbstractEventLoop,
        read_timeout: float | None,
    ) -> AsyncIterator[bytes]:
        if read_timeout is not None:
            quiet.reschedule(loop.time() + read_timeout)
        try:
            if _chunked(response):
                while True:
                    line = await reader.readuntil(b"\r\n")
                    try:
                        size = int(line.split(b";", 1)[0].strip(), 16)
                    except ValueError:
                        raise ProtocolError(f"bad chunk size line {line[:40]!r}") from None
                    if size < 0:
                        raise ProtocolError(f"bad chunk size line {line[:40]!r}")
                    if size == 0:
                        while await reader.readuntil(b"\r\n") != b"\r\n":
                            pass  # trailers: none expected, ignored
                        return
                    data = await reader.readexactly(size + 2)
                    if data[-2:] != b"\r\n":
                        raise ProtocolError("a chunk does not end where its size says")
                    yield data[:-2]
                    if read_timeout is not None:
                        quiet.reschedule(loop.time() + read_timeout)
            elif "content-length" in response.headers:
                text = response.headers["content-length"]
                if not _digits(text):
                    raise ProtocolError(f"bad Content-Length {text[:40]!r}")
                if int(text):
                    yield await reader.readexactly(int(text))
            else:  # delimited by the end of the connection
                while data := await reader.read(65536):
                    yield data
                    if read_timeout is not None:
                        quiet.reschedule(loop.time() + read_timeout)
        except asyncio.IncompleteReadError:
            raise ProtocolError("the server closed the connection in mid-response") from None
        except asyncio.LimitOverrunError:
            raise ProtocolError("a chunk size line is too long") from None
        except (ConnectionError, OSError) as exc:
            raise TransportError(f"connection lost in mid-response: {exc!r}") from None


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover - makes this an async generator


def _chunked(response: Response) -> bool:
    return "chunked" in response.headers.get("transfer-encoding", "").lower()


_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()  # not "²", which int() refuses


def _header_lines(headers: Mapping[str, str]) -> str:
    """Header lines, refusing what would break the request's framing (a CR or
    LF would let a value smuggle headers, or a second request, onto the wire)."""
    lines = []
    for name, value in headers.items():
        if not name or any(c in name for c in ":\r\n \t") or "\r" in value or "\n" in value:
            raise RequestError(f"invalid header {name!r}: {value[:40]!r}")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines)


def _decoded(body: bytes, coding: str) -> bytes:
    """A body in the content coding the server chose although none was asked."""
    if coding not in ("gzip", "x-gzip", "deflate"):
        raise ProtocolError(f"a response in a content coding this client cannot read: {coding!r}")
    try:
        return zlib.decompress(body, 32 + zlib.MAX_WBITS)  # gzip or zlib, told by its header
    except zlib.error as exc:
        raise ProtocolError(f"the {coding} body does not decode: {exc}") from None


def _parse_head(raw: bytes) -> tuple[Response, bool]:
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
        raise ProtocolError("undecodable response head") from None
    lines = text[:-4].split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not _digits(code):
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


class Client:
    """Requests to one origin (``base_url``, optionally with a path prefix),
    each with the same extra ``headers``."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        max_connections: int = 100,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if parts.scheme == "https" else None
        )
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        default_port = self.port == (443 if self.ssl else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        authority = host if default_port else f"{host}:{self.port}"
        fixed = {
            "Host": authority,
            "Accept": "*/*",
            "Accept-Encoding": "identity",
            "User-Agent": "strabo",
        }
        fixed.update(headers or {})
        self._fixed = _header_lines(fixed)
        self._fixed_by_name = {name.lower(): (name, value) for name, value in fixed.items()}
        self._idle: list[Connection] = []
        self.max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    def _target(self, path: str, params: Mapping[str, Any] | None) -> str:
        target = self.prefix + path
        return f"{target}?{urlencode(params)}" if params else target

    def _request(
        self, method: str, target: str, payload: bytes | None, lines: str | None = None
    ) -> bytes:
        head = f"{method} {target} HTTP/1.1\r\n{self._fixed if lines is None else lines}"
        if payload is None:
            if method in _WITH_BODY:  # an empty body, said so (some servers wait otherwise)
                return f"{head}Content-Length: 0\r\n\r\n".encode()
            return f"{head}\r\n".encode()
        return (
            f"{head}Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode() + payload

    async def _open(self) -> Connection:
        if self._closed:
            raise TransportError("the client is closed")
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.ssl, limit=MAX_HEAD
                )
        except TimeoutError:
            raise TransportError(
                f"cannot connect to {self.host}:{self.port}: timed out after "
                f"{self.connect_timeout}s"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise TransportError(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        return Connection(reader, writer)

    async def _take(self) -> Connection:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable():
                connection.reused = True
                return connection
            connection.close()
        return await self._open()

    def _give_back(self, connection: Connection) -> None:
        if self._closed or len(self._idle) >= KEEP_IDLE or not connection.usable():
            connection.close()
        else:
            self._idle.append(connection)

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
    ) -> Response:
        """Send one request and read its whole response; ``headers`` go with this
        request only (over the client's own of the same name). The body is
        ``json_body`` encoded, or ``content``, JSON already."""
        payload = content
        if json_body is not None:
            try:
                payload = json.dumps(json_body, separators=(",", ":"), allow_nan=False).encode()
            except (TypeError, ValueError) as exc:
                raise RequestError(f"the body is not JSON: {exc}") from None
        lines = None
        if headers:
            merged = dict(self._fixed_by_name)
            merged.update((name.lower(), (name, value)) for name, value in headers.items())
            lines = _header_lines(dict(merged.values()))
        data = self._request(method, self._target(path, params), payload, lines)
        placed = sent = False
        try:
            # The wait for one of the client's places is part of the time allowed:
            # in a burst past them, a caller's deadline still holds.
            async with asyncio.timeout(self.timeout), self._slots:
                placed = True
                while True:
                    connection = await self._take()
                    sent = True
                    try:
                        response, keep = await self._exchange(connection, method, data)
                    except _Stale:
                        connection.close()
                        continue  # a fresh connection next: _take opens one
                    except BaseException:
                        connection.close()
                        raise
                    if keep:
                        self._give_back(connection)
                    else:
                        connection.close()
                    return response
        except TimeoutError:
            if not sent:
                # Not a byte went out: said as a connection that could not be made
                # is, so that a caller may send it again even where a second run
                # would do harm (strabo.ucp.a2a_transport settles an unsafe tool
                # that got no answer as "outcome unknown", and never resends it).
                why = (
                    f"timed out after {self.timeout}s"
                    if placed
                    else f"all {self.max_connections} connections busy for {self.timeout}s"
                )
                raise TransportError(f"cannot connect to {self.host}:{self.port}: {why}") from None
            raise TransportError(f"no answer within {self.timeout}s") from None

    async def _exchange(
        self, connection: Connection, method: str, data: bytes
    ) -> tuple[Response, bool]:
        await connection.send(data)
        response, keep = await connection.head()
        connection.reused = False  # answered: a failure from here on is not stale
        response.body, keep = await connection.body(method, response, keep)
        coding = response.headers.get("content-encoding", "identity").lower()
        if coding != "identity" and response.body:  # an empty body is empty in any coding
            response.body = _decoded(response.body, coding)
        return response, keep

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[tuple[Response, AsyncIterator[bytes]]]:
        """A response whose body is read as it arrives, on a connection of its
        own, closed afterwards. Opening it is bounded by the client's timeout;
        reading it is not (a live stream may stay quiet)."""
        head = self._request(method, self._target(path, params), None)
        connection, response = await self._open_with(head, switch=False)
        try:
            yield response, connection.chunks(response, read_timeout)
        finally:
            connection.close()

    async def _open_with(self, head: bytes, switch: bool) -> tuple[Connection, Response]:
        """A connection of its own, ``head`` sent on it and the answer's head read
        (and its body too, unless a ``101`` when ``switch``), within the timeout."""
        connection = await self._open()
        try:
            async with asyncio.timeout(self.timeout):
                await connection.send(head)
                response, keep = await connection.head(switch=switch)
                if switch and response.status != 101:
                    response.body, _ = await connection.body("GET", response, keep)
        except TimeoutError:
            connection.close()
            raise TransportError(f"no answer within {self.timeout}s") from None
        except BaseException:
            connection.close()
            raise
        return connection, response

    @contextlib.asynccontextmanager
    async def upgrade(
        self,
        path: str,
        protocol: str,
        *,
        params: Mapping[str, Any] | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[tuple[Response, Connection | None, AsyncIterator[bytes]]]:
        """``GET path`` asking to switch the connection to ``protocol``, on a
        connection of its own. On ``101`` yields the response, the connection
        (to write to) and the bytes that arrive on it; otherwise the response
        with its body read, ``None`` and nothing to read."""
        head = self._request("GET", self._target(path, params), None)
        head = head[:-2] + f"Connection: Upgrade\r\nUpgrade: {protocol}\r\n\r\n".encode()
        connection, response = await self._open_with(head, switch=True)
        try:
            if response.status == 101:
                yield response, connection, connection.chunks(response, read_timeout)
            else:
                yield response, None, _nothing()
        finally:
            connection.close()

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
