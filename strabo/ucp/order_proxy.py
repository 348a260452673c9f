"""The Business of UCPOrder: the merchant's order webhooks, verified, as protocol actions.

UCP's Order capability pushes what happens to an order (order.md, *Events*):
the merchant POSTs the full order to the webhook URL the platform's profile
declares (``config.webhook_url`` of ``dev.ucp.shopping.order``), signed. This
proxy serves that URL (:data:`WEBHOOK_PATH`) and, for each event it accepts,
performs in ``protocols/ucp-order.lsh`` (UCPOrder) what is new in the order:
``Placed``, ``Shipped``, ``Delivered``, ``Canceled`` from the fulfillment
events, ``Refunded``, ``Returned`` or ``Adjusted`` for each completed
adjustment. The Platform sees those as protocol actions.

What it checks first (order.md, *Webhook Signature Verification*;
signatures.md, *REST Request Verification*), refusing with the spec's error
code, logging the refusal and enacting nothing:

* authentication: the RFC 9421 signature (or, from a 2026-01-11 merchant, the
  detached JWS of ``Request-Signature``), with a key of ``signing_keys`` in
  the signer's profile, named by ``UCP-Agent``; the profile is fetched (and
  fetched again for a ``kid`` it did not list, a rotated key, but at most once
  a minute, :data:`REFRESH_FLOOR`, whatever ``kid`` a sender makes up);
* size and time: a body over :data:`MAX_BODY` is refused (413) unread, one
  not sent within ``body_timeout`` seconds too (408);
* authorization: the signer is the merchant this proxy works for (its
  profile URL), so no other business can send events for its orders.

Replays enact nothing twice: each ``Webhook-Id`` (or body ``event_id``) is
handled once, and what is enacted is what the protocol's state does not have
yet. The answer (2xx, UCP's acknowledgement) comes once the actions are
final, so that a 2xx means the Platform can see them; if they could not be
performed the answer is a 503 and the merchant tries again (it must retry).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from langshaw import LangshawProtocol
from peach import ActionInstance, ActionRejected, BindError, Executor, PeachAdapter
from strabo.ucpwire import ap2 as jose
from strabo.ucpwire.signatures import (
    SignatureError,
    Signed,
    profile_url,
    verify_detached,
    verify_request,
)
from syncserver.bundled import path as bundled_protocol

log = logging.getLogger("strabo.ucp")
PROTOCOL = bundled_protocol("ucp-order")
WEBHOOK_PATH = "/webhooks/ucp/orders"
PROFILE_PATH = "/profile"
ORDER = "dev.ucp.shopping.order"
CHECKOUT = "dev.ucp.shopping.checkout"
STOPPED = ("canceled", "undeliverable", "returned_to_sender")
ADJUSTMENTS = {"refund": ("Refunded", "refund"), "return": ("Returned", "return_entry")}
KEPT = 10_000
"""How many refusals, and handled webhook ids, the receiver keeps (the newest):
anyone who reaches its port can add to both."""
MAX_BODY = 1 << 20
"""The largest webhook body read (1 MiB): larger is refused (413) before any
signature is checked, so no one makes the proxy buffer what it likes."""
REFRESH_FLOOR = 60.0
"""Seconds between fetches of the merchant's profile for an unknown ``kid``
(overview.md *Fetching*: at most once per TTL floor per origin)."""
KEYS_TTL = 3600.0
"""Seconds the keys read from the merchant's profile are trusted without
reading it again: a key the merchant withdrew (rotated out, compromised) stops
verifying within this time, not only when a signer names an unknown ``kid``."""

__all__ = ["PROTOCOL", "WEBHOOK_PATH", "OrderProxy", "Refused", "platform_profile"]


@dataclass(frozen=True)
class Refused:
    """A webhook the proxy refused: its ``Webhook-Id``, the spec's code, why."""

    webhook_id: str | None
    code: str
    message: str


def platform_profile(base: str, version: str) -> dict[str, Any]:
    """A platform profile declaring checkout and the order capability with this
    proxy's webhook URL (``base`` + :data:`WEBHOOK_PATH`), in ``version``'s shape."""
    config = {"webhook_url": base.rstrip("/") + WEBHOOK_PATH}
    if version >= "2026-04-08":
        capabilities: Any = {CHECKOUT: [{"version": version}],
                             ORDER: [{"version": version, "config": config}]}
    else:
        capabilities = [{"name": CHECKOUT, "version": version},
                        {"name": ORDER, "version": version, "config": config}]
    return {"ucp": {"version": version, "capabilities": capabilities}}


