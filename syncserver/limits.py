"""How much a SyncServer gives each client: bodies, time, connections, backlog.

A server open to agents it does not control must bound what any one of them can
hold: a slow or silent client costs a socket and a few kilobytes for a bounded
time, never memory that grows with the traffic of others. docs/syncserver.md
says what a client sees when it reaches each limit.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Every bound, with the defaults a public server should have.

    Set them in the ``[server]`` table of the configuration file (same names), or
    in code: ``create_app(server, limits=Limits(header_timeout=5))``.
    """

    #: Largest request body accepted; larger ones get ``413 too-large``.
    max_body: int = MiB
    #: Open connections at once; a request on one more gets ``503 overloaded``.
    max_connections: int = 10_000
    #: Seconds from a request's first byte (or the connection's opening) until its
    #: headers are complete; then ``408 header-timeout`` and the connection closes.
    header_timeout: float = 10.0
    #: Seconds from the end of the headers until the declared body has arrived;
    #: then ``408 body-timeout`` and the connection closes.
    body_timeout: float = 30.0
    #: Seconds an idle keep-alive connection stays open between requests.
    keep_alive_timeout: float = 5.0
    #: Seconds a response may wait on a client that reads nothing (its socket
    #: buffers are full) before the connection is dropped.
    write_timeout: float = 30.0
    #: Event streams one agent may hold open at once; one more gets
    #: ``429 too-many-streams``.
    max_streams_per_agent: int = 32
    #: Bytes of batches an event stream may fall behind before it is dropped with
    #: a ``lagging`` event (the client resumes from the log).
    stream_backlog_bytes: int = 8 * MiB
    #: Batches an event stream may fall behind, whatever their size.
    stream_backlog: int = 10_000
    #: Bytes of the newest batches (256 at most) kept in memory for agents catching
    #: up from the log (one shared copy, instead of one read from the store each).
    log_cache_bytes: int = 16 * MiB
    #: Bytes a response may queue in the server for one connection before the
    #: server stops producing it until the client reads (the transport's
    #: high-water mark). Low, so that many slow readers cost little memory.
    write_buffer: int = 8 * 1024

    def replace(self, **changes: Any) -> Limits:
        """These limits with some changed (``None`` values are ignored)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({k: v for k, v in changes.items() if v is not None})
        return Limits(**values)


NAMES = frozenset(f.name for f in fields(Limits))
