"""The UCP Business as a proxy for ResilientUCP: every ending is an action.

SimpleUCP gives the Business nothing to say when a Complete fails, so its
Platform waits. ResilientUCP has an action for each way UCP ends a checkout,
and this proxy says one for every trigger, whatever the merchant answered:

* Create: as SimpleUCP's proxy (a POST, then a PUT per shipping step); a
  failure is ``Failed`` with the reason.
* Update: the session is read and written back with the new cart (UCP's update
  replaces the whole session). ``Updated`` with the new totals, or
  ``Rejected`` with the merchant's error as UCP messages. A session the
  merchant has canceled is ``Revoked`` as well.
* Complete: the answer's status (:func:`strabo.ucp.outcomes.completion`):
  ``Completed``, ``Escalated`` (``requires_escalation`` and its
  ``continue_url``) or ``Revoked``; an error answer is ``Declined`` with its
  messages (payment declined, out of stock...). When the answer does not say
  (no answer, a 5xx, a session no longer open), the session is read: its
  status decides, and if it cannot be read the outcome is unknown, which is
  ``Escalated`` with no ``continue_url``.
* Cancel: ``Cancelled``, also when the session turns out already canceled.
  A Cancel the merchant refuses for an open session is the one failure with no
  action: it goes to ``on_error`` (an :class:`Escalation`) for the operator.

The decisions are pure functions in :mod:`strabo.ucp.outcomes`; this module
sends the requests and says the actions.
"""

from __future__ import annotations

import logging
from typing import Any

from langshaw import LangshawProtocol
from peach import ActionInstance, ActionRejected, BindError, Executor
from strabo.proxy import ProxyError
from strabo.ucp import outcomes
from strabo.ucp.ap2 import Ap2Signer
from strabo.ucp.checkout import (
    MAPPING,
    RETRY,
    BusinessProxy,
    checkout_of,
    open_checkout,
    ucp_header_hook,
)
from syncserver.bundled import path as bundled_protocol

log = logging.getLogger("strabo.ucp")
PROTOCOL = bundled_protocol("resilient-ucp")
# When an answer does not fit the protocol's types, what to say instead: the
# merchant acted, but what it said cannot be passed on.
MISFIT = {"Completed": "Escalated", "Declined": "Escalated", "Escalated": "Escalated",
          "Revoked": "Escalated", "Updated": "Rejected", "Rejected": "Rejected"}

__all__ = ["PROTOCOL", "RETRY", "resilient_proxy"]


