"""The UCP Platform agent for ResilientUCP: a shopper told how its checkout ended.

It creates a checkout, optionally changes the cart (an Update, its own
version), lets the buyer confirm (``confirm``, say to show the totals), then
completes. Every ending the Business can say is handled:

* ``Completed``: the order is placed;
* ``Declined``: the merchant's messages say why (payment declined, out of
  stock); the buyer would pay another way or change the cart;
* ``Escalated``: the buyer must go on at ``continue_url`` (absent when even the
  merchant could not tell whether the order went through);
* ``Revoked``: the merchant called the checkout off;
* ``Rejected`` (of an Update): the checkout is cancelled, and the Business
  says ``Cancelled``;
* ``Failed``: the checkout could not be opened.

It asks for shipping (``shipping.ASK``) without naming the merchant's ids; as
in SimpleUCP, the proxy picks among the offers before Created, whose
``fulfillment`` says what was chosen.

``outcome`` holds the ending; ``done`` is set when the enactment is complete.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from langshaw import LangshawProtocol
from peach import ActionInstance, Executor, FeasibleAction, PeachAdapter
from strabo.ucp import shipping
from strabo.ucp.platform_agent import (
    SAMPLE_BUYER,
    SAMPLE_LINE_ITEMS,
    SAMPLE_PAYMENT_DATA,
    log_shipping,
)
from syncserver.bundled import path as bundled_protocol

log = logging.getLogger("strabo.ucp")
PROTOCOL = bundled_protocol("resilient-ucp")
ENDINGS = ("Completed", "Declined", "Escalated", "Revoked", "Cancelled", "Failed")
Confirm = Callable[[ActionInstance], Awaitable[bool]]

__all__ = ["ENDINGS", "PROTOCOL", "ResilientPlatform"]


async def _yes(created: ActionInstance) -> bool:
    return True


class ResilientPlatform(PeachAdapter):
    """A Platform that always learns how its checkout ended.

    ``line_items`` is the cart it opens; ``update``, if given, the cart it then
    changes to; ``payment_data`` what it pays with. ``confirm(latest)`` is the
    buyer's say before paying, given Created or (after an update) Updated with
    the totals: False cancels."""

    def __init__(
        self,
        executor: Executor,
        name: str = "platform",
        *,
        line_items: list[dict[str, Any]] | None = None,
        update: list[dict[str, Any]] | None = None,
        payment_data: dict[str, Any] | None = None,
        confirm: Confirm = _yes,
    ) -> None:
        super().__init__(name, LangshawProtocol.load(PROTOCOL), "Platform", executor)
        self.line_items = line_items if line_items is not None else SAMPLE_LINE_ITEMS
        self.update = update
        self.payment_data = payment_data if payment_data is not None else SAMPLE_PAYMENT_DATA
        self.confirm = confirm
        self.outcome: ActionInstance | None = None
        """The ending the Business said (one of ENDINGS), once it has."""
        self.done = asyncio.Event()
        self.on_enabled("Create")(self._create)
        self.observation("Created")(self._created)
        self.observation("Updated")(self._updated)
        self.observation("Rejected")(self._rejected)
        self.observation(*ENDINGS)(self._ended)
        self.on_completion(self._completed)

    async def _create(self, fa: FeasibleAction) -> None:
        await self.attempt([fa.bind(
            line_items=self.line_items, currency="USD", buyer=SAMPLE_BUYER, payment_pref={},
            fulfillment_pref=shipping.ASK)])

    async def _created(self, created: ActionInstance, performer: str) -> None:
        log_shipping(self.name, created.get("fulfillment"))
        if self.update is None:
            await self._complete(created)
            return
        await self.attempt([self.build_action("Update", {
            "cid": created["cid"], "v": str(uuid.uuid4()), "line_items": self.update})])

    async def _updated(self, updated: ActionInstance, performer: str) -> None:
        await self._complete(updated)

    async def _complete(self, latest: ActionInstance) -> None:
        """Complete (or Cancel, if the buyer says no); the session id and the
        enactment come from the state, given ``cid``."""
        cid = {"cid": latest["cid"]}
        if not await self.confirm(latest):
            await self.attempt([self.build_action("Cancel", cid)])
            return
        await self.attempt([self.build_action("Complete", {
            **cid, "payment_data": self.payment_data, "risk_signals": {"ip": "127.0.0.1"}})])

    async def _rejected(self, rejected: ActionInstance, performer: str) -> None:
        log.info("%s: the merchant rejected the update: %s", self.name,
                 _said(rejected["messages"]))
        await self.attempt([self.build_action("Cancel", {"cid": rejected["cid"]})])

    async def _ended(self, ending: ActionInstance, performer: str) -> None:
        self.outcome = ending
        if ending.name == "Completed":
            log.info("%s: order %s placed", self.name, ending["order"]["id"])
        elif ending.name == "Escalated":
            url = ending.get("continue_url")
            log.info("%s: the buyer must go on %s: %s", self.name,
                     f"at {url}" if url else "with the merchant (outcome unknown)",
                     _said(ending["messages"]))
        elif ending.name in ("Declined", "Revoked"):
            log.info("%s: checkout %s: %s", self.name, ending.name.lower(),
                     _said(ending["messages"]))
        else:
            log.info("%s: checkout ended: %s", self.name, ending.name)

    async def _completed(self, keys: dict[str, Any], mas_id: str) -> None:
        self.done.set()


def _said(messages: Any) -> str:
    if not isinstance(messages, list):
        return "(no messages)"
    return "; ".join(f"{m.get('code')}: {m.get('content')}" for m in messages
                     if isinstance(m, dict)) or "(no messages)"
