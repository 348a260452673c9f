"""What a UCP Business proxy needs besides its routes: UCP's headers, the
merchant's shipping steps, checks on what the Platform bound and on what the
merchant answered, and the escalation of failures the protocol cannot express.

Both Business proxies (SimpleUCP and IncrementalUCP) use it; an agent of your
own for another UCP merchant can too.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from peach import ActionInstance
from strabo.proxy import ProxyAdapter, ProxyError, ProxyRequest, ProxyRequestError, Route
from strabo.ucp import lenient, shipping
from strabo.ucp.ap2 import PresentsMandates
from strabo.ucp.negotiation import SESSIONS_KEPT

log = logging.getLogger("strabo.ucp")
# The Platform's preferences as the merchant's checkout fields.
MAPPING = {"discount_codes": "$.discounts", "fulfillment_pref": "$.fulfillment",
           "payment_pref": "$.payment"}
# Four tries at most, within 15 s: a merchant still failing after that is down.
RETRY: dict[str, Any] = {"retries": 3, "backoff": 0.2, "max_delay": 5.0, "retry_budget": 15.0}


def ucp_header_hook(request: ProxyRequest) -> dict[str, str]:
    """UCP's headers. The signing key comes from the environment and stays here:
    it is never bound in the protocol nor logged. ``UCP-Agent`` names no
    profile: the proxies add the one they serve or are given
    (:class:`strabo.ucp.negotiation.VersionedProxy`)."""
    key = os.environ.get("UCP_SIGNING_KEY", "strabo-demo").encode()
    body = json.dumps(request.body, sort_keys=True).encode()
    return {
        "UCP-Agent": 'version="2026-01-11"',
        "Request-Signature": hmac.new(key, body, hashlib.sha256).hexdigest(),
        "Request-Id": str(uuid.uuid4()),
        "Idempotency-Key": request.idempotency_key,
    }


def shipping_steps(preference: Any) -> list[dict[str, Any] | None]:
    """The merchant takes a shipping choice in steps: method, destination, option.

    ``preference`` is the Platform's ``fulfillment_pref``: null, or
    ``{"methods": [{"type", "selected_destination_id"?, "groups"?}]}`` (the first
    method is used). It is another agent's data, so any other shape raises
    ProxyRequestError naming the attribute and the fault, for a clean failure."""
    where = "fulfillment_pref"
    _expect(preference is None or isinstance(preference, dict), where,
            "an object with 'methods', or null", preference)
    methods = (preference or {}).get("methods") or []
    _expect(isinstance(methods, list), f"{where}.methods", "a list of methods", methods)
    if not methods:
        return [None]
    wanted = methods[0]
    _expect(isinstance(wanted, dict), f"{where}.methods[0]", "an object", wanted)
    kind, destination = wanted.get("type"), wanted.get("selected_destination_id")
    _expect(isinstance(kind, str) and kind != "", f"{where}.methods[0].type",
            "a non-empty string", kind)
    steps: list[dict[str, Any] | None] = [{"methods": [{"type": kind}]}]
    if destination is None or destination == "":
        return steps
    _expect(isinstance(destination, str), f"{where}.methods[0].selected_destination_id",
            "a string", destination)
    chosen = {"type": kind, "selected_destination_id": destination}
    steps.append({"methods": [chosen]})
    groups = wanted.get("groups") or []
    _expect(isinstance(groups, list) and all(isinstance(g, dict) for g in groups),
            f"{where}.methods[0].groups", "a list of objects", groups)
    if groups:
        steps.append({"methods": [{**chosen, "groups": groups}]})
    return steps


def with_step(bindings: Mapping[str, Any], step: dict[str, Any] | None) -> dict[str, Any]:
    """The bindings of a request carrying one shipping step: no step, no
    ``fulfillment_pref`` at all (absent, not null, on the wire)."""
    request = {k: v for k, v in bindings.items() if k != "fulfillment_pref"}
    if step is not None:
        request["fulfillment_pref"] = step
    return request


def _expect(ok: bool, where: str, expected: str, value: Any) -> None:
    if ok:
        return
    kinds = {str: "a string", bool: "a boolean", int: "a number", float: "a number",
             list: "a list", dict: "an object"}
    shown = f" ({json.dumps(value)[:40]})" if isinstance(value, str | int | float) else ""
    got = kinds.get(type(value), type(value).__name__) + shown
    raise ProxyRequestError(f"{where} must be {expected}, not {got}",
                            attribute=where.split(".")[0])


def checkout_of(answer: Any, route: str) -> dict[str, Any]:
    """The merchant's answer as a checkout session, checked for what the next step reads."""
    if not isinstance(answer, dict) or not isinstance(answer.get("id"), str):
        raise ProxyError(f"{route}: the merchant's answer is not a checkout session (no id)",
                         route=route, code="malformed_answer")
    return answer


def cart(session: dict[str, Any]) -> list[dict[str, Any]]:
    """The session's line items as an update must send them back."""
    try:
        return [{"id": li["id"], "quantity": li["quantity"],
                 "item": {k: li["item"][k] for k in ("id", "title")}}
                for li in session["line_items"]]
    except (KeyError, TypeError) as exc:
        raise ProxyError(f"session {session['id']}: malformed line_items ({exc!r})",
                         code="malformed_answer") from None


