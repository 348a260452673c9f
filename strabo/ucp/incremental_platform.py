"""The UCP Platform agent for IncrementalUCP: each change is its own version.

UCP assumes a session changes one request at a time; here each change opens a
new version (a fresh ``v``) and the next one waits for the Business to
acknowledge the last: discounts, then shipping, then completion. Shipping is
chosen among what the merchant offers, one step per version: the Platform asks
for shipping, reads the destinations FulfillmentSet offers and picks the first,
then reads the options and picks the cheapest (:mod:`strabo.ucp.shipping`).

An acknowledgment whose ``messages`` hold an error (the change was not
applied), or a StatusChange ``requires_escalation`` (the merchant could not
complete and the session is still open: no order), ends the checkout with a
Cancel in a new version: the Business then says Cancelled. Any other
StatusChange after Complete (``completed``: the merchant placed the order but
its answer does not fit; ``complete_in_progress``: the outcome is unknown;
``canceled``) is never cancelled: the Platform stops, logs why, and sets
``done``; the order, if any, is the buyer's to follow with the merchant.

Given a ``buyer`` (:mod:`strabo.ucp.buying`), it also sets it (SetBuyer) after
the discounts, before shipping.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from langshaw import LangshawProtocol
from peach import ActionInstance, Executor, FeasibleAction, PeachAdapter
from strabo.ucp import shipping
from strabo.ucp.buying import payment_for
from strabo.ucp.platform_agent import SAMPLE_BUYER, SAMPLE_LINE_ITEMS, SAMPLE_PAYMENT_DATA
from syncserver.bundled import path as bundled_protocol

log = logging.getLogger("strabo.ucp")
PROTOCOL = bundled_protocol("incremental-ucp")
CANCELLABLE = frozenset({"requires_escalation", "incomplete", "ready_for_complete"})
"""StatusChange statuses that say no order was placed: the Platform may cancel."""
SHIPPING_STEPS = 3
"""At most this many SetFulfillment per checkout: a method, a destination, options."""


def failed(action: ActionInstance) -> bool:
    """Whether the Business said the checkout needs escalation, or that the change
    did not go through (an error in UCP's ``messages``)."""
    if action.name == "StatusChange":
        return bool(action["status"] == "requires_escalation")
    messages: Any = action.get("messages")  # absent when the merchant said nothing
    return isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("type") == "error" for m in messages)


def incremental_platform(
    executor: Executor, name: str = "platform", *,
    line_items: list[dict[str, Any]] | None = None, buyer: dict[str, Any] | None = None,
) -> tuple[PeachAdapter, asyncio.Event]:
    """The Platform, buying ``line_items`` (default the sample's) for ``buyer``
    (default the sample's, given at Create only; given, also set by SetBuyer)."""
    protocol = LangshawProtocol.load(PROTOCOL)
    adapter = PeachAdapter(name, protocol, "Platform", executor)
    done = asyncio.Event()

    async def then(action: str, eid: str, **bindings: object) -> None:
        # Only the root key: a new version (fresh v) is opened for the change.
        await adapter.attempt([adapter.build_action(action, {"eid": eid, **bindings})])

    @adapter.on_completion
    async def on_done(keys: dict[str, Any], mas_id: str) -> None:
        done.set()

    @adapter.on_enabled("Create")
    async def on_create_enabled(fa: FeasibleAction) -> None:
        await adapter.attempt([fa.bind(
            line_items=line_items or SAMPLE_LINE_ITEMS, currency="USD",
            buyer=buyer or SAMPLE_BUYER, payment={})])

    offered: dict[str, Any] = {}  # eid -> the payment the merchant's checkout offers

    @adapter.observation("Created")
    async def on_created(action: ActionInstance, performer: str) -> None:
        offered[str(action["eid"])] = action.get("payment_config")
        await then("ApplyDiscounts", action["eid"], discount_codes={"codes": ["10OFF"]})

    sent: dict[str, list[dict[str, Any]]] = {}  # eid -> shipping preferences sent

    async def choose(eid: str, preference: dict[str, Any]) -> None:
        chosen = sent.setdefault(eid, [])
        if preference in chosen or len(chosen) >= SHIPPING_STEPS:
            log.warning("%s: the merchant did not take the shipping choice %s: cancelling",
                        name, preference)
            await then("Cancel", eid)
            return
        chosen.append(preference)
        await then("SetFulfillment", eid, fulfillment_pref=preference)

    @adapter.observation("DiscountsApplied", "BuyerSet", "FulfillmentSet", "StatusChange")
    async def on_answer(action: ActionInstance, performer: str) -> None:
        if action.name == "StatusChange" and action["status"] not in CANCELLABLE:
            # The order may exist (or does): cancelling it would be wrong.
            log.warning("%s: checkout %s is %s after Complete, and the merchant's answer "
                        "cannot be said as Completed: not cancelling; the buyer must follow "
                        "it with the merchant", name, action["eid"], action["status"])
            done.set()
        elif failed(action) or action.name == "StatusChange":
            await then("Cancel", action["eid"])
        elif action.name == "DiscountsApplied" and buyer is not None:
            await then("SetBuyer", action["eid"], buyer=buyer)
        elif action.name in ("DiscountsApplied", "BuyerSet"):
            await choose(action["eid"], shipping.ASK)
        elif action.name == "FulfillmentSet":
            step = shipping.next_choice(action.get("fulfillment"))
            if step is not None:
                await choose(action["eid"], step)
                return
            sent.pop(action["eid"], None)
            payment = offered.pop(str(action["eid"]), None)
            await then("Complete", action["eid"],
                       payment_data=payment_for(payment, SAMPLE_PAYMENT_DATA),
                       risk_signals={"ip": "127.0.0.1"})

    return adapter, done
