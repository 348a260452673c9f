"""How peers reach each other: HTTP, or an in-memory network for tests.

A transport does two things: it lets an agent receive (its ``endpoint``, the
one function that authenticates, parses and answers a request, whatever
carried it), and it posts a signed body to a peer. :class:`HTTPTransport`
serves the endpoint on the peer's ``url`` with a small HTTP/1.1 server of its
own (``peach.peer._app``: no uvicorn, no Starlette, whose per-request cost was
the larger part of a peer round trip) and posts with the project's lean
keep-alive client (``syncserver.client``), one kept per peer;
:class:`MemoryNetwork` calls the endpoint directly, and can drop, duplicate and
delay messages (seeded, so a failing run can be replayed) to test what
at-least-once delivery promises.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from peach.peer._app import PeerServer
from peach.peer._wire import Endpoint
from peach.peer.directory import Peer
from syncserver.client import (
    Answer,
    Client,
    LeanClient,
    NoAnswer,
    Unsendable,
    open_client,
)


class Unreachable(Exception):
    """The peer did not answer (not listening, connection lost, timed out): the
    message may or may not have arrived, so it is sent again later."""


class Transport(Protocol):
    async def listen(self, peer: Peer, endpoint: Endpoint) -> None:
        """Start receiving as ``peer`` (until :meth:`close`)."""

    async def post(
        self, peer: Peer, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, Any]]:
        """Send ``body`` to ``peer``; raises :class:`Unreachable` without an answer."""
        ...

    async def close(self) -> None: ...


@dataclass
class Faults:
    """What a :class:`MemoryNetwork` does to each request, by probability: lose it
    before it arrives (``drop``), lose the answer after it was handled
    (``lose_answer``), deliver it twice (``duplicate``), hold it for up to
    ``delay`` seconds first (which reorders messages)."""

    drop: float = 0.0
    lose_answer: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    seed: int = 0


class MemoryNetwork:
    """Peers in one process, reaching each other by name. Share one network
    between the executors of a test; give it :class:`Faults` to misbehave."""

    def __init__(self, faults: Faults | None = None, timeout: float = 10.0) -> None:
        self.faults = faults or Faults()
        # As long as HTTPTransport waits for an answer: a peer whose endpoint
        # never returns (stuck in a handler) is unreachable, not waited on for ever.
        self.timeout = timeout
        self._random = random.Random(self.faults.seed)
        self._endpoints: dict[str, Endpoint] = {}
        self.requests = 0  # handled, for tests to wait on progress

    async def listen(self, peer: Peer, endpoint: Endpoint) -> None:
        self._endpoints[peer.name] = endpoint

    def disconnect(self, name: str) -> None:
        """The agent ``name`` stops receiving (as if its process died)."""
        self._endpoints.pop(name, None)

    async def post(
        self, peer: Peer, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, Any]]:
        faults, chance = self.faults, self._random.random
        if faults.delay:
            await asyncio.sleep(chance() * faults.delay)  # simulated latency: reorders
        endpoint = self._endpoints.get(peer.name)
        if endpoint is None:
            raise Unreachable(f"{peer.name} is not listening")
        if chance() < faults.drop:
            raise Unreachable(f"the request to {peer.name} was lost")
        answer = await self._call(peer, endpoint, path, headers, body)
        self.requests += 1
        if chance() < faults.duplicate:
            answer = await self._call(peer, endpoint, path, headers, body)
        if chance() < faults.lose_answer:
            raise Unreachable(f"the answer of {peer.name} was lost")
        return answer

    async def _call(
        self, peer: Peer, endpoint: Endpoint, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        try:
            async with asyncio.timeout(self.timeout):
                return await endpoint(path, headers, body)
        except TimeoutError:
            raise Unreachable(
                f"{peer.name} did not answer within {self.timeout:g} s"
            ) from None

    async def close(self) -> None:
        """Endpoints are removed by :meth:`disconnect`; the network itself stays."""


class HTTPTransport:
    """Peers over HTTP: this agent serves its endpoint on the ``url`` its entry in
    the directory gives, and posts to the peers' ``url``."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._clients: dict[str, Client] = {}  # per peer url (syncserver.client)
        self._server: PeerServer | None = None
        self.url: str | None = None

    async def listen(self, peer: Peer, endpoint: Endpoint) -> None:
        if peer.url is None:
            raise Unreachable(
                f"agent {peer.name!r} has no url in the directory: give it one to listen on"
            )
        parts = urlsplit(peer.url)
        server = PeerServer(endpoint)
        try:
            self.url = await server.start(parts.hostname or "127.0.0.1", parts.port)
        except OSError as exc:
            raise Unreachable(f"cannot listen on {peer.url}: {exc.strerror or exc}") from None
        self._server = server

    def client(self, url: str) -> Client:
        """The client for a peer at ``url`` (kept: its connections stay open)."""
        found = self._clients.get(url)
        if found is None:
            try:
                found = self._clients[url] = open_client(url.rstrip("/"), self.timeout)
            except ValueError as exc:  # not an http(s) URL
                raise Unreachable(f"cannot post to {url}: {exc}") from None
        return found

    async def post(
        self, peer: Peer, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, Any]]:
        if peer.url is None:
            raise Unreachable(f"agent {peer.name!r} has no url in the directory")
        client = self.client(peer.url)
        request = client.request("POST", f"/peer/{path}", headers=headers, content=body)
        return await self._answer(peer, request)

    def ready(self, peer: Peer) -> bool:
        """Whether :meth:`start` would write to ``peer`` now."""
        client = self._clients.get(peer.url or "")
        return isinstance(client, LeanClient) and client.ready()

    def start(
        self, peer: Peer, path: str, body: bytes, headers: Mapping[str, str]
    ) -> asyncio.Future[Any] | None:
        """:meth:`post`'s request, written before this returns when a kept
        connection to ``peer`` is idle; None when it is not (post it then).
        :meth:`finish` reads its answer; cancelling it cancels the request."""
        client = self._clients.get(peer.url or "")
        if not isinstance(client, LeanClient):
            return None
        return client.start("POST", f"/peer/{path}", body, headers)

    async def finish(
        self, peer: Peer, started: asyncio.Future[Any]
    ) -> tuple[int, dict[str, Any]]:
        """The answer to the request :meth:`start` wrote, as :meth:`post` gives it."""
        return await self._answer(peer, LeanClient.answer(started))

    @staticmethod
    async def _answer(peer: Peer, request: Awaitable[Answer]) -> tuple[int, dict[str, Any]]:
        try:
            response = await request
        except (NoAnswer, Unsendable) as exc:
            raise Unreachable(f"{peer.name} at {peer.url}: {exc}") from None
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        return response.status_code, answer

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
        if self._server is not None:
            await self._server.close()
            self._server = None