class _MerchantKeys:
    """The merchant's public keys, from its profile's ``signing_keys`` (cached,
    fetched again for an unknown ``kid``, or once they are :data:`KEYS_TTL`
    old, at most every :data:`REFRESH_FLOOR` seconds; a failed fetch keeps the
    keys known, as the merchant's outage must not stop its orders) and from
    configuration."""

    def __init__(self, profile: str, trusted: Iterable[Mapping[str, Any]], timeout: float):
        self.profile = profile
        self.timeout = timeout
        self._configured = {k["kid"]: dict(k) for k in trusted if isinstance(k.get("kid"), str)}
        self._fetched: dict[str, dict[str, Any]] = {}
        self._last_fetch: float | None = None
        self._read_at: float | None = None  # when the profile's keys were last read
        self._fetching = asyncio.Lock()  # webhooks at once wait for one fetch

    async def keys(self, kid: str) -> dict[str, jose.PublicKey]:
        async with self._fetching:
            now = asyncio.get_running_loop().time()
            allowed = self._last_fetch is None or now - self._last_fetch >= REFRESH_FLOOR
            unknown = kid not in self._fetched and kid not in self._configured
            old = self._read_at is not None and now - self._read_at >= KEYS_TTL
            if allowed and (unknown or old):
                self._last_fetch = now  # any kid a sender makes up: one fetch a minute
                fetched = await self._fetch()
                if fetched is not None:  # a failed fetch forgets no key
                    self._fetched, self._read_at = fetched, now
        found = {}
        for name, jwk in {**self._fetched, **self._configured}.items():
            try:
                found[name] = jose.key_from_jwk(jwk)
            except ValueError:
                continue
        return found

    async def _fetch(self) -> dict[str, dict[str, Any]] | None:
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.get(self.profile)
            return jose.signing_keys(response.json()) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("cannot read the merchant's profile %s: %s", self.profile, exc)
            return None


