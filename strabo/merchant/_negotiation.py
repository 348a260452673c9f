"""The platform's profile as 2026-04-08 negotiation reads it, and what it yields.

A merchant serving 2026-04-08 must fetch and validate the profile a request's
``UCP-Agent`` names before anything else (overview.md, *Business Requirements*
1), and refuse a profile it cannot use with the spec's transport errors
(*Error Handling*, *Error Codes*; *Profile Requirements*, *Fetching*):

* ``400 invalid_profile_url``: no profile named, a malformed URL, one not over
  HTTPS, or a host that does not resolve;
* ``424 profile_unreachable``: the host resolved but the fetch failed (no
  connection, a timeout, an answer other than 2xx; redirects are not followed);
  ``timeout`` bounds the whole fetch, so a server trickling bytes is cut too;
* ``422 profile_malformed``: what came back is not JSON, or not a profile, or
  is larger than :data:`MAX_PROFILE_BYTES` (not read further).

HTTPS is required of every profile URL but loopback ones (``localhost``,
``127.0.0.0/8``, ``::1``), so that a platform on the same machine (tests, the
demo, a proxy's own profile) can be named over plain HTTP. A profile is
checked for what negotiation reads: a ``ucp`` object with a dated ``version``,
and ``capabilities`` in that version's shape when present (a list in
2026-01-11, a registry of lists by name since).

Negotiation then gives each answer its ``ucp.capabilities``
(*Intersection Algorithm*, *Response Capability Selection*): the capabilities
both profiles declare at a common version, orphaned extensions pruned, of
which an answer lists its operation's root capability (``checkout`` or
``order``) and the extensions of that root.

Results (documents and refusals) are cached per URL for ``ttl`` seconds, as
the spec's *Fetching* advises, through :class:`NegotiatingProfiles`, which is
also the merchant's :class:`AgentProfiles` (webhooks, AP2): one fetch serves all.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from ._webhooks import AgentProfiles

log = logging.getLogger("strabo.merchant")

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_NEW = "2026-04-08"
MAX_PROFILE_BYTES = 1 << 20
"""A profile larger than this (1 MiB; they are a few KiB) is refused unread."""
CACHE_SIZE = 1024
"""Profile URLs whose resolution is kept: a fixed footprint however many
platforms name (overview.md *Fetching*), the oldest forgotten first."""

__all__ = ["NegotiatingProfiles", "Refusal", "Resolution", "negotiated", "response_capabilities"]


@dataclass(frozen=True)
class Refusal:
    """A request refused for its platform profile: status, ``code``, ``content``."""

    status: int
    code: str
    content: str

    def body(self, continue_url: str | None = None) -> dict[str, Any]:
        """The REST body of the refusal (overview.md, *Transport Bindings*)."""
        body: dict[str, Any] = {"code": self.code, "content": self.content}
        if continue_url:
            body["continue_url"] = continue_url
        return body


@dataclass(frozen=True)
class Resolution:
    """A profile URL resolved: the document, or why it cannot be used."""

    document: Any = None
    refusal: Refusal | None = None


def _invalid(content: str) -> Resolution:
    return Resolution(refusal=Refusal(400, "invalid_profile_url", content))


def _unreachable(content: str) -> Resolution:
    return Resolution(refusal=Refusal(424, "profile_unreachable", content))


def _malformed(content: str) -> Resolution:
    return Resolution(refusal=Refusal(422, "profile_malformed", content))


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine (then plain HTTP is accepted)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def profile_problem(document: Any) -> str | None:
    """Why ``document`` is not a platform profile negotiation can read, or None."""
    if not isinstance(document, dict):
        return "the profile is not a JSON object"
    ucp = document.get("ucp")
    if not isinstance(ucp, dict):
        return "the profile has no 'ucp' object"
    version = ucp.get("version")
    if not isinstance(version, str) or not _DATE.match(version):
        return "the profile's ucp.version is not a YYYY-MM-DD date"
    capabilities = ucp.get("capabilities")
    if capabilities is None:
        return None
    if version >= _NEW:
        if not isinstance(capabilities, dict) or not all(
                isinstance(v, list) for v in capabilities.values()):
            return "the profile's ucp.capabilities is not a registry of lists by name"
    elif not isinstance(capabilities, list):
        return "the profile's ucp.capabilities is not a list"
    return None


class NegotiatingProfiles(AgentProfiles):
    """:class:`AgentProfiles` that also says why a profile cannot be used
    (:meth:`resolve`); :meth:`profile` is the usable document or None, as before."""

    def __init__(self, *, timeout: float = 3.0, ttl: float = 60.0) -> None:
        super().__init__(timeout=timeout, ttl=ttl)
        self._resolved: dict[str, tuple[float, Resolution]] = {}

    async def profile(self, profile_url: str | None) -> Any:
        if not profile_url:
            return None
        resolution = await self.resolve(profile_url)
        return resolution.document if resolution.refusal is None else None

    async def resolve(self, profile_url: str | None) -> Resolution:
        """The profile at ``profile_url``, or the refusal its failure calls for."""
        if not profile_url:
            return _invalid("The UCP-Agent header names no profile (profile=\"https://...\").")
        cached = self._resolved.get(profile_url)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        resolution = await self._resolve(profile_url)
        if resolution.refusal is not None:
            log.info("platform profile %s refused: %s %s", profile_url,
                     resolution.refusal.code, resolution.refusal.content)
        self._resolved.pop(profile_url, None)
        self._resolved[profile_url] = (now, resolution)
        while len(self._resolved) > CACHE_SIZE:  # the oldest go first (*Fetching*)
            del self._resolved[next(iter(self._resolved))]
        return resolution

    async def _resolve(self, url: str) -> Resolution:
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            return _invalid(f"The profile URL {url!r} is malformed.")
        if parts.scheme not in ("http", "https") or not host:
            return _invalid(f"The profile URL {url!r} is not an absolute http(s) URL.")
        if parts.scheme != "https" and not is_loopback(host):
            return _invalid(f"The profile URL {url} is not served over HTTPS.")
        try:
            async with asyncio.timeout(self.timeout):
                await asyncio.get_running_loop().getaddrinfo(
                    host, port or (443 if parts.scheme == "https" else 80))
        except (OSError, TimeoutError) as exc:
            return _invalid(f"The profile URL's host {host} does not resolve ({exc}).")
        try:
            async with asyncio.timeout(self.timeout):  # in all: a trickle is cut too
                status, content = await self._get(url)
        except (httpx.HTTPError, TimeoutError) as exc:
            return _unreachable(f"Unable to fetch the platform profile {url}: "
                                f"{type(exc).__name__} {exc}".rstrip())
        if not 200 <= status < 300:
            return _unreachable(f"Unable to fetch the platform profile {url}: "
                                f"it answered HTTP {status}.")
        if content is None:
            return _malformed(f"The platform profile {url} is larger than "
                              f"{MAX_PROFILE_BYTES} bytes.")
        try:
            document = json.loads(content)
        except ValueError:
            return _malformed(f"The platform profile {url} is not valid JSON.")
        problem = profile_problem(document)
        if problem is not None:
            return _malformed(f"The platform profile {url} cannot be used: {problem}.")
        return Resolution(document=document)

    async def _get(self, url: str) -> tuple[int, bytes | None]:
        """The status and body of ``url`` (no redirects followed); the body is
        None past :data:`MAX_PROFILE_BYTES`, read no further."""
        async with httpx.AsyncClient(timeout=self.timeout, follow_redirects=False,
                                     trust_env=False) as client, \
                client.stream("GET", url, headers={"Accept": "application/json"}) as response:
            if not response.is_success:
                return response.status_code, b""
            content = bytearray()
            async for chunk in response.aiter_bytes():
                content += chunk
                if len(content) > MAX_PROFILE_BYTES:
                    return response.status_code, None
            return response.status_code, bytes(content)


# ------------------------------------------------------------------ intersection


def _registry(capabilities: Any) -> dict[str, list[dict[str, Any]]]:
    """A capability registry by name, from either version's shape."""
    if isinstance(capabilities, Mapping):
        return {str(name): [e for e in entries if isinstance(e, dict)]
                for name, entries in capabilities.items() if isinstance(entries, list)}
    registry: dict[str, list[dict[str, Any]]] = {}
    for entry in capabilities if isinstance(capabilities, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            registry.setdefault(entry["name"], []).append(entry)
    return registry


def _parents(entry: Mapping[str, Any]) -> list[str]:
    extends = entry.get("extends")
    if isinstance(extends, str):
        return [extends]
    return [p for p in extends if isinstance(p, str)] if isinstance(extends, list) else []


def negotiated(business: Any, platform: Any) -> dict[str, dict[str, Any]]:
    """The capability intersection of two profiles' ``ucp.capabilities``
    (overview.md, *Intersection Algorithm*): each business capability the
    platform declares too, at the highest version both list, then extensions
    whose parents are all gone pruned until none is left to prune. Maps each
    name to the business's entry at the chosen version."""
    theirs = _registry(platform)
    result: dict[str, dict[str, Any]] = {}
    for name, entries in _registry(business).items():
        # A version that is no string (a list, an object) names nothing: a
        # platform's profile is untrusted input, and must not turn an answer into a 500.
        common = {e.get("version") for e in entries if isinstance(e.get("version"), str)} & {
            e.get("version") for e in theirs.get(name, []) if isinstance(e.get("version"), str)
        }
        if not common:
            continue
        chosen = max(str(v) for v in common)
        result[name] = next(e for e in entries if e.get("version") == chosen)
    pruned = True
    while pruned:
        orphans = [name for name, entry in result.items()
                   if _parents(entry) and not any(p in result for p in _parents(entry))]
        for name in orphans:
            del result[name]
        pruned = bool(orphans)
    return result


def response_capabilities(intersection: Mapping[str, Mapping[str, Any]],
                          root: str) -> dict[str, list[dict[str, Any]]]:
    """What an answer of the operation whose root capability is ``root``
    lists in ``ucp.capabilities`` (*Response Capability Selection*): ``root``
    if negotiated, and the negotiated extensions of it, each as
    ``{"version", "extends"?}``."""
    if root not in intersection:
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for name, entry in intersection.items():
        if name == root or root in _parents(entry):
            ref: dict[str, Any] = {"version": entry.get("version")}
            if entry.get("extends") is not None:
                ref["extends"] = entry["extends"]
            out[name] = [ref]
    return out
