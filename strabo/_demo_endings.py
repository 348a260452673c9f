"""``strabo demo --protocol resilient --outcome X``: play one UCP ending.

The bundled merchant is told, through its testing endpoints, to fail the
checkout the way ``X`` names (decline the payment, run out of stock, ask for
escalation, cancel the session), and the ResilientUCP Platform shows that it
learns each ending instead of waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langshaw import ActionInstance
from peach import Executor
from strabo.ucp.resilient_platform import ResilientPlatform

log = logging.getLogger("strabo.demo")
# Each outcome, the ending the Platform must see, and what the merchant is told.
OUTCOMES = {
    "completed": "Completed",
    "declined": "Declined",
    "out-of-stock": "Declined",
    "escalated": "Escalated",
    "revoked": "Revoked",
    "rejected": "Cancelled",
}
ITEM = "bouquet_roses"
Testing = Callable[[str, str, Any], Awaitable[None]]

__all__ = ["OUTCOMES", "platform", "summary"]


def platform(
    executor: Executor, outcome: str, testing: Testing
) -> tuple[ResilientPlatform, asyncio.Event]:
    """The Platform for ``outcome``; ``testing(method, path, body)`` calls the
    bundled merchant's testing endpoints (``path`` under ``/testing/``)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
    options: dict[str, Any] = {}
    if outcome == "rejected":  # more than the shop will ever have
        options["update"] = [{"item": {"id": ITEM, "title": "Bouquet of Red Roses"},
                              "quantity": 1_000_000}]
    elif outcome != "completed":

        async def confirm(latest: ActionInstance) -> bool:
            if outcome == "out-of-stock":
                await testing("PUT", f"inventory/{ITEM}", {"quantity": 0})
            else:
                verb = {"declined": "decline", "escalated": "escalate", "revoked": "expire"}
                await testing("POST", f"checkout-sessions/{latest['id']}/{verb[outcome]}", None)
            return True

        options["confirm"] = confirm
    agent = ResilientPlatform(executor, **options)
    return agent, agent.done


def summary(agent: Any, outcome: str) -> tuple[bool, list[str]]:
    """Whether the Platform (a ResilientPlatform) saw the ending ``outcome`` calls
    for, and lines to print."""
    assert isinstance(agent, ResilientPlatform)
    ending = agent.outcome
    if ending is None:
        return False, ["  ending    none: the Platform was told nothing"]
    lines = [f"  ending    {ending.name} (expected {OUTCOMES[outcome]})"]
    for message in ending.get("messages") or []:
        lines.append(f"  message   {message.get('code')}: {message.get('content')}")
    if ending.get("continue_url"):
        lines.append(f"  continue  {ending['continue_url']}")
    if ending.name == "Completed":
        lines.append(f"  order     {ending['order']['id']}")
    return ending.name == OUTCOMES[outcome], lines
