"""The Seller: quotes from its price list, ships what was bought from it.

python -m samples.purchase.seller
python -m samples.purchase.seller --peer --store seller.db   # no SyncServer
"""

from __future__ import annotations

import asyncio
import sys

from samples.purchase._common import adapter, arguments, main

PRICES = {"pen": 4, "notebook": 6, "stapler": 12, "lamp": 55}


async def run(args) -> int:
    seller = adapter(args, args.name, "Seller")

    @seller.on_enabled("Quote")
    async def quote(fa) -> None:
        item = fa.fixed["item"]
        if item in PRICES and fa.new_keys:  # quote once per request, in a scope of our own
            await seller.attempt([fa.bind(price=PRICES[item] + args.markup)])

    @seller.on_enabled("Ship")
    async def ship(fa) -> None:
        history = seller.history(fa.keys)
        mine = {
            i.bindings["qid"] for _, i, who in history if i.name == "Quote" and who == seller.name
        }
        accepted = next(i for _, i, _ in history if i.name == "Accept")
        if accepted.bindings["chosen"] in mine:
            await seller.attempt([fa.bind(delivery_date="next monday")])

    async with seller:
        print(f"seller: {seller.name} open for business", flush=True)
        await asyncio.Event().wait()  # until interrupted
    return 0


if __name__ == "__main__":
    parser = arguments("Purchase Seller agent", "seller")
    parser.add_argument("--name", default="seller", help="agent name (default seller)")
    parser.add_argument("--markup", type=int, default=0, help="added to every price")
    sys.exit(main(run, parser.parse_args()))
