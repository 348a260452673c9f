"""The UCP Platform agent: a shopper checking out through SimpleUCP (Listings 4-5).

It knows nothing of HTTP or UCP sessions: it creates a checkout, completes it
when the protocol enables that, and stops when the checkout is complete.

It asks for shipping without naming ids it cannot know (each merchant has its
own: ``addr_1``, ``dest_1``...): SimpleUCP gives it one say before the merchant
offers anything, so the Business proxy picks among the offers
(:func:`strabo.ucp.shipping.next_choice`: the first destination, the cheapest
option) and Created's ``fulfillment`` tells the Platform what was offered and
chosen.

It may be given the line items and the buyer (:mod:`strabo.ucp.buying`), and
pays through a handler the merchant's checkout offers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from langshaw import LangshawProtocol
from peach import ActionInstance, Executor, FeasibleAction, PeachAdapter
from strabo.ucp import shipping
from strabo.ucp.buying import payment_for
from syncserver.bundled import path as bundled_protocol

log = logging.getLogger("strabo.ucp")
PROTOCOL = bundled_protocol("atomic-ucp")
SAMPLE_LINE_ITEMS = [
    {"item": {"id": "bouquet_roses", "title": "Bouquet of Red Roses"}, "quantity": 1}
]
SAMPLE_BUYER = {"full_name": "John Doe", "email": "john.doe@example.com"}
# A full preference, for a merchant whose ids are known (the bundled one's);
# the sample Platforms ask with shipping.ASK and choose among the offers.
SAMPLE_FULFILLMENT_PREF = {
    "methods": [
        {
            "type": "shipping",
            "selected_destination_id": "addr_1",
            "groups": [{"selected_option_id": "std-ship"}],
        }
    ]
}
SAMPLE_PAYMENT_DATA = {
    "id": "instr_1",
    "handler_id": "mock_payment_handler",
    "type": "card",
    "brand": "Visa",
    "last_digits": "1234",
    "credential": {"type": "token", "token": "success_token"},
}


def platform_agent(
    executor: Executor, name: str = "platform", *,
    line_items: list[dict[str, Any]] | None = None, buyer: dict[str, Any] | None = None,
) -> tuple[PeachAdapter, asyncio.Event]:
    """The Platform, buying ``line_items`` (default :data:`SAMPLE_LINE_ITEMS`)
    for ``buyer`` (default :data:`SAMPLE_BUYER`)."""
    protocol = LangshawProtocol.load(PROTOCOL)
    adapter = PeachAdapter(name, protocol, "Platform", executor)
    done = asyncio.Event()
    offered: dict[str, Any] = {}  # cid -> the payment the merchant's checkout offers

    @adapter.on_completion
    async def on_done(keys: dict[str, Any], mas_id: str) -> None:
        done.set()

    @adapter.observation("Created", "Failed", "Completed")
    async def on_observation(action: ActionInstance, performer: str) -> None:
        log.info("Observed %s by %s", action.action.name, performer)
        if action.name == "Created":
            log_shipping(name, action.get("fulfillment"))
            offered[str(action["cid"])] = action.get("payment")

    @adapter.on_enabled("Create")
    async def on_create_enabled(fa: FeasibleAction) -> None:
        await adapter.attempt([fa.bind(
            line_items=line_items or SAMPLE_LINE_ITEMS, currency="USD",
            buyer=buyer or SAMPLE_BUYER, payment_pref={}, discount_codes={"codes": ["10OFF"]},
            fulfillment_pref=shipping.ASK)])

    @adapter.on_enabled("Complete")
    async def on_complete_enabled(fa: FeasibleAction) -> None:
        payment = payment_for(offered.pop(str(fa.keys.get("cid")), None), SAMPLE_PAYMENT_DATA)
        await adapter.attempt([fa.bind(payment_data=payment, risk_signals={"ip": "127.0.0.1"})])

    return adapter, done


def log_shipping(agent: str, fulfillment: Any) -> None:
    """Say what the merchant offered and what was chosen (INFO)."""
    destination, options = shipping.chosen(fulfillment)
    log.info("%s: shipping to %s by %s", agent, destination or "(none chosen)",
             ", ".join(options) or "(no option chosen)")
