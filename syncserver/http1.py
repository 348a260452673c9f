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

from syncserver._http1_connection import Connection, _nothing, _Stale
from syncserver._http1_wire import (
    MAX_BODY,
    MAX_HEAD,
    Bound,
    ProtocolError,
    RequestError,
    Response,
    TooLarge,
    TransportError,
    decoded,
    header_lines,
    is_event_stream,
    size,
)
from syncserver._places import Places

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
        self._places = Places(max_connections)
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
        target = self._target(path, params)
        data = self._request(method, target, payload, self._lines(headers))
        return await self._run(method, data, self._url(target), None)

    def _lines(self, headers: Mapping[str, str] | None) -> str | None:
        """The header lines of a request with ``headers`` of its own (None: the fixed ones)."""
        if not headers:
            return None
        merged = dict(self._fixed_by_name)
        merged.update((name.lower(), (name, value)) for name, value in headers.items())
        return header_lines(dict(merged.values()))

    def ready(self) -> bool:
        """Whether :meth:`start` would write now: a kept connection and a place free."""
        return not self._closed and bool(self._idle) and self._places.free > 0

    def start(
        self, method: str, path: str, *, content: bytes, headers: Mapping[str, str]
    ) -> asyncio.Task[Response] | None:
        """Write a request now, before returning, when a kept connection is idle
        and a place is free; the task reads its answer (as :meth:`request`
        would, a stale connection's request sent again on a new one). None when
        the request would have to wait for either: send it with :meth:`request`.

        A caller that goes on computing after it (a peer that sent what it just
        logged, then updates its own view) has the service at work meanwhile,
        where a task would not even have started."""
        if self._closed:
            return None
        connection = None
        while self._idle and connection is None:
            candidate = self._idle.pop()
            if candidate.usable():
                connection = candidate
            else:
                candidate.close()
        if connection is None:
            return None
        if not self._places.take_now():
            self._idle.append(connection)
            return None
        target = self._target(path, None)
        data = self._request(method, target, content, self._lines(headers))
        try:
            connection.writer.write(data)
        except (ConnectionError, OSError, RuntimeError):
            connection.close()
            self._places.give()
            return None
        connection.reused = True
        held = [connection]
        task = asyncio.ensure_future(self._run(method, data, self._url(target), held))

        def unrun(task: asyncio.Task[Response]) -> None:
            # Cancelled before its first step, _run never ran (nor its finally):
            # its connection and place are still held here.
            if held:
                held.pop().close()
                self._places.give()

        task.add_done_callback(unrun)
        return task

    async def _run(
        self, method: str, data: bytes, url: str, written: list[Connection] | None
    ) -> Response:
        """The exchange of one request, ``data``: on a connection taken here, or
        on the one in ``written``, where it went out already (with its place
        taken; taken out of the list as this starts, see ``start``)."""
        connection = written.pop() if written else None
        placed = sent = connection is not None
        try:
            # The wait for one of the client's places is part of the time allowed:
            # in a burst past them, a caller's deadline still holds.
            async with asyncio.timeout(self.timeout):
                if not placed:
                    await self._places.take()
                    placed = True
                try:
                    while True:  # a stale kept connection is replaced, the request sent again
                        try:
                            if connection is None:
                                connection = await self._take()
                                sent = True
                                await connection.send(data)  # (a stale one fails here too)
                            response, keep = await self._exchange(connection, method, url)
                        except _Stale:
                            if connection is not None:
                                connection.close()
                            connection = None
                            continue  # a fresh connection next: _take opens one
                        except BaseException:  # (cancelled in send's drain too: closed)
                            if connection is not None:
                                connection.close()
                            raise
                        if keep:
                            self._give_back(connection)
                        else:
                            connection.close()
                        return response
                finally:
                    self._places.give()
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
        self, connection: Connection, method: str, url: str
    ) -> tuple[Response, bool]:
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
