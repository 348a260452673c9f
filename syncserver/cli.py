"""``strabo syncserver``: serve the MASes of a configuration file over HTTP."""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from syncserver.limits import Limits
from typing import Any

from syncserver.options import USAGE, count, port, positive
from syncserver.stopping import stop_on_signals

DESCRIPTION = """\
Run a SyncServer: the shared social state of every enactment of the
multiagent systems (MASes) that the configuration file declares.

The configuration (TOML) lists, for each MAS, its protocol files and its agents
with the roles they play and their credentials:

  [mas.purchase]
  protocols = ["protocols/purchase.lsh"]      # relative to the config file

  [mas.purchase.agents.buyer]
  roles = ["Buyer"]                          # "Protocol:Role" if ambiguous
  token_env = "BUYER_TOKEN"                  # or: token = "..."

An optional [server] table sets defaults for policy, batch_window_ms and db,
and the limits every client is held to (max_body, max_connections,
header_timeout, body_timeout, keep_alive_timeout, write_timeout,
max_streams_per_agent, stream_backlog_bytes, stream_backlog, write_buffer; see
docs/syncserver.md); the options below override it. A bad configuration is refused at start with a
message per problem. Agents authenticate with "Authorization: Bearer <token>";
docs/syncserver.md documents the HTTP API.

Finalization policies:
  instant   each attempt is checked on arrival and finalized at once; the first
            of two conflicting attempts wins, the later one is rejected.
  batched   attempts arriving within the batch window are finalized together;
            a higher sayso priority wins an attribute conflict, otherwise the
            earlier arrival; the accepted ones are published as one batch.

Durability: an attempt is acknowledged only after the transaction holding it
has committed to the SQLite file (concurrent attempts share a commit).

Several servers: with --db postgresql://USER@HOST/DB, any number of servers
share one log in PostgreSQL and serve the same MASes; any of them accepts any
attempt and streams every batch (docs/syncserver.md, "Several servers").

Examples (from a clone of the repository; Ctrl-C stops the server):
  strabo syncserver --config samples/purchase/mas.toml --db purchase.db
  strabo syncserver --config samples/purchase/mas.toml --db :memory: --policy batched
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from syncserver.config import POLICIES

    parser.add_argument(
        "--config", required=True, metavar="FILE", help="the TOML file declaring the MASes"
    )
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        help="finalization policy (default: the config's, else instant)",
    )
    parser.add_argument(
        "--batch-window-ms",
        type=positive,
        metavar="N",
        help="how long a batch collects attempts, in milliseconds (default 20)",
    )
    parser.add_argument(
        "--db",
        metavar="PATH|URL",
        help="SQLite file holding the log (default: the config's, else strabo.db); "
        "':memory:' keeps it in memory only; a postgresql:// URL keeps it in PostgreSQL, "
        "shared by every server given the same URL (needs pip install 'strabo[postgres]')",
    )
    parser.add_argument(
        "--sync",
        choices=["normal", "full"],
        default="normal",
        help="SQLite durability: 'normal' survives the process being killed (kill -9); "
        "'full' also survives power loss, with an fsync per commit (default normal); "
        "PostgreSQL follows its own synchronous_commit",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=port, default=8300, help="port to listen on (default 8300)")
    parser.add_argument(
        "--max-body",
        type=count,
        metavar="BYTES",
        help="largest request body accepted; larger ones get 413 (default: the config's "
        "max_body, else 1 MiB)",
    )
    parser.add_argument(
        "--max-connections",
        type=count,
        metavar="N",
        help="open connections at once; a request beyond gets 503 (default: the config's "
        "max_connections, else 10000)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="server log level (default info)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    import uvicorn

    from syncserver._guard import uvicorn_options
    from syncserver.app import create_app
    from syncserver.config import ConfigError, load_config
    from syncserver.server import SyncServer
    from syncserver.store import StoreError, is_url, redact

    if args.db and "://" in args.db and not is_url(args.db):
        # Else 'mysql://h/db' is taken for a SQLite path and refused as a missing
        # directory 'mysql:', which hides what is wrong: the kind of database.
        scheme = args.db.split("://", 1)[0]
        print(f"strabo syncserver: --db {scheme}://...: a SQLite file or a postgresql:// "
              "URL, no other database", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"strabo syncserver: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    limits = config.limits.replace(
        max_body=args.max_body, max_connections=args.max_connections
    )
    limits = _fit_descriptors(limits)
    db = args.db or config.db or "strabo.db"
    server = SyncServer(
        config,
        store=db,
        policy=args.policy,
        batch_window_ms=args.batch_window_ms,
        synchronous=args.sync,
    )
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")

    class Uvicorn(uvicorn.Server):
        async def shutdown(self, sockets: list[Any] | None = None) -> None:
            server.close_streams()  # end event streams first, or they hold the shutdown
            await super().shutdown(sockets=sockets)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # Signals are main()'s (stop_on_signals): uvicorn would raise the one
            # it caught again once serve() returns, killing the process before
            # server.stop() checkpoints the store.
            yield

    async def main() -> int:
        try:
            listener = bind(args.host, args.port)
        except OSError as exc:
            print(
                f"strabo syncserver: cannot listen on {args.host}:{args.port}: {exc.strerror}",
                file=sys.stderr,
            )
            return USAGE  # a port in use, an address not ours: configuration
        try:
            await server.start()
        except StoreError as exc:
            print(f"strabo syncserver: {exc}", file=sys.stderr)
            listener.close()
            return 2
        app = create_app(server, limits=limits, manage_lifespan=False)
        uv = Uvicorn(
            uvicorn.Config(
                app,
                log_level=args.log_level,
                access_log=False,
                timeout_graceful_shutdown=5,
                **uvicorn_options(limits),
            )
        )
        systems = ", ".join(f"{m.name} ({', '.join(m.protocols)})" for m in config.mas.values())
        port = listener.getsockname()[1]
        # SIGINT and SIGTERM end serve() gracefully (a second Ctrl-C forces it:
        # uvicorn's handle_exit), caught before the line that says it listens.
        with stop_on_signals(lambda sig: uv.handle_exit(sig, None)) as stopping:
            print(
                f"strabo syncserver: {systems}; policy {server.policy}; store {redact(db)}; "
                f"listening on http://{args.host}:{port}",
                flush=True,
            )
            try:
                await uv.serve(sockets=[listener])
            finally:
                await server.stop()  # the SQLite store checkpoints its WAL here
                listener.close()
        print("strabo syncserver: stopped", file=sys.stderr, flush=True)
        # Ctrl-C is "interrupted", as for every verb; SIGTERM asks for a stop (0).
        return stopping.status()

    return asyncio.run(main())


def _fit_descriptors(limits: Limits) -> Limits:
    """Raise the open-file limit so that ``max_connections`` can be reached, or
    lower ``max_connections`` to what the system allows, and say so."""
    try:
        import resource
    except ImportError:  # not on POSIX: nothing to adjust
        return limits
    needed = limits.max_connections + 128  # the database, the listener, logs
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < needed:
        fit = max(soft - 128, 1)
        print(
            f"strabo syncserver: the system allows {soft} open files; serving at most "
            f"{fit} connections instead of {limits.max_connections} (raise 'ulimit -n')",
            file=sys.stderr,
        )
        return limits.replace(max_connections=fit)
    return limits


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, bound before anything is printed, so that the printed
    address is ready to accept connections (and --port 0 can report its port)."""

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(2048)
    except OSError:
        listener.close()
        raise
    return listener
