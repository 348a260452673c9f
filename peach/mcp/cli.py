"""``strabo mcp``: serve one agent's role in a Langshaw protocol as MCP tools."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from peach._cli_options import add_social_state, one_role, state_of
from syncserver.options import port

DESCRIPTION = """\
Serve one agent's role in a Langshaw protocol as MCP (Model Context Protocol)
tools, so that any MCP client (a desktop assistant, an IDE, another agent
framework) can enact the protocol while the adapter enforces it.

Tools: one per action of the role (its input schema typed from the protocol;
a call where the action is not enabled is refused, naming the rule it would
break, and changes nothing), plus 'enactments' (what the role may do now, and
with what), 'history' (one enactment) and 'wait_event' (what happens next).

Where the social state lives:
  --syncserver URL --token T   join a running SyncServer (see strabo syncserver);
                               --name must be the agent the token belongs to
  --embedded                   serve a SyncServer in this process; the other
                               agents (--peer) join it with tokens NAME-secret

Transports: --transport stdio (the default: the client starts this command and
speaks MCP on its stdin and stdout, until it closes stdin, Ctrl-C or SIGTERM;
everything else goes to stderr) or
--transport http (streamable HTTP at http://HOST:PORT/mcp, until Ctrl-C or
SIGTERM).
--auth-token makes every HTTP request carry 'Authorization: Bearer TOKEN'; it
is required to listen elsewhere than on loopback.

A desktop assistant's configuration (stdio; e.g. Claude Desktop's
claude_desktop_config.json):
  {"mcpServers": {"purchase-buyer": {
     "command": "strabo",
     "args": ["mcp", "--protocol", "purchase", "--role", "Buyer",
              "--syncserver", "http://127.0.0.1:8300", "--token", "buyer-secret",
              "--mas", "purchase"]}}}

Streamable HTTP, with a SyncServer in the process and the Purchase sample's
seller and shipper joining it:
  strabo mcp --protocol purchase --role Buyer --embedded --syncserver-port 8300 \\
      --mas purchase --transport http --port 8765
  # the seller and the shipper join from other shells, e.g. as LLM agents:
  strabo agent --protocol purchase --role Seller --mas purchase --goal "quote" \\
      --syncserver http://127.0.0.1:8300 --token seller-secret
  # (from a clone of the repository: python -m samples.purchase.seller)
  # then point an MCP client at http://127.0.0.1:8765/mcp

docs/mcp.md explains the tools, hooks and secrets, and MCP tools as agent actions.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    role = parser.add_argument_group("the role")
    role.add_argument("--protocol", action="append", metavar="FILE", default=[],
                      help="a Langshaw protocol file, or a bundled protocol's name")
    role.add_argument("--role", action="append", metavar="ROLE", default=[],
                      help="the role the agent plays in it")
    role.add_argument("--name", metavar="NAME",
                      help="the agent's name (default: the role, in lower case); with "
                      "--syncserver, the agent the token authenticates")
    role.add_argument("--secret", action="append", metavar="ATTRIBUTE", default=[],
                      help="an attribute whose values are never shown to the client; repeatable")

    add_social_state(parser)

    mcp = parser.add_argument_group("MCP transport")
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                     help="stdio (default) or http (streamable HTTP)")
    mcp.add_argument("--host", default="127.0.0.1",
                     help="with http: the address to listen on (default 127.0.0.1)")
    mcp.add_argument("--port", type=port, default=0,
                     help="with http: the port (default: a free one, printed)")
    mcp.add_argument("--path", default="/mcp", help="with http: the endpoint (default /mcp)")
    mcp.add_argument("--auth-token", metavar="T",
                     help="with http: require 'Authorization: Bearer T' on every request")
    mcp.add_argument("-v", "--verbose", action="store_true", help="log each tool call")


