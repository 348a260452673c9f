"""A running MAS for tests: a SyncServer in-process or over real HTTP on loopback,
or no server at all: agents peer to peer over real HTTP on loopback ports."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from langshaw import LangshawProtocol
from peach import Executor, LocalExecutor, PeachAdapter, SyncExecutor
from peach.peer import Directory, PeerExecutor
from strabo import serve
from strabo.serving import free_port
from syncserver import SyncServer, create_app, uvicorn_options

#: For a test's httpx client that a test leaves idle between requests. httpx drops
#: an idle connection after 5 s, and uvicorn closes one after 5 s (its default
#: keep-alive timeout, and Limits.keep_alive_timeout): a request sent on a
#: connection idle for about 5 s can cross the server's close and fail with
#: ReadError. Idle connections dropped well before the server's timeout cannot.
CLIENT_LIMITS = httpx.Limits(keepalive_expiry=1.0)


class Harness:
    """One MAS named 'default'; agents' tokens are '<name>-token'.

    ``kind`` is "local" (LocalExecutor), "http" (SyncExecutor to a served
    SyncServer) or "peer" (a PeerExecutor per agent, each serving its endpoint
    on a loopback port, with its log in memory; no SyncServer runs)."""

    def __init__(
        self,
        kind: str,
        protocols: Sequence[LangshawProtocol],
        agents: Mapping[str, Sequence[str]],
        **options: Any,
    ) -> None:
        self.kind = kind
        self.protocols = {p.name: p for p in protocols}
        self.server = SyncServer.embedded(
            protocols, agents, tokens={a: f"{a}-token" for a in agents}, **options
        )
        self.url: str | None = None
        self._stack = contextlib.AsyncExitStack()
        self.adapters: list[PeachAdapter] = []
        self._executors: dict[str, Executor] = {}
        pins = options.get("acts_for") or {}
        self.directory = Directory.of(
            protocols,
            {
                a: {
                    "roles": list(roles),
                    "token": f"{a}-token",
                    "url": f"http://127.0.0.1:{free_port()}",
                    **({"acts_for": pins[a]} if a in pins else {}),
                }
                for a, roles in agents.items()
            },
        )

    async def __aenter__(self) -> Harness:
        if self.kind == "http":
            app, options = create_app(self.server), uvicorn_options(self.server.config.limits)
            self.url = await self._stack.enter_async_context(serve(app, **options))
        elif self.kind == "peer":
            pass  # each agent serves its own endpoint when its first adapter starts
        else:
            await self.server.start()
            self._stack.push_async_callback(self.server.stop)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for adapter in reversed(self.adapters):
            await adapter.stop()
        await self._stack.aclose()

    def executor(self, agent: str, fresh: bool = False) -> Executor:
        """The agent's executor: one per agent, shared by its adapters."""
        if fresh or agent not in self._executors:
            if self.kind == "http":
                assert self.url is not None
                executor: Executor = SyncExecutor(self.url, token=f"{agent}-token")
            elif self.kind == "peer":
                executor = PeerExecutor(agent, self.directory)
            else:
                executor = LocalExecutor(self.server)
            if fresh:
                return executor
            self._executors[agent] = executor
        return self._executors[agent]

    def adapter(self, agent: str, role: str, protocol: str | None = None) -> PeachAdapter:
        chosen = self.protocols[protocol] if protocol else next(iter(self.protocols.values()))
        adapter = PeachAdapter(agent, chosen, role, self.executor(agent))
        self.adapters.append(adapter)
        return adapter

    def client(self, agent: str | None) -> httpx.AsyncClient:
        assert self.url is not None, "an HTTP harness is needed"
        headers = {"Authorization": f"Bearer {agent}-token"} if agent else {}
        return httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=10, limits=CLIENT_LIMITS
        )


async def until(predicate: Any, event: asyncio.Event, seconds: float = 5.0) -> None:
    """Wait until ``predicate()`` holds, re-checking whenever ``event`` is set."""

    async def wait() -> None:
        while not predicate():
            event.clear()
            if predicate():
                return
            await event.wait()

    await asyncio.wait_for(wait(), seconds)


@contextlib.asynccontextmanager
async def harness(
    kind: str,
    protocols: Sequence[LangshawProtocol],
    agents: Mapping[str, Sequence[str]],
    **options: Any,
) -> AsyncIterator[Harness]:
    async with Harness(kind, protocols, agents, **options) as h:
        yield h
