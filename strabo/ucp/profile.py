"""The Platform profile a UCP proxy names in its ``UCP-Agent`` header.

Every UCP request names the platform's profile (overview.md, *Platform
Advertisement on Request*), and a merchant must fetch it (*Business
Requirements*): a merchant serving 2026-04-08 reads the platform's version
from it, negotiates capabilities with it, and refuses a profile it cannot
fetch or read (424 ``profile_unreachable``, 400 ``invalid_profile_url``).
So the proxies name a real one: by default a document they serve themselves
on loopback (:class:`ProfileSite`), or the public URL they are given, where
whoever runs them publishes :func:`platform_profile`.

The document (*Platform Profile*, ucp.json ``platform_schema``): the protocol
version the proxy speaks, the shopping service over REST, the capabilities
the proxies use (checkout, fulfillment, discount, plus any declared, such as
the order capability with a ``webhook_url``), no payment handlers of its own
(the proxies pass on what the Platform chose), and, with an AP2 signer, the
``dev.ucp.shopping.ap2_mandate`` extension and the signer's key in
``signing_keys`` (as :meth:`strabo.ucp.ap2.Ap2Signer.profile` has them). Each
version's shape: registries by name since 2026-04-08, lists in 2026-01-11.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Protocol

from strabo.ucpwire import NEW, OLD
from strabo.ucpwire import ap2 as jose

CHECKOUT = "dev.ucp.shopping.checkout"
CAPABILITIES: tuple[tuple[str, str | None], ...] = (
    (CHECKOUT, None),
    ("dev.ucp.shopping.fulfillment", CHECKOUT),
    ("dev.ucp.shopping.discount", CHECKOUT),
)
"""The capabilities every proxy uses: name and the capability it extends."""

PATH = "/.well-known/ucp-platform"
"""Where :class:`ProfileSite` serves the profile."""

CACHE_CONTROL = "public, max-age=300"
"""Profiles must be cacheable publicly for at least 60 s (*Hosting*)."""

__all__ = ["CAPABILITIES", "PATH", "ProfileSite", "Signer", "platform_profile"]


class Signer(Protocol):
    """What the profile needs of an AP2 signer (:class:`strabo.ucp.ap2.Ap2Signer`)."""

    def public_jwk(self) -> dict[str, Any]: ...


def _page(name: str) -> str:
    return name.rsplit(".", 1)[-1].replace("_", "-")


def _urls(name: str, version: str) -> dict[str, str]:
    """The spec page and schema of a ``dev.ucp.shopping.*`` capability, as each
    version's profiles link them (versioned paths since 2026-04-08)."""
    short = name.rsplit(".", 1)[-1]
    page = "ap2-mandates" if name == jose.CAPABILITY else _page(name)
    root = "https://ucp.dev" if version == OLD else f"https://ucp.dev/{version}"
    return {"spec": f"{root}/specification/{page}",
            "schema": f"{root}/schemas/shopping/{short}.json"}


def platform_profile(
    version: str = OLD, *, signer: Signer | None = None,
    declared: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The Platform profile in ``version``'s shape (2026-01-11 or 2026-04-08).

    ``signer`` adds the AP2 extension and its key; ``declared`` more
    capabilities by name, each ``{"extends"?, "config"?}`` (say the order
    capability with ``{"config": {"webhook_url": ...}}``)."""
    if version not in (OLD, NEW):
        raise ValueError(f"version must be {OLD} or {NEW}, not {version!r}")
    wanted: dict[str, dict[str, Any]] = {
        name: ({"extends": parent} if parent else {}) for name, parent in CAPABILITIES}
    if signer is not None:
        wanted[jose.CAPABILITY] = {"extends": CHECKOUT}
    for name, extra in (declared or {}).items():
        wanted[name] = {k: v for k, v in extra.items() if k in ("extends", "config")}
    entries = {name: {"version": version, **_urls(name, version), **extra}
               for name, extra in wanted.items()}
    ucp: dict[str, Any] = {"version": version}
    document: dict[str, Any] = {"ucp": ucp}
    if version == OLD:
        ucp["capabilities"] = [{"name": name, **entry} for name, entry in entries.items()]
        document["payment"] = {"handlers": []}
    else:
        ucp["services"] = {"dev.ucp.shopping": [{
            "version": version, "spec": f"https://ucp.dev/{version}/specification/overview",
            "transport": "rest",
            "schema": f"https://ucp.dev/{version}/services/shopping/rest.openapi.json"}]}
        ucp["capabilities"] = {name: [entry] for name, entry in entries.items()}
        ucp["payment_handlers"] = {}
    if signer is not None:
        document["signing_keys"] = [signer.public_jwk()]
    return document


class ProfileSite:
    """Serves a profile at :data:`PATH` on a loopback port while open; the
    document is made on each request (``document()``), so it follows the
    version the proxy comes to speak. The server is uvicorn
    (``syncserver.serving``), started by :meth:`open`, stopped by :meth:`close`."""

    def __init__(self, document: Any, host: str = "127.0.0.1") -> None:
        self.document = document
        self.host = host
        self.url: str | None = None
        self.fetches = 0  # how many times the profile was read
        self._stack: contextlib.AsyncExitStack | None = None

    async def open(self) -> str:
        """Start serving; the profile's URL."""
        if self.url is not None:
            return self.url
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        from syncserver.serving import serve

        async def profile(request: Request) -> JSONResponse:
            self.fetches += 1
            return JSONResponse(self.document(), headers={"Cache-Control": CACHE_CONTROL})

        stack = contextlib.AsyncExitStack()
        base = await stack.enter_async_context(
            serve(Starlette(routes=[Route(PATH, profile, methods=["GET"])]), self.host))
        self._stack, self.url = stack, base + PATH
        return self.url

    async def close(self) -> None:
        """Stop serving (nothing if not open)."""
        stack, self._stack, self.url = self._stack, None, None
        if stack is not None:
            await stack.aclose()
