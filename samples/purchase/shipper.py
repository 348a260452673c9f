"""The Shipper: delivers whatever was shipped.

python -m samples.purchase.shipper
python -m samples.purchase.shipper --peer --store shipper.db   # no SyncServer
"""

from __future__ import annotations

import asyncio
import sys

from samples.purchase._common import adapter, arguments, main


async def run(args) -> int:
    shipper = adapter(args, "shipper", "Shipper")

    @shipper.on_enabled("Deliver")
    async def deliver(fa) -> None:
        await shipper.attempt([fa.bind(outcome=f"delivered to {fa.fixed['address']}")])

    async with shipper:
        print("shipper: ready", flush=True)
        await asyncio.Event().wait()  # until interrupted
    return 0


if __name__ == "__main__":
    sys.exit(main(run, arguments("Purchase Shipper agent", "shipper").parse_args()))
