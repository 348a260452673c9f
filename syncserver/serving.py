"""Serve an ASGI app with uvicorn inside the running event loop.

Tests, benchmarks, ``strabo demo`` and peer-to-peer agents need real servers
in-process, without spawning processes; this is the one place that knows how to start
uvicorn on a free port, wait until it really listens, and stop it cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn


class _Server(uvicorn.Server):
    """A uvicorn server that announces, through an event, that it accepts requests."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # An embedded server is a part of a program, not the program: Ctrl-C is
        # the program's to handle (it cancels the run, which stops this server
        # last), not uvicorn's, which would stop this server under agents still
        # using it, and raise the signal again later.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.ready.set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS picks it), for a server started
    on it later (once its URL is written in a configuration, say).

    Meanwhile the OS could give the same port to another program asking for one,
    or to an outgoing connection: on POSIX systems the port is left in TIME_WAIT
    (a connection to it, closed on its side first), which keeps it out of the
    OS's picks for a minute, while a server that sets SO_REUSEADDR (uvicorn,
    asyncio, :func:`serve` and every strabo command do) binds it at once. A
    connection to it is refused until then, as to any port nobody listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        if os.name == "posix":
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, 0))
        port: int = listener.getsockname()[1]
        if os.name == "posix":
            with contextlib.suppress(OSError):  # then it is merely free
                listener.listen(1)
                listener.settimeout(5)
                with socket.create_connection((host, port), timeout=5) as client:
                    accepted, _ = listener.accept()
                    accepted.close()  # closed on the server's side first: TIME_WAIT there
                    client.recv(1)  # until its end has arrived
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
