"""The UCP Platform agent for IncrementalUCP: each change is its own version.

UCP assumes a session changes one request at a time; here each change opens a
new version (a fresh ``v``) and the next one waits for the Business to
acknowledge the last: discounts, then shipping, then completion. Shipping is
chosen among what the merchant offers, one step per version: the Platform asks
for shipping, reads the destinations FulfillmentSet offers and picks the first,
then reads the options and picks the cheapest (:mod:`strabo.ucp.shipping`).

An acknowledgment whose ``messages`` hold an error (the change was not
applied) ends the checkout with a Cancel: the Business then says Cancelled.
Complete and Cancel happen once per checkout and exclude each other (``nono
Complete Cancel``): once the Platform asked to complete, it may not cancel. A
Complete the merchant cannot say as Completed is a StatusChange, which ends
the checkout: ``requires_escalation`` (no order; the session is still open,
for the buyer to go on with the merchant), ``completed`` (the merchant placed
the order but its answer does not fit), ``complete_in_progress`` (the outcome
is unknown) or ``canceled``. The Platform logs why and stops; the order, if
any, is the buyer's to follow with the merchant.

What it remembers per checkout (the payment the merchant offers, the shipping
preferences sent) is forgotten when the checkout's enactment completes, so a
long-running Platform does not grow with the checkouts it has finished
(:func:`remembered`).

Given a ``buyer`` (:mod:`strabo.ucp.buying`), it also sets it (SetBuyer) after
the discounts, before shipping.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
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
"""StatusChange statuses that say no order was placed (the session is still open).
The Platform does not cancel (it may not after Complete): the buyer may go on
with the merchant."""
SHIPPING_STEPS = 3
"""At most this many SetFulfillment per checkout: a method, a destination, options."""


@dataclass
class Remembered:
    """What a Platform keeps per open checkout (by ``eid``), until it ends."""

    offered: dict[str, Any] = field(default_factory=dict)
    """The payment the merchant's checkout offers (Created's ``payment_config``)."""
    sent: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """The shipping preferences sent so far."""

    def forget(self, eid: str) -> None:
        self.offered.pop(eid, None)
        self.sent.pop(eid, None)

    def __len__(self) -> int:
        return len(self.offered.keys() | self.sent.keys())


_REMEMBERED: weakref.WeakKeyDictionary[PeachAdapter, Remembered] = weakref.WeakKeyDictionary()


def remembered(adapter: PeachAdapter) -> Remembered:
    """What the Platform ``adapter`` (made by :func:`incremental_platform`)
    remembers of its open checkouts: to inspect that it stays bounded."""
    return _REMEMBERED[adapter]


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
    memory = _REMEMBERED[adapter] = Remembered()
    offered, sent = memory.offered, memory.sent

    async def then(action: str, eid: str, **bindings: object) -> None:
        # Only the root key: a change opens a new version (fresh v); Complete and
        # Cancel live in the checkout's root scope.
        await adapter.attempt([adapter.build_action(action, {"eid": eid, **bindings})])

    @adapter.on_completion
    async def on_done(keys: dict[str, Any], mas_id: str) -> None:
        memory.forget(str(keys["eid"]))  # Completed, Cancelled or StatusChange: it ended
        done.set()

    @adapter.on_enabled("Create")
    async def on_create_enabled(fa: FeasibleAction) -> None:
        await adapter.attempt([fa.bind(
            line_items=line_items or SAMPLE_LINE_ITEMS, currency="USD",
            buyer=buyer or SAMPLE_BUYER, payment={})])

    @adapter.observation("Created")
    async def on_created(action: ActionInstance, performer: str) -> None:
        offered[str(action["eid"])] = action.get("payment_config")
        await then("ApplyDiscounts", action["eid"], discount_codes={"codes": ["10OFF"]})

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
        if action.name == "StatusChange":
            # The checkout ends here; after Complete the Platform may not cancel.
            said = ("no order was placed and the session is still open" if
                    action["status"] in CANCELLABLE else "the order may exist (or does)")
            log.warning("%s: checkout %s is %s after Complete, and the merchant's answer "
                        "cannot be said as Completed (%s): the buyer must follow it with the "
                        "merchant", name, action["eid"], action["status"], said)
            done.set()
        elif failed(action):
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
