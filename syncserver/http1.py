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

What it reads is bounded, so that a hostile or broken service cannot exhaust
the agent's memory: a response head of at most :data:`MAX_HEAD` bytes, a body
of at most ``max_body`` (:data:`MAX_BODY` by default) both as it arrives and
once decoded, and each event of a stream as much. Past a bound the answer is a
:class:`TooLarge` naming the URL and the bound, at once: a ``Content-Length``
or a chunk size over it is refused before its first byte, the rest is counted
as it arrives, and a gzip body is inflated no further than the bound.

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
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

from syncserver._http1_wire import (
    MAX_BODY,
    MAX_HEAD,
    Bound,
    ProtocolError,
    RequestError,
    Response,
    TooLarge,
    TransportError,
    chunked,
    decoded,
    digits,
    header_lines,
    is_event_stream,
    parse_head,
    size,
)

__all__ = [
    "MAX_BODY",
    "MAX_HEAD",
    "Bound",
    "Client",
    "Connection",
    "ProtocolError",
    "RequestError",
    "Response",
    "TooLarge",
    "TransportError",
    "decoded",
    "is_event_stream",
    "size",
]

#: Idle connections kept for reuse.
KEEP_IDLE = 8
#: Largest piece of a streamed body handed on at once (a chunk of a chunked
#: body, a ``Content-Length`` body of a stream, are read in such pieces).
_PIECE = 65536


class _Stale(TransportError):
    """A reused connection was found closed before any byte of the answer."""


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
            response, keep = parse_head(raw)
            if not 100 <= response.status < 200:
                return response, keep
            self.reused = False  # an interim answer: the request got there, never resend it
            if response.status == 101:
                if switch:
                    return response, True
                raise ProtocolError("the server switched protocols")

    async def body(
        self,
        method: str,
        response: Response,
        keep: bool,
        limit: int = MAX_BODY,
        url: str = "the server",
    ) -> tuple[bytes, bool]:
        """Read the body the head announces, at most ``limit`` bytes (a
        :class:`TooLarge` for ``url`` past it); whether the connection stays usable."""
        if method == "HEAD" or response.status in (204, 304):
            return b"", keep
        length = response.headers.get("content-length")
        if length is not None and not chunked(response):  # the usual case, read at once
            if not digits(length):
                raise ProtocolError(f"bad Content-Length {length[:40]!r}")
            if int(length) > limit:  # refused unread: not a byte of it is waited for
                raise TooLarge(url, limit, f" (its Content-Length says {int(length)} bytes)")
            try:
                return (await self.reader.readexactly(int(length)) if length != "0" else b""), keep
            except asyncio.IncompleteReadError:
                raise ProtocolError("the server closed the connection in mid-response") from None
            except (ConnectionError, OSError) as exc:
                raise TransportError(f"connection lost in mid-response: {exc!r}") from None
        parts = [chunk async for chunk in self.chunks(response, limit=limit, url=url)]
        framed = "content-length" in response.headers or chunked(response)
        return b"".join(parts), keep and framed

    async def chunks(
        self,
        response: Response,
        read_timeout: float | None = None,
        *,
        limit: int | None = None,
        url: str = "the server",
        events: bool = False,
    ) -> AsyncIterator[bytes]:
        """The body as it arrives, de-framed, in pieces of at most 64 KiB; with
        ``read_timeout``, a :class:`TransportError` when nothing arrives for that
        long. ``limit`` bounds the whole body, or with ``events`` each event of
        an event stream (the bytes between two blank lines), not the stream: a
        :class:`TooLarge` for ``url`` past it."""
        reader = self.reader
        loop = asyncio.get_running_loop()
        whole = None if events else limit  # counted in _chunks: a size is refused unread
        bound = Bound(limit, url, True) if events and limit is not None else None
        try:
            async with asyncio.timeout(None) as quiet:
                async for chunk in self._chunks(
                    response, reader, quiet, loop, read_timeout, whole, url
                ):
                    if bound is not None:
                        bound.add(chunk)
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
        limit: int | None,
        url: str,
    ) -> AsyncIterator[bytes]:
        if read_timeout is not None:
            quiet.reschedule(loop.time() + read_timeout)
        total = 0
        try:
            if chunked(response):
                while True:
                    line = await reader.readuntil(b"\r\n")
                    try:
                        size = int(line.split(b";", 1)[0].strip(), 16)
                    except ValueError:
                        raise ProtocolError(f"bad chunk size line {line[:40]!r}") from None
                    if size < 0:
                        raise ProtocolError(f"bad chunk size line {line[:40]!r}")
                    if size == 0:
                        trailers = 0
                        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                            trailers += len(line)  # none expected, ignored, bounded
                            if trailers > MAX_HEAD:
                                raise ProtocolError(f"the trailers exceed {MAX_HEAD} bytes")
                        return
                    total += size
                    if limit is not None and total > limit:  # refused before it is read
                        raise TooLarge(url, limit, f" (a chunk of {size} bytes takes it there)")
                    while size > _PIECE:  # a long chunk in pieces: a stream holds little
                        yield await reader.readexactly(_PIECE)
                        size -= _PIECE
                    data = await reader.readexactly(size + 2)
                    if data[-2:] != b"\r\n":
                        raise ProtocolError("a chunk does not end where its size says")
                    yield data[:-2]
                    if read_timeout is not None:
                        quiet.reschedule(loop.time() + read_timeout)
            elif "content-length" in response.headers:
                text = response.headers["content-length"]
                if not digits(text):
                    raise ProtocolError(f"bad Content-Length {text[:40]!r}")
                left = int(text)
                if limit is not None and left > limit:
                    raise TooLarge(url, limit, f" (its Content-Length says {left} bytes)")
                while left:
                    data = await reader.readexactly(min(left, _PIECE))
                    left -= len(data)
                    yield data
                    if read_timeout is not None:
                        quiet.reschedule(loop.time() + read_timeout)
            else:  # delimited by the end of the connection
                while data := await reader.read(_PIECE):
                    total += len(data)
                    if limit is not None and total > limit:
                        raise TooLarge(url, limit)
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


