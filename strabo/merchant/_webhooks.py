"""Order events for agents: find the agent's webhook, then POST events to it.

An agent names its profile in the UCP-Agent header (``profile="https://..."``). When
the profile declares a capability with ``config.webhook_url``, the merchant keeps
that URL on the checkout (``platform.webhook_url``) and POSTs an ``order_placed``
event when the checkout completes and ``order_shipped`` when the order ships.

Profiles are fetched on create and update, like the reference merchant, but each
URL's answer (or failure) is cached for a minute so that an unreachable profile
does not slow every call. Delivery failures are logged, never raised: the buyer's
order stands whether or not the agent hears about it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx

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


async def deliver(url: str, event: WebhookEvent) -> bool:
    """POST ``event`` to ``url``; True if the agent answered 2xx."""
    try:
        async with httpx.AsyncClient(timeout=DELIVERY_TIMEOUT) as client:
            response = await client.post(url, json=dump(event))
    except httpx.HTTPError as exc:
        log.warning("cannot deliver %s to %s: %s", event.event_type, url, exc)
        return False
    if not response.is_success:
        log.warning("webhook %s answered %s to %s", url, response.status_code, event.event_type)
    return response.is_success