class OrderProxy:
    """UCPOrder's Business for the merchant at ``merchant_url``: a webhook
    receiver (:meth:`app`, to serve) in front of a :class:`PeachAdapter`.

    ``trusted_keys`` are public JWKs (with ``kid``) of the merchant known by
    onboarding, besides its profile's ``signing_keys``. ``version`` is the UCP
    version of the platform profile served at :data:`PROFILE_PATH`. Listeners
    in ``enacted`` get each action performed; ``refused`` lists the refusals."""

    def __init__(self, executor: Executor, merchant_url: str, name: str = "orders", *,
                 trusted_keys: Iterable[Mapping[str, Any]] = (), version: str = "2026-01-11",
                 timeout: float = 3.0, body_timeout: float = 10.0) -> None:
        self.adapter = PeachAdapter(name, LangshawProtocol.load(PROTOCOL), "Business", executor)
        self.merchant_profile = merchant_url.rstrip("/") + "/.well-known/ucp"
        self.version = version
        self.body_timeout = body_timeout
        self.refused: deque[Refused] = deque(maxlen=KEPT)
        self.enacted: list[Callable[[ActionInstance], None]] = []
        self._keys = _MerchantKeys(self.merchant_profile, trusted_keys, timeout)
        self._handled: OrderedDict[str, None] = OrderedDict()  # the newest KEPT ids
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> OrderProxy:
        await self.adapter.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.adapter.stop()

    def app(self) -> Starlette:
        """The receiver: ``POST`` :data:`WEBHOOK_PATH`, and ``GET``
        :data:`PROFILE_PATH`, a platform profile naming it (:func:`platform_profile`)."""

        async def profile(request: Request) -> Response:
            return JSONResponse(platform_profile(str(request.base_url), self.version))

        return Starlette(routes=[Route(WEBHOOK_PATH, self.receive, methods=["POST"]),
                                 Route(PROFILE_PATH, profile, methods=["GET"])])

    # ------------------------------------------------------------------ receiving

    async def receive(self, request: Request) -> Response:
        """One webhook: verify, authorize, then enact what is new (see the module)."""
        headers = {k.lower(): v for k, v in request.headers.items()}
        webhook_id = headers.get("webhook-id")
        try:
            body = await self._body(request)
            await self._authenticate(request.method, str(request.url), headers, body)
            order = _order(body)
        except SignatureError as exc:
            return self._refuse(webhook_id, exc.code, exc.message, exc.status)
        webhook_id = webhook_id or _text(order.get("event_id"))
        async with self._lock:
            if webhook_id is not None and webhook_id in self._handled:
                log.info("webhook %s again: already handled", webhook_id)
                return self._ack()
            try:
                await self.enact(order)
            except Exception as exc:  # the SyncServer or a peer out of reach: it may pass
                if isinstance(exc, ActionRejected | BindError):
                    return self._not_enacted(webhook_id, order, exc)
                log.error("order %s: cannot enact the webhook: %s: %s", order.get("id"),
                          type(exc).__name__, exc)
                return JSONResponse({"code": "unavailable", "content": str(exc)}, 503)
            if webhook_id is not None:
                # Forgetting an old id is safe: enacting again performs only
                # what the state lacks.
                self._handled[webhook_id] = None
                while len(self._handled) > KEPT:
                    self._handled.popitem(last=False)
        return self._ack()

    def _not_enacted(
        self, webhook_id: str | None, order: dict[str, Any], exc: ActionRejected | BindError
    ) -> Response:
        """The answer to a webhook the protocol refused. Data the protocol's types
        refuse will not fit on a retry: 422, and the merchant stops; anything
        else may pass later: 503, and it tries again."""
        lasting = isinstance(exc, BindError) or exc.rule == "type"
        log.error("order %s: cannot enact the webhook: %s", order.get("id"), exc)
        if lasting:
            self.refused.append(Refused(webhook_id, "invalid_body", str(exc)))
        return JSONResponse({"code": "invalid_body" if lasting else "unavailable",
                             "content": str(exc)}, 422 if lasting else 503)

    async def _body(self, request: Request) -> bytes:
        """The body, at most :data:`MAX_BODY` bytes within ``body_timeout``
        seconds: a sender may neither fill the memory nor hold a request open."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY:
            raise SignatureError("body_too_large", f"the body is over {MAX_BODY} bytes")
        body = bytearray()
        try:
            async with asyncio.timeout(self.body_timeout):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > MAX_BODY:
                        raise SignatureError("body_too_large",
                                             f"the body is over {MAX_BODY} bytes")
        except TimeoutError:
            raise SignatureError("body_timeout", f"the body took over {self.body_timeout} s"
                                 ) from None
        return bytes(body)

    async def _authenticate(self, method: str, url: str, headers: dict[str, str],
                            body: bytes) -> Signed:
        signer = profile_url(headers.get("ucp-agent", ""))
        if "signature-input" not in headers and "request-signature" in headers:
            pass  # 2026-01-11: no UCP-Agent required; the key is the merchant's
        elif signer is None:
            raise SignatureError("signature_missing", "no UCP-Agent profile names the signer")
        if signer is not None and signer.rstrip("/") != self.merchant_profile:
            raise SignatureError("profile_not_trusted",
                                 f"the signer {signer} is not this order's business "
                                 f"({self.merchant_profile})")
        if "signature-input" not in headers and "signature" not in headers:
            if "request-signature" not in headers:
                raise SignatureError("signature_missing", "the webhook is not signed")
            kid = _detached_kid(headers["request-signature"])
            keys = await self._keys.keys(kid)
            return verify_detached(headers["request-signature"], body, keys.get)
        kid = _keyid(headers.get("signature-input", ""))
        keys = await self._keys.keys(kid)
        return verify_request(method, url, headers, body, keys.get)

    def _refuse(self, webhook_id: str | None, code: str, message: str, status: int) -> Response:
        log.warning("refused webhook %s: %s: %s", webhook_id or "(no id)", code, message)
        self.refused.append(Refused(webhook_id, code, message))
        return JSONResponse({"code": code, "content": message}, status)

    def _ack(self) -> Response:
        return JSONResponse({"ucp": {"version": self.version, "status": "success"}})

    # ------------------------------------------------------------------- enacting

    async def enact(self, order: Mapping[str, Any]) -> list[ActionInstance]:
        """Perform what ``order`` (the order entity of an event) says that the
        protocol's state does not have yet; the actions performed, in order."""
        oid = str(order["id"])
        await self.adapter.sync()
        done: list[ActionInstance] = []
        for name, bindings in _news(order, self._history(oid)):
            instance = self.adapter.build_action(name, {"oid": oid, **bindings})
            [final] = await self.adapter.attempt([instance])
            done.append(final)
            for listener in self.enacted:
                listener(final)
        return done

    def _history(self, oid: str) -> dict[str, set[str]]:
        """What the enactment of ``oid`` holds: action names, and adjustment ids."""
        seen: dict[str, set[str]] = {"actions": set(), "adjustments": set()}
        if (oid,) not in self.adapter.enactments():
            return seen
        for _, instance, _ in self.adapter.history({"oid": oid}):
            seen["actions"].add(instance.name)
            if "aid" in instance.keys:
                seen["adjustments"].add(str(instance.keys["aid"]))
        return seen


