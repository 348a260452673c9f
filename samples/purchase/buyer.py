"""The Buyer: asks for quotes, accepts the cheapest within budget, confirms delivery.

python -m samples.purchase.buyer --count 3
python -m samples.purchase.buyer --count 3 --peer --store buyer.db   # no SyncServer
"""

from __future__ import annotations

import asyncio
import sys

from samples.purchase._common import adapter, arguments, delivered, main

WISHES = [("pen", 10), ("notebook", 8), ("stapler", 20), ("lamp", 40)]


async def run(args) -> int:
    buyer = adapter(args, "buyer", "Buyer")
    finished: list[dict] = []
    all_done = asyncio.Event()

    @buyer.on_enabled("Accept")
    async def choose(fa) -> None:
        # Domain decision: the cheapest quote so far, if within budget.
        history = buyer.history(fa.keys)
        budget = next(i.bindings["budget"] for _, i, _ in history if i.name == "RFQ")
        quotes = [i for _, i, _ in history if i.name == "Quote"]
        best = min(quotes, key=lambda q: q.bindings["price"])
        if best.bindings["price"] <= budget:
            await buyer.attempt(
                [
                    fa.bind(
                        chosen=best.bindings["qid"],
                        price=best.bindings["price"],
                        address="1 Main St, Raleigh NC",
                    )
                ]
            )
        else:
            reject = next(f for f in buyer.enabled(fa.keys) if f.name == "Reject")
            await buyer.attempt([reject.bind(reason=f"over budget ({budget})")])

    @buyer.on_enabled("Completed")
    async def confirm(fa) -> None:
        await buyer.attempt([fa.bind(satisfaction="happy")])

    @buyer.on_completion
    async def done(keys, mas_id) -> None:
        outcome = [i.name for _, i, _ in buyer.history(keys)]
        finished.append(keys)
        print(f"buyer: purchase {keys['ID']} complete: {' -> '.join(outcome)}", flush=True)
        if len(finished) >= args.count:
            all_done.set()

    async with buyer:
        for n in range(args.count):
            item, budget = WISHES[n % len(WISHES)]
            rfq = next(f for f in buyer.enabled() if f.name == "RFQ")
            [sent] = await buyer.attempt([rfq.bind(item=item, budget=budget)])
            print(
                f"buyer: asked for a {item} (budget {budget}) as {sent.bindings['ID']}", flush=True
            )
        await all_done.wait()
        await delivered(buyer)  # peer to peer: the last Completed reaches the others
    return 0


if __name__ == "__main__":
    parser = arguments("Purchase Buyer agent", "buyer")
    parser.add_argument("--count", type=int, default=3, help="purchases to make (default 3)")
    sys.exit(main(run, parser.parse_args()))