@dataclass(frozen=True)
class Escalation:
    """A merchant failure the protocol gives the Business no action to answer.
    The Platform sees nothing and its trigger stays unanswered, so whoever runs
    the proxy must act; the merchant's session is left as it is."""

    action: str  # the unanswered trigger: Complete, Cancel...
    keys: dict[str, Any]  # its enactment
    checkout: str | None  # the merchant's session id
    error: dict[str, Any]  # status, code, message
    attempts: int
    order: str | None = None  # the order the merchant said it placed, if it did


class BusinessProxy(PresentsMandates):
    """A ProxyAdapter for UCP merchants, in the version they speak
    (:class:`strabo.ucp.negotiation.VersionedProxy`).

    Its ``on_error`` handler records each failure that became no protocol action
    in ``escalations`` and sets ``escalated``, so that the application running
    the proxy can await it and act (alert, refund, retry later): the log line
    alone reaches nobody.

    ``ap2``, an :class:`strabo.ucp.ap2.Ap2Signer`, presents its principal's AP2
    checkout mandate on each Complete to a merchant that advertises the
    extension (strabo.ucp.ap2.PresentsMandates)."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.escalations: list[Escalation] = []
        self.escalated = asyncio.Event()
        self.placed: OrderedDict[str, str] = OrderedDict()
        """Session id -> the order the merchant said it placed (the last
        SESSIONS_KEPT): what a Complete whose answer does not fit must not
        cancel, and what its escalation names."""
        self.deviations: set[str] = set()
        """The merchant's deviations read past so far (:mod:`strabo.ucp.lenient`)."""
        self.on_error(self.escalate)

    async def _send(self, route: Route, path: str, body: Any, idempotency_key: str) -> Any:
        """Every answer, read past the merchant's known deviations (logged:
        :mod:`strabo.ucp.lenient`), and the orders it says were placed noted."""
        answer, deviations = lenient.read(
            await super()._send(route, path, body, idempotency_key))
        for deviation in deviations:  # each at WARNING once, then at DEBUG
            level = logging.DEBUG if deviation in self.deviations else logging.WARNING
            self.deviations.add(deviation)
            log.log(level, "%s: %s %s: the merchant answered %s; read as UCP has it "
                    "(a deviation from UCP %s)", self.name, route.method, path, deviation,
                    self.ucp_version)
        order = lenient.order_placed(answer)
        if order is not None and isinstance(answer, dict) and isinstance(answer.get("id"), str):
            self.placed[answer["id"]] = order
            self.placed.move_to_end(answer["id"])
            while len(self.placed) > SESSIONS_KEPT:
                self.placed.popitem(last=False)
        return answer

    async def escalate(
        self, error: ProxyError, route: Route, trigger: ActionInstance | None
    ) -> None:
        bindings = trigger.bindings if trigger is not None else {}
        checkout = bindings.get("id")
        checkout = checkout if isinstance(checkout, str) else None
        self.escalations.append(Escalation(
            route.trigger, dict(trigger.keys) if trigger is not None else {},
            checkout, error.summary(), error.attempts,
            self.placed.get(checkout) if checkout else None))
        self.escalated.set()


async def cancel_quietly(proxy: ProxyAdapter, checkout: str) -> None:
    """Cancel a session the checkout will not use; a failure here only leaves it
    to expire, and the checkout's own failure is what matters."""
    try:
        await proxy.request("Cancel", {"id": checkout})
    except ProxyError as error:
        log.warning("%s: could not cancel the unused session %s: %s", proxy.name, checkout, error)


async def open_checkout(
    proxy: ProxyAdapter, action: ActionInstance, *, put: str = "Update"
) -> ActionInstance | None:
    """Open a session for a Create and say Created with it (Create's route
    response): a POST, then a PUT (the route named ``put``) per shipping step.
    What the Platform's preference leaves open (a method with no destination,
    a destination with no option) is chosen among the merchant's offers, as
    :func:`strabo.ucp.shipping.next_choice` picks (the first destination, the
    cheapest option): SimpleUCP gives the Platform no say between Create and
    Created. Any failure cancels the half-made session and becomes the route's
    failure action (``Failed`` with the reason), as does an answer that does
    not fit the protocol's types."""
    session = None
    try:
        first, *more = shipping_steps(action.get("fulfillment_pref"))
        session = checkout_of(await proxy.request(
            "Create", with_step(action.bindings, first)), "Create")

        async def send(step: dict[str, Any] | None) -> dict[str, Any]:
            assert session is not None
            return checkout_of(await proxy.request(put, with_step({
                **action.bindings, "id": session["id"], "line_items": cart(session)},
                step)), put)

        for step in more:
            session = await send(step)
        asked = first is None
        for _ in range(3 if first is not None else 0):  # (the method,) a destination, options
            offered = session.get("fulfillment")
            step = shipping.next_choice(offered)
            if step is None and not asked and shipping.chosen(offered)[0] is None:
                # Some merchants (the UCP reference) offer destinations only
                # when an update asks for the method: ask again, by a PUT.
                step, asked = first, True
            if step is None:
                break
            session = await send(step)
    except ProxyError as error:
        if session is not None:  # do not leave a half-made session open
            await cancel_quietly(proxy, session["id"])
        return await proxy.fail("Create", action, error)
    return await proxy.reply("Create", action, {**action.bindings, **session})
