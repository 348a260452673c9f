"""``strabo a2a``: serve one agent's role in a Langshaw protocol as an A2A agent."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from peach._cli_options import add_social_state, one_role, state_of
from syncserver.options import count, port

DESCRIPTION = """\
Serve one agent's role in a Langshaw protocol as an A2A (Agent2Agent) agent,
so that any A2A client can delegate to it while the adapter enforces the
protocol. Needs the A2A SDK: pip install 'strabo[a2a]'.

The agent card (/.well-known/agent-card.json) lists one skill per action of
the role. Each message carries one data part {"action": NAME, "bindings":
{...}}: the action is built and attempted through the role's adapter. The task
it opens follows the enactment: working while the other agents act,
input-required when the role may act again (send the next action to the same
task), completed when the enactment completes; a refused action ends a new task
as rejected (refused before the attempt) or failed (refused by the SyncServer),
with the rule's message. tasks/cancel stops following the enactment and
attempts nothing. JSON-RPC at the base URL: A2A 1.0's SendMessage,
SendStreamingMessage, GetTask, CancelTask, and 0.3's message/send,
message/stream, tasks/get, tasks/cancel.

Where the social state lives:
  --syncserver URL --token T   join a running SyncServer (see strabo syncserver);
                               --name must be the agent the token belongs to
  --embedded                   serve a SyncServer in this process; the other
                               agents (--peer) join it with tokens NAME-secret

The agent listens on loopback only (no A2A authentication yet).

Example, with a SyncServer in the process and the Purchase seller and shipper
joining it:
  strabo a2a --protocol purchase --role Buyer --embedded --syncserver-port 8300 \\
      --mas purchase --port 9999
  # then point an A2A client at http://127.0.0.1:9999

docs/a2a.md explains the mapping and what is not done.
"""

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def configure(parser: argparse.ArgumentParser) -> None:
    role = parser.add_argument_group("the role")
    role.add_argument("--protocol", action="append", metavar="FILE", default=[],
                      help="a Langshaw protocol file, or a bundled protocol's name")
    role.add_argument("--role", action="append", metavar="ROLE", default=[],
                      help="the role the agent plays in it")
    role.add_argument("--name", metavar="NAME",
                      help="the agent's name (default: the role, in lower case); with "
                      "--syncserver, the agent the token authenticates")

    add_social_state(parser)

    a2a = parser.add_argument_group("A2A over HTTP")
    a2a.add_argument("--host", default="127.0.0.1", choices=LOOPBACK,
                     help="the loopback address to listen on (default 127.0.0.1)")
    a2a.add_argument("--port", type=port, default=0,
                     help="the port (default: a free one, printed)")
    a2a.add_argument("--kept", type=count, default=None, metavar="N",
                     help="the most tasks kept (default 10000): older ones are forgotten, "
                     "and a message naming one is answered 'task not found'")
    a2a.add_argument("-v", "--verbose", action="store_true", help="log each action")


def run(args: argparse.Namespace) -> int:
    import logging

    from peach.llm.cli import UsageError

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s")
    try:
        return asyncio.run(run_a2a(args))
    except UsageError as exc:
        print(f"strabo a2a: {exc}", file=sys.stderr)
        return 2


async def run_a2a(
    args: argparse.Namespace,
    on_ready: Callable[[dict[str, str]], Awaitable[Any] | None] | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """The command's body. ``on_ready`` gets ``{"syncserver": URL, "a2a": URL}``
    once clients can connect; ``stop`` ends the serving, as Ctrl-C does."""
    import contextlib

    from peach import ExecutorError, PeachAdapter
    from peach.llm.cli import UsageError, cannot_join
    from syncserver.serving import serve
    from syncserver.stopping import stop_on_signals

    try:
        from peach.a2a.server import RoleAgent
    except ImportError as exc:
        raise UsageError(f"the A2A SDK is missing ({exc}): pip install 'strabo[a2a]'") from None
    protocol, role_name, name, pairs = one_role(args, "a2a")
    out = sys.stdout

    async with contextlib.AsyncExitStack() as stack:
        url, executor = await state_of(stack, args, name, pairs, "a2a", out)
        adapter = PeachAdapter(name, protocol, role_name, executor)
        agent = RoleAgent(adapter) if args.kept is None else RoleAgent(adapter, kept=args.kept)
        try:
            await stack.enter_async_context(agent)
        except ExecutorError as exc:
            return cannot_join("a2a", exc)
        try:
            base = await stack.enter_async_context(
                serve(agent.app(), host=args.host, port=args.port or None)
            )
        except OSError as exc:
            raise UsageError(f"cannot serve on {args.host}:{args.port}: "
                             f"{exc.strerror or exc}") from None
        agent.url = base
        stop = stop or asyncio.Event()
        # Ctrl-C and SIGTERM stop the serving gracefully (syncserver.stopping),
        # caught before the line that says it is ready: then 130 for Ctrl-C, as
        # every verb, and 0 for SIGTERM.
        with stop_on_signals(lambda sig: stop.set()) as stopping:
            print(f"strabo a2a: {role_name} of {protocol.name} as {name}, at {base} "
                  f"(card: {base}/.well-known/agent-card.json)", file=out, flush=True)
            try:
                if on_ready is not None:
                    result = on_ready({"syncserver": url, "a2a": base})
                    if inspect.isawaitable(result):
                        await result
                await stop.wait()
            finally:
                await agent.stop()  # ends the tasks following an enactment
    return stopping.status()