_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class Client:
    """Requests to one origin (``base_url``, optionally with a path prefix),
    each with the same extra ``headers``; answers of at most ``max_body`` bytes
    (:data:`MAX_BODY`), events of a stream as much."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        max_connections: int = 100,
        max_body: int = MAX_BODY,
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
        self.origin = f"{parts.scheme}://{authority}"  # for errors: never the query
        if max_body < 1:
            raise ValueError(f"max_body must be a positive number of bytes, not {max_body!r}")
        self.max_body = max_body
        fixed = {
            "Host": authority,
            "Accept": "*/*",
            "Accept-Encoding": "identity",
            "User-Agent": "strabo",
        }
        fixed.update(headers or {})
        self._fixed = header_lines(fixed)
        self._fixed_by_name = {name.lower(): (name, value) for name, value in fixed.items()}
        self._idle: list[Connection] = []
        self.max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    def _url(self, target: str) -> str:
        return self.origin + target.partition("?")[0]

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
            lines = header_lines(dict(merged.values()))
        target = self._target(path, params)
        data = self._request(method, target, payload, lines)
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
                        response, keep = await self._exchange(
                            connection, method, data, self._url(target)
                        )
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
        self, connection: Connection, method: str, data: bytes, url: str
    ) -> tuple[Response, bool]:
        await connection.send(data)
        response, keep = await connection.head()
        connection.reused = False  # answered: a failure from here on is not stale
        response.body, keep = await connection.body(method, response, keep, self.max_body, url)
        coding = response.headers.get("content-encoding", "identity").lower()
        if coding != "identity" and response.body:  # an empty body is empty in any coding
            response.body = decoded(response.body, coding, self.max_body, url)
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
        target = self._target(path, params)
        url = self._url(target)
        head = self._request(method, target, None)
        connection, response = await self._open_with(head, False, url)
        events = is_event_stream(response)
        try:
            yield response, connection.chunks(
                response, read_timeout, limit=self.max_body, url=url, events=events
            )
        finally:
            connection.close()

    async def _open_with(
        self, head: bytes, switch: bool, url: str
    ) -> tuple[Connection, Response]:
        """A connection of its own, ``head`` sent on it and the answer's head read
        (and its body too, unless a ``101`` when ``switch``), within the timeout."""
        connection = await self._open()
        try:
            async with asyncio.timeout(self.timeout):
                await connection.send(head)
                response, keep = await connection.head(switch=switch)
                if switch and response.status != 101:
                    response.body, _ = await connection.body(
                        "GET", response, keep, self.max_body, url
                    )
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
        target = self._target(path, params)
        url = self._url(target)
        head = self._request("GET", target, None)
        head = head[:-2] + f"Connection: Upgrade\r\nUpgrade: {protocol}\r\n\r\n".encode()
        connection, response = await self._open_with(head, True, url)
        try:
            if response.status == 101:  # an event stream (the SyncServer's channel)
                chunks = connection.chunks(
                    response, read_timeout, limit=self.max_body, url=url, events=True
                )
                yield response, connection, chunks
            else:
                yield response, None, _nothing()
        finally:
            connection.close()

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
