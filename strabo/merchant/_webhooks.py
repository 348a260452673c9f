"""Order events for agents: find the agent's webhook, then POST events to it.

An agent names its profile in the UCP-Agent header (``profile="https://..."``). When
the profile declares a capability with ``config.webhook_url``, the merchant keeps
that URL on the checkout (``platform.webhook_url``) and POSTs an ``order_placed``
event when the checkout completes, ``order_shipped`` when the order ships and
``order_updated`` when an order update appends to it.

Each event is signed as order.md wants (:class:`WebhookSigner`, whose key the
merchant's profile lists in ``signing_keys``): RFC 9421 ``Signature-Input`` and
``Signature`` over the method, authority, path, the headers below and the body's
``Content-Digest`` (2026-04-08), and a detached JWS in ``Request-Signature``
(2026-01-11). Standard Webhooks' ``Webhook-Id`` (the event's id, also the
body's ``event_id``) and ``Webhook-Timestamp`` come with it, and ``UCP-Agent``
names the merchant's profile. The body is the full order entity with the
2026-01-11 event fields (``event_id``, ``created_time``), and also, for the
reference merchant's clients and the conformance suite, its event shape
(``event_type``, ``checkout_id``, ``order``).

Profiles are fetched on create and update, like the reference merchant, but each
URL's answer (or failure) is cached for a minute so that an unreachable profile
does not slow every call. Delivery failures are logged, never raised: the buyer's
order stands whether or not the agent hears about it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx

from strabo.ucpwire import ap2 as jose
from strabo.ucpwire.signatures import sign_request

from .wire import WebhookEvent, dump

log = logging.getLogger("strabo.merchant")


def webhook_from_profile(profile: Any) -> str | None:
    """The first ``config.webhook_url`` among an agent profile's capabilities:
    a list of them in 2026-01-11, a registry of lists by name in 2026-04-08."""
    if not isinstance(profile, dict):
        return None
    ucp = profile.get("ucp")
    capabilities = ucp.get("capabilities") if isinstance(ucp, dict) else None
    if isinstance(capabilities, dict):
        capabilities = [entry for entries in capabilities.values()
                        if isinstance(entries, list) for entry in entries]
    for capability in capabilities if isinstance(capabilities, list) else []:
        config = capability.get("config") if isinstance(capability, dict) else None
        url = config.get("webhook_url") if isinstance(config, dict) else None
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            return url
    return None


class AgentProfiles:
    """Reads agents' profiles, with a short cache: the webhook URL they declare,
    and (for a merchant serving 2026-04-08) the protocol version they speak."""

    def __init__(self, *, timeout: float = 3.0, ttl: float = 60.0) -> None:
        self.timeout = timeout
        self.ttl = ttl
        self._cache: dict[str, tuple[float, Any]] = {}

    async def webhook_url(self, profile_url: str | None) -> str | None:
        """The webhook URL the profile at ``profile_url`` declares, if any."""
        return webhook_from_profile(await self.profile(profile_url))

    async def profile(self, profile_url: str | None) -> Any:
        """The JSON profile at ``profile_url``; None when there is no http(s) URL
        or it cannot be read (a failure is cached like an answer)."""
        if not profile_url or not profile_url.startswith(("http://", "https://")):
            return None
        cached = self._cache.get(profile_url)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        document = await self._fetch(profile_url)
        self._cache[profile_url] = (now, document)
        return document

    async def _fetch(self, profile_url: str) -> Any:
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.get(profile_url)
            if response.status_code != 200:
                log.info("agent profile %s answered %s", profile_url, response.status_code)
                return None
            return response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.info("cannot read agent profile %s: %s", profile_url, exc)
            return None


DELIVERY_TIMEOUT = 5.0
"""Seconds an agent's webhook gets to answer an event."""
RETRY_DELAYS = (0.2, 0.5)
"""Seconds before each new try of a delivery that failed (so three tries at most)."""


class WebhookSigner:
    """The merchant's webhook signing key: ``key`` (a fresh P-256 key when None),
    published under ``kid`` in the profile's ``signing_keys`` (:meth:`publish`)."""

    def __init__(self, key: jose.PrivateKey | None = None, kid: str = "merchant-webhooks"):
        self.key = key if key is not None else jose.generate_key()
        self.kid = kid

    def public_jwk(self) -> dict[str, Any]:
        """The key as ``signing_keys`` lists it."""
        return jose.public_jwk(self.key, self.kid)

    def publish(self, profile: dict[str, Any]) -> dict[str, Any]:
        """``profile`` with this key in its ``signing_keys`` (once)."""
        keys = [k for k in profile.get("signing_keys") or [] if isinstance(k, dict)]
        if not any(k.get("kid") == self.kid for k in keys):
            profile = {**profile, "signing_keys": [*keys, self.public_jwk()]}
        return profile


def webhook_body(event: WebhookEvent, event_id: str, created: datetime) -> dict[str, Any]:
    """What the merchant POSTs: the order entity with ``event_id`` and
    ``created_time`` (the spec's body), and the reference merchant's event fields."""
    order = dump(event.order)
    return {**order, "event_id": event_id,
            "created_time": created.isoformat().replace("+00:00", "Z"),
            "event_type": event.event_type, "checkout_id": event.checkout_id, "order": order}


def webhook_request(url: str, event: WebhookEvent, *, signer: WebhookSigner | None,
                    profile_url: str | None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of the POST of ``event`` to ``url``, signed by
    ``signer`` (unsigned when None: for tests of what a receiver refuses)."""
    event_id = str(uuid.uuid4())
    created = datetime.now(UTC)
    body = json.dumps(webhook_body(event, event_id, created), separators=(",", ":")).encode()
    headers = {"content-type": "application/json", "webhook-id": event_id,
               "webhook-timestamp": str(int(created.timestamp()))}
    if profile_url:
        headers["ucp-agent"] = f'profile="{profile_url}"'
    if signer is not None:
        headers |= sign_request("POST", url, headers, body, signer.key, signer.kid,
                                created=int(created.timestamp()))
    return body, headers


async def deliver(url: str, event: WebhookEvent, *, signer: WebhookSigner | None = None,
                  profile_url: str | None = None) -> bool:
    """POST ``event`` to ``url``, signed by ``signer`` for the merchant whose
    profile is at ``profile_url``; True if the agent answered 2xx.

    UCP wants failed deliveries retried: no answer, a 5xx or a 429 is tried again
    (:data:`RETRY_DELAYS`), the same request, so its ``Webhook-Id`` lets the
    receiver see a repeat."""
    body, headers = webhook_request(url, event, signer=signer, profile_url=profile_url)
    async with httpx.AsyncClient(timeout=DELIVERY_TIMEOUT) as client:
        for delay in (*RETRY_DELAYS, None):
            try:
                response = await client.post(url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                problem = f"cannot deliver {event.event_type} to {url}: {exc}"
            else:
                if response.is_success:
                    return True
                problem = f"webhook {url} answered {response.status_code} to {event.event_type}"
                if response.status_code < 500 and response.status_code != 429:
                    delay = None
            if delay is None:
                log.warning("%s", problem)
                return False
            await asyncio.sleep(delay)
    return False
