"""What the hostile tests of the proxy's HTTP client share: a socket server each
test scripts byte by byte (:class:`RawServer`, which fails the test if a
connection is left open once the proxy has stopped), and a proxy in front of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ssl
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import LocalExecutor, PeachAdapter
from strabo.proxy import (
    ProxyAdapter,
    ProxyUnreachable,
)
from syncserver import SyncServer
from tests.conftest import paper
from tests.harness import until

SIMPLE = paper("atomic-ucp.lsh")  # untyped: what is sent is what is bound
CREATE = dict(
    line_items=[{"id": "roses", "quantity": 1}], currency="USD", buyer=None, payment_pref={},
    discount_codes=None, fulfillment_pref=None,
)
SENT = {"line_items": [{"id": "roses", "quantity": 1}], "currency": "USD", "payment_pref": {}}
CREATED = b'{"id": "chk_1"}'
WAIT = 3.0  # seconds: a bound on every wait, never a delay
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lean client is the default only where no proxy is configured. Also:
    what earlier tests of this worker left for the garbage collector is
    collected first, quietly, so that a socket they dropped is not taken for
    one this test leaked (these tests fail on an unclosed socket)."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


# A scripted socket server ---------------------------------------------------------------


@dataclass
class Req:
    """One request as the server read it off the wire."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    connection: int
    raw: bytes

    def header(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n == name.lower()]

    @property
    def key(self) -> str:
        [key] = self.header("idempotency-key")
        return key


class Conn:
    """The server's end of one connection, for a script to read and write."""

    def __init__(self, server: RawServer, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, index: int) -> None:
        self.server, self.reader, self.writer, self.index = server, reader, writer, index
        self.closed = False

    async def request(self) -> Req | None:
        """The next request on this connection; None when the client closed it."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        lines = head.decode("latin-1")[:-4].split("\r\n")
        method, target, _ = lines[0].split(" ")
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name.strip().lower(), value.strip()))
        length = int(dict(headers).get("content-length", "0"))
        body = await self.reader.readexactly(length)
        req = Req(method, target, headers, body, self.index, head + body)
        self.server.requests.append(req)
        self.server.changed.set()
        return req

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def close(self) -> None:
        self.closed = True
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


Script = Callable[[Conn], Awaitable[None]]


@dataclass
class RawServer:
    """An asyncio TCP (or TLS) server on loopback running ``script`` on each
    connection. After the script, a connection it left open is held until the
    client closes it; bytes the client sends meanwhile are kept in ``unread``.
    On exit (without an error), every connection must have been closed by then:
    a connection the client leaked fails the test."""

    script: Script
    tls: ssl.SSLContext | None = None
    requests: list[Req] = field(default_factory=list)
    connections: int = 0
    open: int = 0
    unread: list[bytes] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # for scripts that hold
    url: str = ""
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        return self

    async def __aexit__(self, kind: object, exc: object, tb: object) -> None:
        self.release.set()
        try:
            if kind is None:
                await self.wait(lambda: self.open == 0, "every connection closed")
                assert self.unread == [], f"unread bytes from the client: {self.unread}"
        finally:
            self._server.close()
            for writer in self._writers:
                writer.close()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def wait(self, predicate: Callable[[], bool], what: str, seconds: float = WAIT) -> None:
        try:
            await until(predicate, self.changed, seconds)
        except TimeoutError:
            raise AssertionError(
                f"not {what} within {seconds}s: {self.open} connection(s) open, "
                f"{len(self.requests)} request(s)"
            ) from None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        conn = Conn(self, reader, writer, self.connections)
        self.connections += 1
        self.open += 1
        self.changed.set()
        try:
            await self.script(conn)
            if not conn.closed:
                rest = await reader.read()  # until the client closes
                if rest:
                    self.unread.append(rest)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self.open -= 1
            self.changed.set()
            self._tasks.discard(task)

    def keys(self) -> list[str]:
        return [r.key for r in self.requests]


def http(status: str = "201 Created", body: bytes = CREATED, *headers: str,
         version: str = "HTTP/1.1", length: bool = True) -> bytes:
    """A response, with its Content-Length unless ``length`` is false."""
    lines = [f"{version} {status}", *headers]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked(*parts: bytes, extension: str = "", trailers: str = "") -> bytes:
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(p), extension.encode(), p) for p in parts)
    return out + b"0\r\n" + trailers.encode() + b"\r\n"


def keep_alive(*answers: bytes) -> Script:
    """Every request, on any connection, gets the next of ``answers`` (the last
    repeats); connections stay open."""

    async def script(conn: Conn) -> None:
        while await conn.request() is not None:
            conn.send(answers[min(len(conn.server.requests), len(answers)) - 1])

    return script


def once(data: bytes, *, close: bool) -> Script:
    """Read one request, send ``data``, then close or hold the connection."""

    async def script(conn: Conn) -> None:
        if await conn.request() is None:
            return
        conn.send(data)
        if close:
            await conn.close()

    return script


# A proxy in front of it -------------------------------------------------------------------


class Bridge:
    """A Platform and a Business proxy on an in-process SyncServer; the proxy
    talks to ``url``. No retries unless asked: one proxy request, one try."""

    def __init__(self, url: str, **options: Any) -> None:
        self.server = SyncServer.embedded(
            [SIMPLE], {"platform": ["Platform"], "business": ["Business"]}
        )
        executor = LocalExecutor(self.server)
        self.platform = PeachAdapter("platform", SIMPLE, "Platform", executor)
        settings: dict[str, Any] = {"retries": 0, "backoff": 0.001, "timeout": 2.0, **options}
        self.proxy = ProxyAdapter(
            "business", SIMPLE, "Business", executor, base_url=url, internal=["cid"], **settings
        )
        self.proxy.route("Create->>Created", "POST-/c", failure="Failed")
        self.proxy.route("Complete->>Completed", "POST-/c/{id}/complete")
        self.proxy.route("Cancel", "DELETE-/c/{id}")
        self.seen: list[ActionInstance] = []
        self.changed = asyncio.Event()
        # Every client the proxy used, kept referenced: a client it forgot to close
        # must leave its connections open (for RawServer to see), not have the
        # garbage collector close them.
        self.clients: list[Any] = []

        @self.platform.observation()
        async def observe(action: ActionInstance, performer: str) -> None:
            self.seen.append(action)
            self.changed.set()

    async def create(self, key: str = "key-1", **extra: Any) -> Any:
        bindings = {"cid": "c-1", **CREATE, **extra}
        try:
            return await self.proxy.request("Create", bindings, idempotency_key=key)
        finally:
            self.keep_client()

    def keep_client(self) -> None:
        if self.proxy._client is not None and self.proxy._client not in self.clients:
            self.clients.append(self.proxy._client)

    async def round_trip(self) -> ActionInstance:
        """The Platform's Create, and what the proxy answered it with."""
        await self.platform.attempt([self.platform.initiating()[0].bind(**CREATE)])
        await until(lambda: bool(self.seen[1:]), self.changed, WAIT)
        await self.proxy.drain()
        return self.seen[1]

    @property
    def client(self) -> Any:
        return self.proxy._client


@contextlib.asynccontextmanager
async def bridged(url: str, **options: Any) -> AsyncIterator[Bridge]:
    bridge = Bridge(url, **options)
    async with bridge.server, bridge.proxy, bridge.platform:
        bridge.keep_client()
        yield bridge


async def unreachable(bridge: Bridge, key: str = "key-1") -> ProxyUnreachable:
    with pytest.raises(ProxyUnreachable) as caught:
        await bridge.create(key)
    return caught.value


