"""What the three Purchase agents share: the protocol, and how they connect."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from langshaw import LangshawProtocol
from peach import ExecutorError, PeachAdapter, SyncExecutor

PROTOCOL = Path(__file__).resolve().parents[2] / "protocols" / "purchase.lsh"


def arguments(description: str, name: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", default="http://127.0.0.1:8300", help="the SyncServer")
    parser.add_argument("--mas", default="purchase", help="the MAS (default purchase)")
    parser.add_argument(
        "--token", default=f"{name}-secret", help=f"this agent's token (default {name}-secret)"
    )
    return parser


def adapter(args: argparse.Namespace, name: str, role: str) -> PeachAdapter:
    executor = SyncExecutor(args.url, token=args.token, mas=args.mas)
    return PeachAdapter(name, LangshawProtocol.load(PROTOCOL), role, executor)


def main(run: Callable[[argparse.Namespace], object], args: argparse.Namespace) -> int:
    """Run an agent until it is done or interrupted; report errors without tracebacks."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")

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
            print(f"{Path(sys.argv[0]).stem}: {exc}", file=sys.stderr)
            return 1

    return asyncio.run(guarded())
