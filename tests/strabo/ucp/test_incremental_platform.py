"""The IncrementalUCP Platform forgets a checkout once it ends.

It remembers, per open checkout, the payment the merchant offers and the
shipping preferences it sent. Before, only a checkout that reached Complete
dropped them: one cancelled (an acknowledgment with an error) kept both for
good, so a long-running Platform grew with every checkout it had finished.
Here a scripted Business (a real SyncServer, in process) ends many checkouts,
half cancelled and half completed, and the Platform remembers none of them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langshaw import ActionInstance
from peach import LocalExecutor, PeachAdapter
from strabo.ucp.incremental_platform import incremental_platform, remembered
from syncserver import SyncServer
from tests.conftest import LINE_ITEMS, ORDER, load

CHECKOUTS = 40
ROLES = {"platform": ["Platform"], "business": ["Business"]}
ERROR = [{"type": "error", "code": "out_of_stock", "content": "no courier today"}]


def scripted_business(executor: LocalExecutor, seen: list[int],
                      remembered_now: Any) -> PeachAdapter:
    """Answers every change at once; shipping fails (an error, so the Platform
    cancels) for the checkouts whose session id is even, and succeeds with
    nothing to choose (so the Platform completes) for the others."""
    business = PeachAdapter("business", load("incremental-ucp.lsh"), "Business", executor)
    numbers: dict[str, int] = {}

    async def say(name: str, bindings: dict[str, Any]) -> None:
        await business.attempt([business.build_action(name, bindings)])

    @business.observation("Create")
    async def on_create(action: ActionInstance, performer: str) -> None:
        numbers[action["eid"]] = len(numbers)
        await say("Created", {"eid": action["eid"], "id": f"chk_{numbers[action['eid']]}"})

    @business.observation("ApplyDiscounts")
    async def on_discounts(action: ActionInstance, performer: str) -> None:
        await say("DiscountsApplied", {"eid": action["eid"], "v": action["v"]})

    @business.observation("SetFulfillment")
    async def on_shipping(action: ActionInstance, performer: str) -> None:
        failing = numbers[action["eid"]] % 2 == 0
        await say("FulfillmentSet", {"eid": action["eid"], "v": action["v"],
                                     **({"messages": ERROR} if failing else {})})

    @business.observation("Complete")
    async def on_complete(action: ActionInstance, performer: str) -> None:
        await say("Completed", {"eid": action["eid"], "order": ORDER})

    @business.observation("Cancel")
    async def on_cancel(action: ActionInstance, performer: str) -> None:
        seen.append(remembered_now())  # the cancelled checkout is still remembered here
        await say("Cancelled", {"eid": action["eid"]})

    return business


async def test_the_platform_remembers_no_checkout_that_ended() -> None:
    executor = LocalExecutor(SyncServer.embedded([load("incremental-ucp.lsh")], ROLES))
    platform, _ = incremental_platform(executor)
    memory = remembered(platform)
    seen: list[int] = []
    business = scripted_business(executor, seen, lambda: len(memory))
    ended: dict[str, str] = {}
    all_ended = asyncio.Event()

    @platform.on_completion
    async def on_ended(keys: dict[str, Any], mas_id: str) -> None:
        ended[keys["eid"]] = keys["eid"]
        if len(ended) == CHECKOUTS:
            all_ended.set()

    async with business, platform:
        # The Platform opens its first checkout itself; the test opens the rest.
        for _ in range(CHECKOUTS - 1):
            [create] = platform.initiating()
            await platform.attempt([create.bind(
                line_items=LINE_ITEMS, currency="USD", payment={})])
        await asyncio.wait_for(all_ended.wait(), 30)
        await platform.drain()
        await business.drain()
        history = [i.name for root in platform.enactments() for _, i, _ in platform.history(root)]
    assert history.count("Cancelled") == history.count("Completed") == CHECKOUTS // 2
    assert len(seen) == CHECKOUTS // 2 and min(seen) >= 1  # it did remember them, open
    assert len(memory) == 0 and memory.offered == {} and memory.sent == {}
