"""What the three Purchase agents share: the protocol, and how they connect.

Each agent runs on a SyncServer (``--url``, the default) or, with ``--peer``,
peer to peer: a ``PeerExecutor`` that reads who the peers are from the
directory (``mas.toml`` here, where each agent has a ``url`` to listen on),
keeps its own log (``--store FILE``, SQLite; in memory by default) and sends
what it performs to the other agents, with no SyncServer at all.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from langshaw import LangshawProtocol
from peach import Executor, ExecutorError, PeachAdapter, SyncExecutor

PROTOCOL = Path(__file__).resolve().parents[2] / "protocols" / "purchase.lsh"
DIRECTORY = Path(__file__).resolve().parent / "mas.toml"
SYNCSERVER = "http://127.0.0.1:8300"


def arguments(description: str, name: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--url", default=None, help=f"the SyncServer (default {SYNCSERVER}; not with --peer)"
    )
    parser.add_argument("--mas", default="purchase", help="the MAS (default purchase)")
    parser.add_argument(
        "--token",
        default=None,
        help=f"this agent's token (default {name}-secret; not with --peer, where the "
        "directory gives it)",
    )
    peer = parser.add_argument_group(
        "peer to peer", "run with no SyncServer: the agents send each other what they do"
    )
    peer.add_argument(
        "--peer",
        action="store_true",
        help="enact peer to peer (a PeerExecutor), listening on this agent's url in the directory",
    )
    peer.add_argument(
        "--directory",
        type=Path,
        default=DIRECTORY,
        metavar="TOML",
        help="who the peers are: roles, secret and url of each agent "
        "(default samples/purchase/mas.toml)",
    )
    peer.add_argument(
        "--store",
        default=None,
        metavar="FILE",
        help="this agent's log, a SQLite file it resumes from when restarted "
        "(default: in memory, lost on exit)",
    )
    return parser


def executor(args: argparse.Namespace, name: str) -> Executor:
    if args.peer:
        from peach.peer import Directory, PeerExecutor

        return PeerExecutor(name, Directory.load(args.directory, args.mas), store=args.store)
    return SyncExecutor(args.url or SYNCSERVER, token=args.token or f"{name}-secret", mas=args.mas)


def adapter(args: argparse.Namespace, name: str, role: str) -> PeachAdapter:
    return PeachAdapter(name, LangshawProtocol.load(PROTOCOL), role, executor(args, name))


async def delivered(agent: PeachAdapter, seconds: float = 10.0) -> None:
    """Peer to peer, before exiting: wait until the peers have acknowledged what
    this agent performed (its last action, say), so that nothing is left unsent.
    On a SyncServer what is finalized is already there: nothing to wait for."""
    from peach.peer import PeerExecutor

    peer = agent.executor
    if not isinstance(peer, PeerExecutor):
        return

    async def wait() -> None:
        while peer.outstanding():
            peer.progress.clear()  # set again on every acknowledgement
            if peer.outstanding():
                await peer.progress.wait()

    try:
        await asyncio.wait_for(wait(), seconds)
    except TimeoutError:
        print(
            f"{agent.name}: {peer.outstanding()} messages not acknowledged by every peer yet "
            "(with --store, they are sent again at the next start)",
            file=sys.stderr,
        )


def main(run: Callable[[argparse.Namespace], object], args: argparse.Namespace) -> int:
    """Run an agent until it is done or interrupted; report errors without tracebacks."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    program = Path(sys.argv[0]).stem
    if args.peer and (args.url is not None or args.token is not None):
        print(
            f"{program}: --url and --token are for a SyncServer; peer to peer, the directory "
            f"({args.directory}) gives this agent's url and secret",
            file=sys.stderr,
        )
        return 2
    if not args.peer and args.store is not None:
        print(f"{program}: --store is this agent's log peer to peer: add --peer", file=sys.stderr)
        return 2

    async def guarded() -> int:
        task = asyncio.ensure_future(run(args))  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            return int(await task or 0)
        except asyncio.CancelledError:
            return 0
        except ExecutorError as exc:
            print(f"{program}: {exc}", file=sys.stderr)
            return 1

    return asyncio.run(guarded())
