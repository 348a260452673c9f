"""Serve an ASGI app with uvicorn inside the running event loop.

Tests, benchmarks, ``strabo demo`` and peer-to-peer agents need real servers
in-process, without spawning processes; this is the one place that knows how to start
uvicorn on a free port, wait until it really listens, and stop it cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn


class _Server(uvicorn.Server):
    """A uvicorn server that announces, through an event, that it accepts requests."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.ready.set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def serve(
    app: Any,
    host: str = "127.0.0.1",
    port: int | None = None,
    **config: Any,
) -> AsyncIterator[str]:
    """Run ``app`` until the block exits; yields its base URL (no trailing slash).

    The server socket is bound before uvicorn starts, so the port cannot be taken
    between choosing and binding it, and the URL is usable as soon as it is yielded.
    """
    # IPPROTO_TCP, not 0: asyncio turns TCP_NODELAY on only for sockets that say
    # so, and without it every small response waits ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port or 0))
    bound_port = sock.getsockname()[1]
    settings: dict[str, Any] = {
        "log_level": "warning",
        "lifespan": "on",
        "timeout_graceful_shutdown": 5,
    }
    settings.update(config)
    server = _Server(uvicorn.Config(app, **settings))
    server.install_signal_handlers = lambda: None  # type: ignore[attr-defined]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    ready = asyncio.create_task(server.ready.wait())
    try:
        await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if not server.ready.is_set():
            task.result()  # surface the start-up error, if it raised one
            raise RuntimeError(f"server on {host}:{bound_port} stopped before it started")
        yield f"http://{host}:{bound_port}"
    finally:
        ready.cancel()
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
