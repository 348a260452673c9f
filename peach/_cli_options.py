"""Command-line options the verbs that serve a role share (``strabo mcp``,
``strabo a2a``): where the social state lives, said the same way by each."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any, TextIO

from syncserver.options import port


def add_social_state(parser: argparse.ArgumentParser) -> None:
    """The "social state (one of)" group: a running SyncServer, or one served here."""
    where = parser.add_argument_group("social state (one of)")
    where.add_argument("--syncserver", metavar="URL", help="a running SyncServer")
    where.add_argument("--token", metavar="T", help="this agent's bearer token (with --syncserver)")
    where.add_argument("--embedded", action="store_true",
                       help="serve a SyncServer in this process")
    where.add_argument("--mas", default="default",
                       help="the MAS to join or serve (default: default)")
    where.add_argument("--syncserver-port", type=port, default=0, metavar="PORT",
                       help="with --embedded: the SyncServer's port (default: a free one)")
    where.add_argument(
        "--peer", action="append", metavar="NAME=ROLE", default=[],
        help="with --embedded: another agent of the MAS (token NAME-secret). Default: one "
        "agent per other role, named after it in lower case",
    )


def one_role(args: argparse.Namespace, verb: str) -> tuple[Any, str, str, list[Any]]:
    """The one role a serving verb plays, checked with where its state lives:
    ``(protocol, role, agent name, pairs)``; UsageError for what cannot go together."""
    from peach.llm.cli import UsageError, _roles, check_syncserver_url

    pairs = _roles(args)
    if len(pairs) != 1:
        raise UsageError(f"strabo {verb} serves one role: give one --protocol FILE --role ROLE "
                         "pair")
    [(protocol, role)] = pairs
    if bool(args.syncserver) == bool(args.embedded):
        raise UsageError("say where the social state lives: --syncserver URL --token T, "
                         "or --embedded")
    if args.syncserver and not args.token:
        raise UsageError("--syncserver needs --token (this agent's bearer token)")
    if args.embedded and args.token:
        raise UsageError("--token goes with --syncserver; an embedded server makes its own")
    if args.syncserver:
        check_syncserver_url(args.syncserver)
    return protocol, role, args.name or role.lower(), pairs


async def state_of(
    stack: contextlib.AsyncExitStack[Any],
    args: argparse.Namespace,
    name: str,
    pairs: list[Any],
    verb: str,
    out: TextIO,
) -> tuple[str, Any]:
    """The SyncServer's URL and the agent's executor: a server served here
    (``--embedded``, until ``stack`` closes) or the one ``--syncserver`` names."""
    from peach import SyncExecutor
    from peach.llm.cli import _agents, embedded_server

    if args.embedded:
        protocol = pairs[0][0]
        return await embedded_server(
            stack, name, [protocol], _agents(name, pairs, args.peer), args.mas,
            args.syncserver_port, f"strabo {verb}", out,
        )
    return args.syncserver, SyncExecutor(args.syncserver, token=args.token, mas=args.mas)
