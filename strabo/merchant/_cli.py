"""``strabo merchant``: serve the bundled UCP merchant with uvicorn.

Only argparse is imported up front; the merchant, Starlette and uvicorn are imported
in :func:`run`, so building the ``strabo`` command line stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator
from typing import Any

DESCRIPTION = """\
Run the bundled UCP merchant: UCP checkout for a small flower shop, with
discovery at /.well-known/ucp, checkout sessions, orders, discount codes,
three-step shipping and mock payment tokens. State is in memory and is lost when
the server stops.

UCP versions: 2026-01-11 (the default), or 2026-04-08 with --ucp-version
2026-04-08, which still answers 2026-01-11 platforms (their profile at
/.well-known/ucp/2026-01-11).

Transports (paths under the server's URL), each listed in the profile:
  REST  /checkout-sessions, /orders/{id}: both versions
  MCP   /ucp/mcp (streamable HTTP, the five checkout tools): 2026-04-08 only
  A2A   /ucp/a2a (JSON-RPC: message/send, SendMessage), its agent card at
        /ucp/a2a/.well-known/agent-card.json: both versions, when the A2A SDK
        is installed (pip install 'strabo[a2a]')
The merchant prints the ones it serves when it starts.

Pay with handler_id "mock_payment_handler" and token "success_token" (or
"fail_token" to see a declined payment). See docs/merchant.md.

examples:
  strabo merchant --port 8182
  strabo merchant --data-dir conformance/test_data/flower_shop
  strabo merchant --ucp-version 2026-04-08
  curl http://127.0.0.1:8182/.well-known/ucp
"""

PATHS = {"mcp": "/ucp/mcp", "a2a": "/ucp/a2a",
         "card": "/ucp/a2a/.well-known/agent-card.json"}
"""The paths the help names (``_discovery``'s, restated: it needs pydantic)."""
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
UCP_VERSIONS = ("2026-01-11", "2026-04-08")
"""The versions ``--ucp-version`` takes (``_versioning.SERVED``, which needs
Starlette and is therefore not imported here)."""


def _port(text: str) -> int:
    # syncserver.options.port, restated: the merchant stands alone (it is the
    # third party the proxy talks to), so it imports nothing of the engine.
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value}: a port is 0 (any free one) to 65535")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the merchant's options to its subcommand parser."""
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (%(default)s)")
    parser.add_argument("--port", type=_port, default=8182, help="port to listen on (%(default)s)")
    shop = parser.add_mutually_exclusive_group()
    shop.add_argument(
        "--catalog", metavar="FILE", help="catalog JSON file (default: the bundled flower shop)"
    )
    shop.add_argument(
        "--data-dir",
        metavar="DIR",
        help="directory of CSV files (products.csv, inventory.csv, discounts.csv, ...), "
        "the UCP conformance suite's format; see docs/merchant.md",
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="URL agents reach this server at, for discovery and order links "
        "(default: taken from each request)",
    )
    parser.add_argument(
        "--simulation-secret",
        metavar="SECRET",
        help="Simulation-Secret header value for /testing/simulate-shipping (default: random)",
    )
    parser.add_argument(
        "--ucp-version",
        metavar="{" + ",".join(UCP_VERSIONS) + "}",
        default=UCP_VERSIONS[0],
        help="UCP version served (%(default)s); 2026-04-08 also answers 2026-01-11 "
        "platforms, with their profile at /.well-known/ucp/2026-01-11",
    )
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, default="info", help="server log level (%(default)s)"
    )


def _error(message: str) -> int:
    print(f"strabo merchant: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; 2 for a bad option value, bad shop data or an
    address that cannot be used."""
    import socket

    import uvicorn

    if args.ucp_version not in UCP_VERSIONS:
        # Checked here rather than by argparse choices: one line, like every other error.
        return _error(f"--ucp-version must be one of {', '.join(UCP_VERSIONS)}, "
                      f"not {args.ucp_version!r}")

    from ._app import create_app, merchant_of
    from .catalog import CatalogError

    try:
        app = create_app(
            args.catalog,
            data_dir=args.data_dir,
            base_url=args.base_url,
            simulation_secret=args.simulation_secret,
            ucp_version=args.ucp_version,
        )
    except CatalogError as exc:
        return _error(str(exc))
    try:
        family, kind, proto, _, _ = socket.getaddrinfo(
            args.host, args.port, type=socket.SOCK_STREAM
        )[0]
        # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted connections
        # only then, and without it every response waits ~40 ms for a delayed ACK.
        sock = socket.socket(family, kind, proto)
    except (OSError, OverflowError) as exc:
        return _error(f"cannot listen on {args.host}:{args.port}: {exc}")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        sock.listen(2048)  # connections queue from now on, so the URL printed is usable
    except (OSError, OverflowError) as exc:
        sock.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return _error(f"cannot listen on {args.host}:{args.port}: {reason}")
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    server = _server(uvicorn.Config(app, log_level=args.log_level, timeout_graceful_shutdown=5))
    with _stop_on_signals(server) as received:  # before the lines that say it is ready
        print(f"UCP merchant listening on {base}", flush=True)
        print(f"  discovery: {base}/.well-known/ucp", flush=True)
        for line in _transports(app, args.ucp_version, base):
            print(f"  {line}", flush=True)
        print(f"  simulation secret: {merchant_of(app).simulation_secret}", flush=True)
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
    print("strabo merchant: stopped", file=sys.stderr, flush=True)
    # Ctrl-C is "interrupted" (130), as for every verb; SIGTERM asks for a stop (0).
    return 130 if signal.SIGINT in received else 0


@contextlib.contextmanager
def _stop_on_signals(server: Any) -> Iterator[list[int]]:
    """SIGINT and SIGTERM stop ``server`` gracefully (requests in flight finish,
    for 5 s at most; the lifespan closes the MCP and A2A transports) and are
    recorded in the list yielded. Python would end the process at once on
    SIGTERM (status 143, ``finally`` blocks skipped), and uvicorn, once shut
    down, raises the signal it caught again, to the same effect: not what a
    supervisor (``docker stop``, systemd) expects of a clean stop. This is
    ``syncserver.stopping``'s convention, restated: the merchant imports
    nothing of the engine."""
    received: list[int] = []

    def stop(sig: int, frame: Any) -> None:
        received.append(sig)
        server.handle_exit(sig, frame)  # a second Ctrl-C forces the stop

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: none to catch
            previous[sig] = signal.signal(sig, stop)
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _server(config: Any) -> Any:
    """A uvicorn server that leaves signals to :func:`_stop_on_signals`."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)


def _transports(app: object, version: str, base: str) -> list[str]:
    """A line per transport ``app`` serves checkout over, with its URL here (the
    profile names ``--base-url`` instead when given)."""
    served = {getattr(route, "path", None) for route in getattr(app, "routes", [])}
    versions = version if version == UCP_VERSIONS[0] else f"{version} and {UCP_VERSIONS[0]}"
    lines = [f"REST:      {base}/checkout-sessions (UCP {versions})"]
    if PATHS["mcp"] in served:
        lines.append(f"MCP:       {base}{PATHS['mcp']} (UCP {version})")
    lines.append(f"A2A:       {base}{PATHS['card']} (the agent card; UCP {versions})"
                 if PATHS["a2a"] in served else
                 "A2A:       not served (the A2A SDK is not installed: pip install 'strabo[a2a]')")
    return lines
