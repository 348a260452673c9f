"""The UCP Platform agent for IncrementalUCP: each change is its own version.

UCP assumes a session changes one request at a time; here each change opens a
new version (a fresh ``v``) and the next one waits for the Business to
acknowledge the last: discounts, then shipping, then completion. An
acknowledgment whose ``messages`` hold an error (the change was not applied),
or a StatusChange asking for escalation (the merchant could not complete), ends
the checkout with a Cancel in a new version: the Business then says Cancelled.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langshaw import LangshawProtocol
from peach import ActionInstance, Executor, FeasibleAction, PeachAdapter
from strabo.ucp.platform_agent import (
    SAMPLE_BUYER,
    SAMPLE_FULFILLMENT_PREF,
    SAMPLE_LINE_ITEMS,
    SAMPLE_PAYMENT_DATA,
)
from syncserver.bundled import path as bundled_protocol

PROTOCOL = bundled_protocol("incremental-ucp")


def failed(action: ActionInstance) -> bool:
    """Whether the Business said the checkout needs escalation, or that the change
    did not go through (an error in UCP's ``messages``)."""
    if action.name == "StatusChange":
        return bool(action["status"] == "requires_escalation")
    messages: Any = action.get("messages")  # absent when the merchant said nothing
    return isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("type") == "error" for m in messages)


def incremental_platform(
    executor: Executor, name: str = "platform"
) -> tuple[PeachAdapter, asyncio.Event]:
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
            line_items=SAMPLE_LINE_ITEMS, currency="USD", buyer=SAMPLE_BUYER, payment={})])

    @adapter.observation("Created")
    async def on_created(action: ActionInstance, performer: str) -> None:
        await then("ApplyDiscounts", action["eid"], discount_codes={"codes": ["10OFF"]})

    @adapter.observation("DiscountsApplied", "FulfillmentSet", "StatusChange")
    async def on_answer(action: ActionInstance, performer: str) -> None:
        if failed(action):
            await then("Cancel", action["eid"])
        elif action.name == "DiscountsApplied":
            await then("SetFulfillment", action["eid"], fulfillment_pref=SAMPLE_FULFILLMENT_PREF)
        elif action.name == "FulfillmentSet":
            await then("Complete", action["eid"], payment_data=SAMPLE_PAYMENT_DATA,
                       risk_signals={"ip": "127.0.0.1"})

    return adapter, done
