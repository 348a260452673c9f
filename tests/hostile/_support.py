"""Shared pieces of the hostile tests: a guarded server on loopback, raw sockets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from langshaw import LangshawProtocol
from strabo.serving import serve
from syncserver import SyncServer, create_app
from tests.conftest import SIMPLE_CREATE, load

SIMPLE = load("atomic-ucp.lsh")


def create(cid: str) -> dict[str, Any]:
    """A SimpleUCP Create instance as the wire carries it."""
    return {"action": "Create", "bindings": {"cid": cid, **SIMPLE_CREATE}}


@contextlib.asynccontextmanager
async def guarded(
    protocols: Sequence[LangshawProtocol],
    agents: Mapping[str, Sequence[str]],
    limits: Any = None,
    **options: Any,
) -> AsyncIterator[tuple[SyncServer, str]]:
    """A SyncServer served by uvicorn with every connection limit enforced, as
    ``strabo syncserver`` serves it; tokens are '<agent>-token'."""
    from syncserver import Limits, uvicorn_options  # here: the hostile tests share this file

    server = SyncServer.embedded(
        protocols, agents, tokens={a: f"{a}-token" for a in agents}, **options
    )
    limits = limits or Limits()
    app = create_app(server, limits=limits)
    async with serve(app, **uvicorn_options(limits)) as url:
        yield server, url


async def raw(
    url: str, rcvbuf: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A plain TCP connection to ``url``'s host and port (optionally with a small
    receive buffer, so that a client that does not read stalls the server soon)."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    return await asyncio.open_connection(sock=sock)


async def closed_by_server(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the server sends until it closes the connection (bounded)."""

    async def drain() -> bytes:
        data = b""
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionResetError:
                return data
            if not chunk:
                return data
            data += chunk

    return await asyncio.wait_for(drain(), seconds)