def run(args: argparse.Namespace) -> int:
    import logging

    from peach.llm.cli import UsageError

    logging.basicConfig(  # stderr: with stdio, stdout is the MCP channel
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(name)s: %(message)s",
    )
    if not args.verbose:
        for noisy in ("httpx", "httpx2", "mcp", "uvicorn.error"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return asyncio.run(run_mcp(args))
    except UsageError as exc:
        print(f"strabo mcp: {exc}", file=sys.stderr)
        return 2


async def run_mcp(
    args: argparse.Namespace,
    on_ready: Callable[[dict[str, str]], Awaitable[Any] | None] | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """The command's body. ``on_ready`` gets ``{"syncserver": URL, "mcp": URL}``
    (``mcp`` with http only) once clients can connect; with http, ``stop`` (an
    ``asyncio.Event``) ends the serving, as Ctrl-C does."""
    import contextlib

    from peach import ExecutorError, PeachAdapter
    from peach.llm.cli import UsageError, cannot_join
    from peach.mcp.server import RoleServer
    from syncserver.serving import serve
    from syncserver.stopping import stop_on_signals

    protocol, role_name, name, pairs = one_role(args, "mcp")
    stdio = args.transport == "stdio"
    if stdio and (args.port or args.auth_token):
        raise UsageError("--port and --auth-token go with --transport http")
    if not stdio and args.host not in ("127.0.0.1", "localhost", "::1") and not args.auth_token:
        raise UsageError(
            f"--host {args.host} would let anyone who reaches it act as {name}: give "
            "--auth-token T too"
        )
    if not args.path.startswith("/"):
        raise UsageError(f"--path {args.path!r} must start with '/'")
    if args.auth_token is not None and not args.auth_token.strip():
        raise UsageError("--auth-token is empty: it would let anyone in")
    attributes = {a for action in protocol.actions.values() for a in action.attributes}
    unknown = sorted(set(args.secret) - attributes)
    if unknown:  # a misspelt secret would leave the real one shown
        raise UsageError(
            f"--secret {', '.join(unknown)}: {protocol.name} has no such attribute "
            f"(attributes: {', '.join(sorted(attributes))})"
        )
    out = sys.stderr if stdio else sys.stdout

    async with contextlib.AsyncExitStack() as stack:
        url, executor = await state_of(stack, args, name, pairs, "mcp", out)
        adapter = PeachAdapter(name, protocol, role_name, executor)
        adapter.listeners.append(_printer(name, out))
        role = RoleServer(adapter, secrets=args.secret)
        try:
            await stack.enter_async_context(role)
        except ExecutorError as exc:
            return cannot_join("mcp", exc)
        ready = {"syncserver": url}
        if stdio:
            return await _serve_stdio(role, f"strabo mcp: {role_name} of {protocol.name} as "
                                      f"{name}, over stdio", on_ready, ready)
        app = role.http_app(path=args.path, host=args.host, token=args.auth_token)
        try:
            base = await stack.enter_async_context(
                serve(app, host=args.host, port=args.port or None)
            )
        except OSError as exc:
            raise UsageError(f"cannot serve on {args.host}:{args.port}: "
                             f"{exc.strerror or exc}") from None
        ready["mcp"] = base + args.path
        stop = stop or asyncio.Event()
        # Ctrl-C and SIGTERM stop the serving gracefully (syncserver.stopping),
        # caught before the line that says it is ready: then 130 for Ctrl-C, as
        # every verb, and 0 for SIGTERM.
        with stop_on_signals(lambda sig: stop.set()) as stopping:
            print(f"strabo mcp: {role_name} of {protocol.name} as {name}, at {ready['mcp']}",
                  file=out, flush=True)
            try:
                await _ready(on_ready, ready)
                await stop.wait()
            finally:
                # Clients waiting for events, or keeping a stream open, are let go
                # at once: the HTTP server then stops without waiting for them.
                await role.close_sessions()
    return stopping.status()


async def _serve_stdio(
    role: Any, line: str,
    on_ready: Callable[[dict[str, str]], Awaitable[Any] | None] | None, ready: dict[str, str],
) -> int:
    """Serve over stdio until the client closes stdin (0). Where stdin is a pipe
    (a client started the command), SIGTERM and Ctrl-C stop it at once, with the
    statuses of the servers (0, 130; syncserver.stopping); a terminal's read
    cannot be cut short, so there Ctrl-C interrupts as Python does (130)."""
    from peach.mcp._stdio import stdin_is_a_pipe
    from syncserver.stopping import stop_on_signals

    if not stdin_is_a_pipe():
        print(line, file=sys.stderr, flush=True)
        await _ready(on_ready, ready)
        await role.serve_stdio()
        return 0
    serving = asyncio.ensure_future(role.serve_stdio())
    try:
        with stop_on_signals(lambda sig: serving.cancel()) as stopping:
            print(line, file=sys.stderr, flush=True)
            try:
                await _ready(on_ready, ready)
                await serving
            except asyncio.CancelledError:
                if not stopping.received:
                    raise
    finally:
        serving.cancel()  # a ready hook that failed: stop serving too
    return stopping.status()


async def _ready(
    on_ready: Callable[[dict[str, str]], Awaitable[Any] | None] | None,
    info: dict[str, str],
) -> None:
    if on_ready is not None:
        result = on_ready(info)
        if inspect.isawaitable(result):
            await result


def _printer(name: str, out: TextIO) -> Callable[[Any, list[tuple[Any, ...]]], None]:
    def show(batch: Any, newly: list[tuple[Any, ...]]) -> None:
        for entry in batch.entries:
            who = "you" if entry.performer == name else entry.performer
            keys = " ".join(f"{k}={v}" for k, v in entry.instance.keys.items())
            print(f"  #{batch.seq:<4} {entry.instance.name:<22} by {who:<10} {keys}",
                  file=out, flush=True)

    return show
