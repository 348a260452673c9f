"""One connection of the lean HTTP/1.1 client (``syncserver.http1``): it writes
a request and reads its response, bounded as that module says (a head of at
most ``MAX_HEAD`` bytes, a body of at most the client's ``max_body``, each
event of a stream as much). A reused connection found closed before any byte
of an answer is :class:`_Stale`: the client sends the request again."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from syncserver._http1_wire import (
    MAX_BODY,
    MAX_HEAD,
    Bound,
    ProtocolError,
    Response,
    TooLarge,
    TransportError,
    chunked,
    digits,
    parse_head,
)

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
