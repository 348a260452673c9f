"""Command-line options the verbs that serve a role share (``strabo mcp``,
``strabo a2a``): where the social state lives, said the same way by each."""

from __future__ import annotations

import argparse

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
