"""The one HTTP client interface of the project's agents: the proxy's requests
to a service, the peers' messages to each other (the SyncServer's executor
speaks through the same lean client, ``syncserver.http1``, with streams and
channels on top).

One interface (:class:`Client`: ``request`` and ``aclose``), two
implementations chosen by :func:`open_client`, and one mapping of what can go
wrong: :class:`NoAnswer` (refused, reset, timed out, garbled; :class:`TooLarge`,
an answer longer than ``max_body``) and :class:`Unsendable` (a body that is not
JSON, a header with a line break). When to try again is ``syncserver.retry``.

Both read at most ``max_body`` bytes of an answer (``http1.MAX_BODY``, 64 MiB,
by default), as it arrives and once decoded, and as much of each event of a
stream: a service, hostile or broken, cannot make an agent hold more.

The lean client (``syncserver.http1``) by default: a checkout through the
bridge makes as many requests to the merchant as a direct client does, and
each costs the proxy's process its client's time: with httpx 0.5 to 0.7 ms more
than with the lean client on the benchmark machine (``bench/proxy.py``: its "One
small JSON request" line, and its two direct clients). httpx where the lean
client does not do: a caller's ``transport`` (tests, mocks, custom TLS),
credentials in the URL, and a proxy the environment names for the service
(``HTTPS_PROXY`` and friends, which httpx honours).
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from syncserver import http1


class Answer(Protocol):
    """What a caller reads of a response (an ``httpx.Response`` is one, and an
    ``http1.Response``)."""

    @property
    def status_code(self) -> int: ...
    @property
    def reason_phrase(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...  # read with lower-case names
    @property
    def content(self) -> bytes: ...
    @property
    def text(self) -> str: ...
    def json(self) -> Any: ...


class NoAnswer(Exception):
    """The service gave no usable answer (refused, reset, timed out, garbled)."""


class TooLarge(NoAnswer):
    """An answer longer than the client reads (``max_body``, before or after
    decoding): refused as it arrived, its connection closed. It was sent and
    answered (never "cannot connect"): a caller resends it only as it would any
    request that reached the service."""


class Unsendable(Exception):
    """The request cannot go on the wire: a body that is not JSON (NaN, a set),
    a header with a line break in it."""


class Client(Protocol):
    """Requests to one origin: ``body`` is sent as JSON, or ``content`` as it is
    (already JSON)."""

    base_url: str

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        *,
        content: bytes | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Answer: ...

    def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        read_timeout: float | None = None,
    ) -> contextlib.AbstractAsyncContextManager[tuple[http1.Response, AsyncIterator[bytes]]]:
        """A response read as it arrives (its body left empty: the chunks are
        the body); opening it is bounded by the timeout, reading it by
        ``read_timeout``."""
        ...

    async def aclose(self) -> None: ...


class LeanClient:
    """Keep-alive HTTP/1.1 (``syncserver.http1``). A connection the service closed
    while idle is replaced and the request sent again, which the idempotency key
    of every proxy request makes safe."""

    def __init__(
        self,
        base_url: str,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float | None = None,
        max_body: int = http1.MAX_BODY,
    ) -> None:
        self.base_url = base_url
        self.http = http1.Client(
            base_url,
            headers,
            timeout=timeout,
            connect_timeout=connect_timeout or timeout,
            max_body=max_body,
        )

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        *,
        content: bytes | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Answer:
        try:
            return await self.http.request(
                method, path, json_body=body, headers=headers, content=content, params=params
            )
        except http1.TooLarge as exc:
            raise TooLarge(str(exc)) from None
        except http1.TransportError as exc:
            raise NoAnswer(str(exc)) from None
        except http1.RequestError as exc:  # a header's CR or LF, a body not JSON
            raise Unsendable(str(exc)) from None

    def ready(self) -> bool:
        """Whether :meth:`start` would write now (``http1.Client.ready``)."""
        return self.http.ready()

    def start(
        self, method: str, path: str, content: bytes, headers: Mapping[str, str]
    ) -> asyncio.Task[http1.Response] | None:
        """The request written now, if a kept connection is idle
        (``http1.Client.start``); :meth:`answer` reads what it yields as
        :meth:`request` would answer. None: send it with :meth:`request`."""
        return self.http.start(method, path, content=content, headers=headers)

    @staticmethod
    async def answer(started: Awaitable[http1.Response]) -> Answer:
        """The answer to a request :meth:`start` wrote (awaited in the caller's
        own task: no task more per request)."""
        try:
            return await started
        except http1.TooLarge as exc:
            raise TooLarge(str(exc)) from None
        except http1.TransportError as exc:
            raise NoAnswer(str(exc)) from None

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[tuple[http1.Response, AsyncIterator[bytes]]]:
        try:
            async with self.http.stream(
                method, path, params=params, read_timeout=read_timeout
            ) as (response, chunks):
                yield response, _lean_chunks(chunks)
        except http1.TooLarge as exc:
            raise TooLarge(str(exc)) from None
        except http1.TransportError as exc:
            raise NoAnswer(str(exc)) from None

    async def aclose(self) -> None:
        await self.http.aclose()


class HttpxClient:
    """httpx, with the given ``transport`` or its own (honouring the environment's
    proxies)."""

    def __init__(
        self,
        base_url: str,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float | None = None,
        max_body: int = http1.MAX_BODY,
    ) -> None:
        if max_body < 1:
            raise ValueError(f"max_body must be a positive number of bytes, not {max_body!r}")
        self.base_url = base_url
        self.timeout = timeout
        self.max_body = max_body
        parts = urlsplit(base_url)  # for errors: never the credentials nor the query
        self._origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=connect_timeout or timeout),
            transport=transport,
            headers=dict(headers or {}),
        )

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        *,
        content: bytes | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Answer:
        sent: dict[str, Any] = {"json": body, "headers": headers}
        if content is not None:  # JSON already
            typed = {"content-type": "application/json", **(headers or {})}
            sent = {"content": content, "headers": typed}
        try:
            # httpx's timeout bounds each step (connect, each read): a server
            # trickling its answer would hold the caller for ever. As the lean
            # client's, the whole exchange has ``timeout`` seconds.
            async with asyncio.timeout(self.timeout):
                async with self.http.stream(
                    method, self.base_url + path, params=params, **sent
                ) as answer:
                    await self._read(answer, self._url(path))
                return answer
        except TimeoutError:
            raise NoAnswer(f"no answer within {self.timeout}s") from None
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # Nothing went out: said as the lean client says it, so that a caller
            # that resends only what was never sent (a2a_transport) knows it.
            where = urlsplit(self.base_url).netloc or self.base_url
            raise NoAnswer(f"cannot connect to {where}: {_reason(exc)}") from None
        except httpx.LocalProtocolError as exc:  # a header httpx will not send
            raise Unsendable(str(exc)) from None
        except (httpx.TransportError, httpx.DecodingError) as exc:  # timeouts included
            raise NoAnswer(_reason(exc)) from None
        except (TypeError, ValueError) as exc:  # json.dumps
            raise Unsendable(str(exc)) from None

    def _url(self, path: str) -> str:
        return self._origin + urlsplit(self.base_url).path + path.partition("?")[0]

    async def _read(self, answer: httpx.Response, url: str) -> None:
        """Read ``answer``'s body, at most ``max_body`` bytes as it arrives and
        once decoded (a :class:`TooLarge` past either): gzip and deflate are
        inflated here no further than the bound, where httpx would inflate each
        piece whole; any other coding (httpx asks for brotli or zstd when their
        packages are installed) by httpx, counted piece by piece."""
        limit = self.max_body
        declared = answer.headers.get("content-length", "")
        coding = answer.headers.get("content-encoding", "identity").strip().lower()
        parts: list[bytes] = []
        size = 0
        try:
            bodiless = answer.request.method == "HEAD" or answer.status_code in (204, 304)
            if declared.isascii() and declared.isdigit() and int(declared) > limit and not bodiless:
                raise http1.TooLarge(url, limit, f" (its Content-Length says {declared} bytes)")
            if coding in ("identity", "gzip", "x-gzip", "deflate"):
                async for chunk in answer.aiter_raw():
                    size += len(chunk)
                    if size > limit:
                        raise http1.TooLarge(url, limit)
                    parts.append(chunk)
                body = b"".join(parts)
                if coding != "identity" and body:
                    body = http1.decoded(body, coding, limit, url)
            else:
                async for chunk in answer.aiter_bytes():
                    size += len(chunk)
                    if size > limit or answer.num_bytes_downloaded > limit:
                        raise http1.TooLarge(url, limit, f" once its {coding} is decoded")
                    parts.append(chunk)
                body = b"".join(parts)
        except httpx.StreamConsumed:  # a transport's answer, in memory already (mocks)
            body = answer.content
            if len(body) > limit:
                raise TooLarge(str(http1.TooLarge(url, limit))) from None
        except http1.TooLarge as exc:
            raise TooLarge(str(exc)) from None
        except http1.ProtocolError as exc:  # a gzip body that does not inflate
            raise NoAnswer(str(exc)) from None
        answer._content = body  # as httpx's own read() keeps it: .content, .json()

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[tuple[http1.Response, AsyncIterator[bytes]]]:
        timeout = httpx.Timeout(self.timeout, read=read_timeout)
        try:
            async with self.http.stream(
                method, self.base_url + path, params=params, timeout=timeout
            ) as answer:
                headers = {k.lower(): v for k, v in answer.headers.items()}
                response = http1.Response(answer.status_code, answer.reason_phrase, headers)
                events = http1.is_event_stream(response)
                bound = http1.Bound(self.max_body, self._url(path), events)
                yield response, _httpx_chunks(answer, bound)
        except httpx.HTTPError as exc:
            raise NoAnswer(_reason(exc)) from None

    async def aclose(self) -> None:
        await self.http.aclose()


def _reason(exc: Exception) -> str:
    """What an httpx error says (some say nothing but their type)."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _lean_chunks(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield chunk
    except http1.TooLarge as exc:
        raise TooLarge(str(exc)) from None
    except http1.TransportError as exc:
        raise NoAnswer(str(exc)) from None


async def _httpx_chunks(answer: httpx.Response, bound: http1.Bound) -> AsyncIterator[bytes]:
    try:
        async for chunk in answer.aiter_raw():
            bound.add(chunk)
            yield chunk
    except http1.TooLarge as exc:
        raise TooLarge(str(exc)) from None
    except httpx.HTTPError as exc:
        raise NoAnswer(_reason(exc)) from None


def open_client(
    base_url: str,
    timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    connect_timeout: float | None = None,
    max_body: int = http1.MAX_BODY,
) -> Client:
    """The client for ``base_url``: the lean one unless a ``transport`` is given,
    the URL carries credentials (httpx sends them as Basic auth), or the
    environment routes the service through a proxy. Either reads at most
    ``max_body`` bytes of an answer (:class:`TooLarge` past it)."""
    parts = urlsplit(base_url)
    if transport is not None or parts.username or parts.password or _proxied(base_url):
        return HttpxClient(base_url, timeout, transport, headers, connect_timeout, max_body)
    return LeanClient(base_url, timeout, headers, connect_timeout, max_body)


def _proxied(url: str) -> bool:
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    if parts.scheme not in proxies and "all" not in proxies:
        return False
    host = parts.hostname or ""
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    return not bypass(host, proxies)
