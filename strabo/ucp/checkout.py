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
from strabo.proxy import (
    ProxyAdapter,
    ProxyError,
    ProxyHTTPError,
    ProxyRequest,
    ProxyRequestError,
    Route,
)
from strabo.ucp import versions

log = logging.getLogger("strabo.ucp")
# The Platform's preferences as the merchant's checkout fields.
MAPPING = {"discount_codes": "$.discounts", "fulfillment_pref": "$.fulfillment",
           "payment_pref": "$.payment"}
# Four tries at most, within 15 s: a merchant still failing after that is down.
RETRY: dict[str, Any] = {"retries": 3, "backoff": 0.2, "max_delay": 5.0, "retry_budget": 15.0}


def ucp_header_hook(request: ProxyRequest) -> dict[str, str]:
    """UCP's headers. The signing key comes from the environment and stays here:
    it is never bound in the protocol nor logged."""
    key = os.environ.get("UCP_SIGNING_KEY", "strabo-demo").encode()
    body = json.dumps(request.body, sort_keys=True).encode()
    return {
        "UCP-Agent": 'profile="https://strabo.example/profile"; version="2026-01-11"',
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


class BusinessProxy(ProxyAdapter):
    """A ProxyAdapter for UCP merchants.

    Its ``on_error`` handler records each failure that became no protocol action
    in ``escalations`` and sets ``escalated``, so that the application running
    the proxy can await it and act (alert, refund, retry later): the log line
    alone reaches nobody.

    It speaks the UCP version ``ucp_version`` (one of
    :data:`strabo.ucp.versions.SUPPORTED`), or, when None, the newest one the
    merchant's discovery profile offers, read before the first request. The
    routes and the protocols' types stay those of 2026-01-11: requests, headers
    and answers are translated at the wire (:mod:`strabo.ucp.versions`)."""

    def __init__(self, *args: Any, ucp_version: str | None = None, **options: Any) -> None:
        super().__init__(*args, **options)
        if ucp_version is not None and ucp_version not in versions.SUPPORTED:
            raise ValueError(f"ucp_version must be one of {', '.join(versions.SUPPORTED)} "
                             f"(or None, to negotiate), not {ucp_version!r}")
        self.ucp_version = ucp_version
        self.escalations: list[Escalation] = []
        self.escalated = asyncio.Event()
        self.on_error(self.escalate)
        self.route("Discover", "GET-/.well-known/ucp")
        self._negotiation = asyncio.Lock()
        # The last answer per session: a 2026-04-08 update must name the ids of
        # fulfillment methods and groups that 2026-01-11 requests leave out.
        self._sessions: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._hook_for_old = self.header_hook
        if ucp_version is not None:
            self._speak(ucp_version)

    def _speak(self, version: str) -> None:
        """Speak ``version`` from now on: its headers, through the header hook."""
        self.ucp_version = version
        old = self._hook_for_old
        if version != versions.OLD and old is not None:
            self.header_hook = lambda request: versions.headers_to_new(old(request))

    async def negotiate(self) -> str:
        """The UCP version to speak: ``ucp_version`` if set, else the newest
        both sides support, from the merchant's ``/.well-known/ucp`` (read once).
        Raises a ProxyError (unreachable, ``version_unsupported``,
        ``profile_malformed``), which fails the request that needed it."""
        async with self._negotiation:
            if self.ucp_version is None:
                profile = await super()._send(
                    self.routes["Discover"], "/.well-known/ucp", None, "discovery")
                self._speak(versions.negotiate(profile))
                log.info("%s: the merchant at %s speaks UCP %s", self.name, self.base_url,
                         self.ucp_version)
            assert self.ucp_version is not None
            return self.ucp_version

    async def _send(self, route: Route, path: str, body: Any, idempotency_key: str) -> Any:
        """Send in the version spoken: 2026-01-11 as the routes build it, or
        translated out and back (a 2026-04-08 error envelope, HTTP 200, is raised
        as the 4xx 2026-01-11 would have sent, for the failure policies)."""
        if route.name == "Discover":
            return await super()._send(route, path, body, idempotency_key)
        version = self.ucp_version or await self.negotiate()
        if version == versions.OLD:
            return await super()._send(route, path, body, idempotency_key)
        operation = versions.operation_of(route.method, path)
        checkout = path.rstrip("/").split("/")[2] if path.count("/") >= 2 else None
        sent = versions.request_to_new(operation, body, session=self._sessions.get(checkout or ""))
        try:
            answer = await super()._send(route, path, sent, idempotency_key)
        except ProxyHTTPError as error:
            raise versions.http_error_to_old(error) from None
        old = versions.answer_to_old(operation, answer, route=route.name)
        if operation in ("create", "get", "update") and isinstance(old, dict) and isinstance(
                old.get("id"), str):
            self._sessions[old["id"]] = old
            self._sessions.move_to_end(old["id"])
            while len(self._sessions) > 4096:
                self._sessions.popitem(last=False)
        return old

    async def escalate(
        self, error: ProxyError, route: Route, trigger: ActionInstance | None
    ) -> None:
        bindings = trigger.bindings if trigger is not None else {}
        checkout = bindings.get("id")
        self.escalations.append(Escalation(
            route.trigger, dict(trigger.keys) if trigger is not None else {},
            checkout if isinstance(checkout, str) else None, error.summary(), error.attempts))
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
    Any failure cancels the half-made session and becomes the route's failure
    action (``Failed`` with the reason), as does an answer that does not fit
    the protocol's types."""
    session = None
    try:
        first, *more = shipping_steps(action.get("fulfillment_pref"))
        session = checkout_of(await proxy.request(
            "Create", with_step(action.bindings, first)), "Create")
        for step in more:
            session = checkout_of(await proxy.request(put, with_step({
                **action.bindings, "id": session["id"], "line_items": cart(session)},
                step)), put)
    except ProxyError as error:
        if session is not None:  # do not leave a half-made session open
            await cancel_quietly(proxy, session["id"])
        return await proxy.fail("Create", action, error)
    return await proxy.reply("Create", action, {**action.bindings, **session})