def resilient_proxy(
    executor: Executor, merchant_url: str, name: str = "business",
    *, ucp_version: str | None = None, ap2: Ap2Signer | None = None,
    transport: str = "rest"
) -> BusinessProxy:
    protocol = LangshawProtocol.load(PROTOCOL)
    proxy = BusinessProxy(
        name, protocol, "Business", executor, base_url=merchant_url,
        internal=["cid", "v"], header_hook=ucp_header_hook,
        exclude=["Create", "Update", "Complete", "Cancel"], ucp_version=ucp_version,
        ucp_transport=transport, ap2=ap2,
        **RETRY)
    proxy.route("Create->>Created", "POST-/checkout-sessions", request=MAPPING, failure="Failed")
    proxy.route("Put", "PUT-/checkout-sessions/{id}", request=MAPPING)
    proxy.route("Get", "GET-/checkout-sessions/{id}")
    proxy.route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete")
    proxy.route("Cancel->>Cancelled", "POST-/checkout-sessions/{id}/cancel")

    async def session(checkout: Any) -> dict[str, Any] | None:
        """The session as it stands, or None when it cannot be read."""
        try:
            return checkout_of(await proxy.request("Get", {"id": checkout}), "Get")
        except ProxyError as error:
            log.warning("%s: cannot read session %s: %s", proxy.name, checkout, error)
            return None

    async def say(trigger: ActionInstance, name: str, data: dict[str, Any]) -> None:
        """Say ``name`` for ``trigger`` with ``data``; never raises.

        An answer that does not fit is said as MISFIT names, with a message of
        ours; when that action cannot follow ``trigger`` (a Revoked found on an
        Update has no Complete for Escalated to follow), as ``name`` itself with
        that message. A misfit includes a value that is no JSON value at all:
        Python's parser takes ``NaN`` and ``Infinity``, which bind() refuses
        without a ``path``; taken for our bug, it escaped the handler with a
        traceback and the Platform was told nothing. What still cannot be said
        goes to ``on_error``, in one line, instead of escaping."""
        try:
            instance = proxy.build_action(name, {**trigger.bindings, **data})
        except BindError as exc:
            if not _misfit(exc):
                if proxy.is_complete(trigger.keys):
                    # Another ending came first (a Cancel crossing a Revoked, say):
                    # the Platform knows how the checkout ended already.
                    log.info("%s: %s not said, the checkout has ended: %s", proxy.name, name,
                             exc)
                    return
                await unsaid(trigger, f"{name} cannot be performed: {exc}")
                return
            log.warning("%s: %s does not fit: %s", proxy.name, name, exc)
            checkout = trigger.get("id")
            order = proxy.placed.get(checkout) if isinstance(checkout, str) else None
            said = (f"the merchant placed order {order}, but its answer does not fit: {exc}"
                    if order else f"{name} from the merchant: {exc}")
            note = {"type": "error", "code": "invalid_answer", "severity":
                    "requires_buyer_review", "content": said}
            built, problem = None, f"{name} does not fit: {exc}"
            for fallback in dict.fromkeys(n for n in (MISFIT.get(name), name) if n):
                try:
                    built = proxy.build_action(fallback, {**trigger.bindings, "messages": [note]})
                    break
                except BindError as again:
                    problem = f"{name} does not fit ({exc}) and {fallback} cannot say so: {again}"
            if built is None:
                await unsaid(trigger, problem)
                return
            instance = built
        try:
            await proxy.attempt([instance])
        except ActionRejected as exc:  # another ending came first: the protocol says no
            await unsaid(trigger, f"{instance.name} was rejected: {exc}")

    async def unsaid(trigger: ActionInstance, problem: str) -> None:
        error = ProxyError(problem, code="unsaid")
        route = proxy.routes.get(trigger.name) or proxy.routes["Put"]
        await proxy.report(error, route, trigger, why="its answer cannot be said")

    @proxy.observation("Create")
    async def on_create(action: ActionInstance, performer: str) -> None:
        if performer == proxy.name:
            return
        await open_checkout(proxy, action, put="Put")

    @proxy.observation("Update")
    async def on_update(action: ActionInstance, performer: str) -> None:
        if performer == proxy.name:
            return
        try:
            current = checkout_of(await proxy.request("Get", {"id": action["id"]}), "Get")
            body = {"id": current["id"], "line_items": action["line_items"],
                    "currency": current.get("currency"), "payment_pref": {}}
            updated = checkout_of(await proxy.request("Put", body), "Put")
        except ProxyError as error:
            await say(action, "Rejected", {"messages": outcomes.error_messages(error)})
            now = await session(action["id"])
            ended = outcomes.settled(now) if now is not None else None
            if ended is not None and ended[0] == "Revoked":
                await say(action, *ended)
            return
        await say(action, "Updated", {"totals": updated.get("totals")})

    @proxy.observation("Complete")
    async def on_complete(action: ActionInstance, performer: str) -> None:
        if performer == proxy.name:
            return
        try:
            answer = checkout_of(await proxy.request("Complete", action.bindings), "Complete")
        except ProxyError as error:
            ending = outcomes.failed_completion(error)
            if ending is None:
                now = await session(action["id"])
                ending = (outcomes.settled(now) if now is not None else None) or (
                    outcomes.unknown(error, now))
            log.warning("%s: Complete %s failed (%s): %s", proxy.name, action.keys, error,
                        ending[0])
        else:
            ending = outcomes.completion(answer)
        await say(action, *ending)

    @proxy.observation("Cancel")
    async def on_cancel(action: ActionInstance, performer: str) -> None:
        if performer == proxy.name:
            return
        try:
            await proxy.request("Cancel", action.bindings)
        except ProxyError as error:
            now = await session(action["id"])
            if now is None or now.get("status") != "canceled":
                state = "unreadable" if now is None else now.get("status")
                await proxy.report(error, proxy.routes["Cancel"], action,
                                   why=f"the session is {state}, not canceled")
                return
        await say(action, "Cancelled", {})

    return proxy


def _misfit(error: BindError) -> bool:
    """Whether ``error`` is about the merchant's data, not our use of the protocol:
    a value of the wrong type or shape, or no JSON value at all (NaN, Infinity;
    both have a ``path``), or a required one absent."""
    return error.path is not None or error.missing