def _news(order: Mapping[str, Any], seen: dict[str, set[str]]) -> list[tuple[str, dict[str, Any]]]:
    """The actions ``order`` calls for beyond ``seen``, in the order to perform them."""
    actions = set(seen["actions"])
    news: list[tuple[str, dict[str, Any]]] = []

    def add(name: str, bindings: dict[str, Any]) -> None:
        actions.add(name)
        news.append((name, bindings))

    if "Placed" not in actions:
        add("Placed", {"checkout_id": order.get("checkout_id"),
                       "permalink_url": order.get("permalink_url"),
                       "totals": order.get("totals") or []})
    events = [e for e in (order.get("fulfillment") or {}).get("events") or []
              if isinstance(e, dict)]
    for event in events:
        kind = event.get("type")
        if kind in ("shipped", "delivered") and "Shipped" not in actions \
                and "Canceled" not in actions:
            add("Shipped", {"shipment": _clean(event)})  # a delivery implies a shipment
        if kind == "delivered" and "Delivered" not in actions and "Canceled" not in actions \
                and _all_delivered(order, events):
            add("Delivered", {"delivery": _clean(event)})
        if kind in STOPPED and "Canceled" not in actions and "Delivered" not in actions:
            add("Canceled", {"cancellation": _clean(event)})
    for adjustment in order.get("adjustments") or []:
        aid = str(adjustment.get("id")) if isinstance(adjustment, dict) else None
        if aid is None or aid in seen["adjustments"] or adjustment.get("status") != "completed":
            continue
        name, attribute = ADJUSTMENTS.get(str(adjustment.get("type")), ("Adjusted", "adjustment"))
        seen["adjustments"].add(aid)
        news.append((name, {"aid": aid, attribute: _clean(adjustment)}))
    return news


def _all_delivered(order: Mapping[str, Any], events: list[dict[str, Any]]) -> bool:
    """Whether the delivered events cover every line item (an event naming no
    line items, as the reference merchant's, is about the whole order)."""
    delivered: dict[str, int] = {}
    for event in events:
        if event.get("type") != "delivered":
            continue
        lines = event.get("line_items")
        if not lines:
            return True
        for line in lines if isinstance(lines, list) else []:
            # A malformed entry counts for nothing; the protocol's types refuse it.
            if isinstance(line, dict) and isinstance(line.get("quantity", 0), int):
                key = str(line.get("id"))
                delivered[key] = delivered.get(key, 0) + line.get("quantity", 0)
    for item in order.get("line_items") or []:
        quantity = item.get("quantity") if isinstance(item, dict) else None
        wanted = quantity.get("total", 0) if isinstance(quantity, dict) else 0
        if isinstance(wanted, int) and delivered.get(str(item.get("id")), 0) < wanted:
            return False
    return True


def _clean(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A log entry without nulls (absent is not null in the protocol's types)."""
    return {k: v for k, v in entry.items() if v is not None}


def _order(body: bytes) -> dict[str, Any]:
    """The order entity of a webhook body: the body itself (the spec), or its
    ``order`` (the reference merchant's event shape)."""
    try:
        document = json.loads(body)
    except ValueError:
        raise SignatureError("invalid_body", "the body is not JSON") from None
    if isinstance(document, dict) and not isinstance(document.get("line_items"), list):
        document = document.get("order")
    if not isinstance(document, dict) or not isinstance(document.get("id"), str):
        raise SignatureError("invalid_body", "the body is not an order")
    fulfillment = document.get("fulfillment")
    if fulfillment is not None and not isinstance(fulfillment, dict):
        raise SignatureError("invalid_body", "the order's fulfillment is not an object")
    shapes = {"line_items": document.get("line_items"), "adjustments": document.get("adjustments"),
              "fulfillment.events": (fulfillment or {}).get("events")}
    for name, value in shapes.items():  # what _news reads, so that it reads no wrong shape
        if value is not None and not (isinstance(value, list)
                                      and all(isinstance(v, dict) for v in value)):
            raise SignatureError("invalid_body", f"the order's {name} is not a list of objects")
    return document


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _keyid(signature_input: str) -> str:
    import re

    match = re.search(r';keyid="([^"]*)"', signature_input)
    return match.group(1) if match else ""


def _detached_kid(token: str) -> str:
    try:
        header = json.loads(jose.b64url_decode(token.partition("..")[0]))
    except ValueError:
        return ""
    kid = header.get("kid") if isinstance(header, dict) else None
    return kid if isinstance(kid, str) else ""
