"""A Purchase agent enacting peer to peer, as a process of its own (for fault tests).

    python -m tests.peer_agent --directory mas.toml --agent seller --store seller.db --count 30

The agent plays the role the directory gives it in Purchase (Buyer, Seller or
Shipper), reacts to what becomes enabled and walks the happy path: RFQ, Quote,
Accept, Ship, Deliver, Completed. The buyer opens enactments until its log
holds ``--count`` of them (so a restarted buyer opens only what it had not).
Every handler first looks at the enactment's history, so an agent restarted on
its log does not perform again what it already did.

It prints one line per event, flushed, for a test to wait on:

    ready <agent> enactments=<n>     started, with <n> enactments in its log
    act <Action> <ID>                an attempt of its own was kept in its log
    done <agent> complete=<n> refusals=<r>   it knows at least <count> enactments,
                                     all complete, and every peer acknowledged
                                     its messages

then keeps serving its peers until SIGTERM or SIGINT. With ``--hold-after N``
it performs at most N actions in this run and then holds (its handlers wait,
its executor still receives and sends): a test that kills it after it printed
fewer than N actions knows that the kill lands before the agent could finish.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from langshaw import LangshawProtocol
from peach import PeachAdapter
from peach.feasible import FeasibleAction
from peach.peer import Directory, PeerExecutor

PROTOCOL = "Purchase"
PURCHASE = Path(__file__).resolve().parent.parent / "protocols" / "purchase.lsh"


def say(line: str) -> None:
    print(line, flush=True)


class Gate:
    """Lets at most ``limit`` actions through in this run (None: no limit); the
    ones after wait for good, so that a test killing the agent after some actions
    knows the kill lands before the agent did all it has to do."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.passed = 0

    async def enter(self) -> None:
        if self.limit is not None and self.passed >= self.limit:
            await asyncio.Event().wait()  # until the process is killed
        self.passed += 1


def react(adapter: PeachAdapter, gate: Gate) -> None:
    """Register the handlers of the adapter's role (the Purchase happy path)."""

    def done_by_me(fa: FeasibleAction, action: str) -> bool:
        return any(
            i.name == action and who == adapter.name for _, i, who in adapter.history(fa.keys)
        )

    async def act(fa: FeasibleAction, **bindings: Any) -> None:
        await gate.enter()
        [kept] = await adapter.attempt([fa.bind(**bindings)])
        say(f"act {kept.name} {kept.bindings['ID']}")

    if adapter.role == "Seller":

        @adapter.on_enabled("Quote")
        async def quote(fa: FeasibleAction) -> None:
            if not done_by_me(fa, "Quote"):  # one quote per request
                await act(fa, price=4)

        @adapter.on_enabled("Ship")
        async def ship(fa: FeasibleAction) -> None:
            await act(fa, delivery_date="next monday")

    elif adapter.role == "Buyer":

        @adapter.on_enabled("Accept")
        async def accept(fa: FeasibleAction) -> None:
            [offer] = [i for _, i, _ in adapter.history(fa.keys) if i.name == "Quote"]
            await act(
                fa, chosen=offer.bindings["qid"], price=offer.bindings["price"], address="1 Main St"
            )

        @adapter.on_enabled("Completed")
        async def completed(fa: FeasibleAction) -> None:
            await act(fa, satisfaction="happy")

    elif adapter.role == "Shipper":

        @adapter.on_enabled("Deliver")
        async def deliver(fa: FeasibleAction) -> None:
            await act(fa, outcome="delivered")


async def run(args: argparse.Namespace) -> int:
    directory = Directory.load(args.directory)
    executor = PeerExecutor(args.agent, directory, store=args.store)
    [role] = directory.peer(args.agent).plays(PROTOCOL)
    protocol = LangshawProtocol.load(PURCHASE)
    adapter = PeachAdapter(args.agent, protocol, role, executor)
    gate = Gate(args.hold_after)
    react(adapter, gate)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def complete() -> int:
        return sum(1 for root in adapter.enactments() if adapter.is_complete(root))

    def finished() -> bool:
        known = len(adapter.enactments())
        return known >= args.count and complete() == known and executor.outstanding() == 0

    async with adapter:
        say(f"ready {args.agent} enactments={len(adapter.enactments())}")
        if role == "Buyer":
            for _ in range(args.count - len(adapter.enactments())):
                await gate.enter()
                [rfq] = [f for f in adapter.initiating() if f.name == "RFQ"]
                [kept] = await adapter.attempt([rfq.bind(item="pen", budget=10)])
                say(f"act RFQ {kept.bindings['ID']}")
        waiting = asyncio.create_task(stop.wait())
        try:
            while not finished() and not stop.is_set():
                executor.progress.clear()
                if finished():
                    break
                progress = asyncio.create_task(executor.progress.wait())
                await asyncio.wait({progress, waiting}, return_when=asyncio.FIRST_COMPLETED)
                progress.cancel()
            if finished():
                say(f"done {args.agent} complete={complete()} refusals={len(executor.refusals())}")
            await stop.wait()
        finally:
            waiting.cancel()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--directory", required=True, help="the directory (TOML)")
    parser.add_argument("--agent", required=True, help="this agent's name in the directory")
    parser.add_argument("--store", required=True, help="its SQLite log (':memory:' for none)")
    parser.add_argument("--count", type=int, required=True, help="enactments to complete")
    parser.add_argument(
        "--hold-after",
        type=int,
        default=None,
        help="perform at most this many actions in this run, then hold (for fault tests)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
