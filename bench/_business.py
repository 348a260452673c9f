"""The Business agent of bench/peer.py, in its own process (bench/peer.py starts it).

It plays Business in SimpleUCP and answers each Create whose ``cid`` starts with
"rt" with Created, from an ``on_enabled`` handler (the reactive agent of the
round trip); other Creates it only receives (they time the Platform's attempts).

    python bench/_business.py --directory FILE --store PATH   # peer to peer
    python bench/_business.py --url URL --mas NAME --token T  # on a SyncServer

It prints "ready" once its adapter is live, and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

from langshaw import LangshawProtocol  # noqa: E402
from peach import Executor, FeasibleAction, PeachAdapter, SyncExecutor  # noqa: E402

PROTOCOL = ROOT / "protocols" / "atomic-ucp.lsh"
ROUND_TRIP = "rt"  # the prefix of the cids Business answers

# What Business binds in Created: shaped like a UCP checkout (as in bench/syncserver.py).
CREATED: dict[str, Any] = {
    "totals": [{"type": "subtotal", "amount": 3500}, {"type": "total", "amount": 3500}],
    "payment": {"handlers": [{"id": "mock_payment_handler", "name": "dev.ucp.mock_payment"}]},
    "discounts": {"codes": [], "applied": []},
}


def answer_creates(business: PeachAdapter) -> None:
    """Business answers every round-trip Create with Created, as soon as it may."""

    @business.on_enabled("Created")
    async def created(feasible: FeasibleAction) -> None:
        cid = str(feasible.fixed["cid"])
        if cid.startswith(ROUND_TRIP):
            await business.attempt([feasible.bind(id=f"chk-{cid}", **CREATED)])


async def main(args: argparse.Namespace) -> None:
    protocol = LangshawProtocol.load(PROTOCOL)
    executor: Executor
    if args.directory:
        from peach.peer import Directory, PeerExecutor

        store = None if args.store == ":memory:" else args.store
        executor = PeerExecutor("business", Directory.load(args.directory), store=store)
    else:
        executor = SyncExecutor(args.url, token=args.token, mas=args.mas)
    business = PeachAdapter("business", protocol, "Business", executor)
    answer_creates(business)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with business:
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--directory", help="peer to peer: the directory (TOML)")
    parser.add_argument("--store", default=":memory:", help="peer to peer: SQLite path")
    parser.add_argument("--url", help="on a SyncServer: its base URL")
    parser.add_argument("--mas", default="bench")
    parser.add_argument("--token", default="business")
    arguments = parser.parse_args()
    if not arguments.directory and not arguments.url:
        parser.error("give --directory (peer to peer) or --url (SyncServer)")
    asyncio.run(main(arguments))
