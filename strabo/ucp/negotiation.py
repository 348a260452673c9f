"""Speaking the UCP version a merchant speaks.

The Langshaw protocols' UCP types, and the routes and bodies the Business
proxies build, are those of UCP 2026-01-11. A merchant may speak 2026-04-08
instead. Rather than a second set of proxies, :class:`VersionedProxy` reads the
merchant's discovery profile once, picks the newest version both sides support
(:func:`strabo.ucp.versions.negotiate`), and translates at the wire: requests
and headers out, answers and errors back (:mod:`strabo.ucp.versions`). Against
a 2026-01-11 merchant it adds one GET of ``/.well-known/ucp`` and nothing else.

Every request names the Platform's profile in ``UCP-Agent`` (``profile=``),
which a merchant fetches (and one serving 2026-04-08 must be able to fetch:
it refuses the request otherwise). The proxy serves that profile itself on a
loopback port while it runs (:class:`strabo.ucp.profile.ProfileSite`), in the
version it speaks, unless given ``platform_profile=``, a public URL where
whoever runs it publishes :meth:`VersionedProxy.profile`. A header hook that
names a profile of its own (an AP2 signer's) keeps it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from typing import Any

from strabo.proxy import ProxyAdapter, ProxyError, ProxyHTTPError, ProxyRequest, Route
from strabo.ucp import a2a_tools, versions
from strabo.ucp.a2a_transport import A2aCheckout, a2a_endpoint
from strabo.ucp.mcp_transport import TRANSPORTS, McpCheckout, mcp_endpoint
from strabo.ucp.profile import ProfileSite, platform_profile

log = logging.getLogger("strabo.ucp")
SESSIONS_KEPT = 4096
"""How many sessions' last answers a proxy keeps, for 2026-04-08 updates."""

__all__ = ["SESSIONS_KEPT", "VersionedProxy"]


class VersionedProxy(ProxyAdapter):
    """A ProxyAdapter that speaks the UCP version ``ucp_version`` (one of
    :data:`strabo.ucp.versions.SUPPORTED`), or, when None, the newest one the
    merchant's discovery profile offers, read before the first request. A
    failed negotiation (no answer, ``version_unsupported``,
    ``profile_malformed``) is a ProxyError of the request that needed it, so the
    route's failure policy answers it.

    ``platform_profile`` is the public URL of the Platform profile to name in
    ``UCP-Agent`` (publish :meth:`profile` there); None (the default) serves it
    on loopback while the proxy runs (:attr:`profile_url`). Set it before
    :meth:`start`. :attr:`declared` adds capabilities to the profile.

    ``ucp_transport`` is what checkout goes over: ``"rest"`` (the default) or
    ``"mcp"``, the tools of a 2026-04-08 merchant that lists an MCP endpoint
    in its profile (:mod:`strabo.ucp.mcp_transport`; the routes do not change,
    only the sending), or ``"a2a"``, messages to the A2A agent the merchant's
    profile lists, in the version spoken (:mod:`strabo.ucp.a2a_transport`). A
    merchant that serves neither fails each checkout request with
    ``transport_unsupported``, by the route's failure policy. Over A2A,
    ``a2a_dialect`` (:data:`strabo.ucp.a2a_tools.CHOICES`) is the dialect
    spoken: ``"auto"`` (the default), the agent card's; ``"session"`` or
    ``"tool"`` forced (set it before the first checkout request)."""

    def __init__(self, *args: Any, ucp_version: str | None = None,
                 platform_profile: str | None = None, ucp_transport: str = "rest",
                 a2a_dialect: str = a2a_tools.AUTO, **options: Any) -> None:
        super().__init__(*args, **options)
        if ucp_transport not in TRANSPORTS:
            raise ValueError(f"ucp_transport must be one of {', '.join(TRANSPORTS)}, "
                             f"not {ucp_transport!r}")
        self.ucp_transport = ucp_transport
        self.a2a_dialect = a2a_dialect
        #: Over MCP, the client (:data:`strabo.ucp.mcp_transport.CLIENTS`):
        #: "auto" (lean where the server allows) or "sdk"; set before the first call.
        self.mcp_client = "auto"
        self._mcp: McpCheckout | A2aCheckout | None = None  # checkout's sender
        self.platform_profile = platform_profile
        self.declared: dict[str, dict[str, Any]] = {}
        self._profile_site = ProfileSite(self.profile)
        self.header_hook = self._naming_profile(self.header_hook)
        if ucp_version is not None and ucp_version not in versions.SUPPORTED:
            raise ValueError(f"ucp_version must be one of {', '.join(versions.SUPPORTED)} "
                             f"(or None, to negotiate), not {ucp_version!r}")
        self.ucp_version = ucp_version
        self.route("Discover", "GET-/.well-known/ucp")
        self._negotiation = asyncio.Lock()
        # The last answer per session: a 2026-04-08 update must name the ids of
        # fulfillment methods and groups that 2026-01-11 requests leave out.
        self._sessions: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._hook_for_old = self.header_hook
        if ucp_version is not None:
            self._speak(ucp_version)

    @property
    def a2a_dialect(self) -> str:
        """The A2A dialect: ``"auto"`` (the card's), ``"session"`` or ``"tool"``."""
        return self._a2a_dialect

    @a2a_dialect.setter
    def a2a_dialect(self, dialect: str) -> None:
        a2a_tools.forced(dialect)  # ValueError for one not in CHOICES
        self._a2a_dialect = dialect

    @property
    def profile_url(self) -> str | None:
        """The Platform profile's URL named in ``UCP-Agent``: ``platform_profile``,
        else the one served while the proxy runs (None before :meth:`start`)."""
        return self.platform_profile or self._profile_site.url

    def profile(self) -> dict[str, Any]:
        """The Platform profile, in the version spoken (2026-01-11 until the
        merchant's is known), with the AP2 extension and key when the proxy
        has a signer (``ap2=``) and :attr:`declared`'s capabilities."""
        return platform_profile(self.ucp_version or versions.OLD,
                                signer=getattr(self, "ap2", None), declared=self.declared)

    def _naming_profile(self, hook: Any) -> Any:
        """``hook`` with ``profile="<profile_url>"`` in ``UCP-Agent`` when it names none."""

        def named(request: ProxyRequest) -> dict[str, str]:
            headers = dict(hook(request)) if hook is not None else {}
            url = self.profile_url
            name = next((k for k in headers if k.lower() == "ucp-agent"), "UCP-Agent")
            value = headers.get(name, "")
            if url is None or re.search(r'(^|;)\s*profile\s*=', value):
                return headers
            headers[name] = "; ".join(p for p in (f'profile="{url}"', value.strip()) if p)
            return headers

        return named

    async def start(self) -> None:
        if self.platform_profile is None:
            await self._profile_site.open()
        try:
            await super().start()
        except BaseException:
            await self._profile_site.close()
            raise

    async def stop(self, grace: float = 5.0) -> None:
        try:
            await super().stop(grace)
        finally:
            if self._mcp is not None:  # its session; a new one opens on a restart
                await self._mcp.aclose()
            await self._profile_site.close()

    async def _http(self, route: Route) -> Any:
        """Over MCP or A2A, a client that sends checkout requests as tool calls
        or messages."""
        rest = await super()._http(route)
        return rest if self._mcp is None else self._mcp.over(rest)

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
            profile = None
            if self.ucp_version is None:
                profile = await super()._send(
                    self.routes["Discover"], "/.well-known/ucp", None, "discovery")
                self._speak(versions.negotiate(profile))
                log.info("%s: the merchant at %s speaks UCP %s", self.name, self.base_url,
                         self.ucp_version)
            assert self.ucp_version is not None
            if self.ucp_transport != "rest" and self._mcp is None:
                await self._over_mcp(profile)
            return self.ucp_version

    async def _over_mcp(self, profile: Any) -> None:
        """Send checkout over the MCP endpoint (or A2A agent) of the merchant's
        profile (read now if not yet), or raise ``transport_unsupported``."""
        if profile is None:
            profile = await super()._send(
                self.routes["Discover"], "/.well-known/ucp", None, "discovery")
        if self.ucp_transport == "a2a":
            card = a2a_endpoint(profile, read_from=self.base_url)
            if card is None:
                raise ProxyError(
                    f"the merchant at {self.base_url} serves no UCP checkout over A2A (its "
                    "profile lists no A2A agent card): use the REST transport",
                    code="transport_unsupported")
            self._mcp = A2aCheckout(card, self.ucp_version or versions.OLD, self.timeout,
                                    dialect=self.a2a_dialect)
            log.info("%s: checkout over A2A, agent card %s", self.name, card)
            return
        endpoint = (mcp_endpoint(profile, read_from=self.base_url)
                    if self.ucp_version == versions.NEW else None)
        if endpoint is None:
            raise ProxyError(
                f"the merchant at {self.base_url} serves no UCP checkout over MCP at "
                f"{self.ucp_version} (its profile lists no MCP endpoint; MCP is "
                f"{versions.NEW}'s): use the REST transport", code="transport_unsupported")
        self._mcp = McpCheckout(endpoint, self.timeout, client=self.mcp_client)
        log.info("%s: checkout over MCP at %s", self.name, endpoint)

    async def _send(self, route: Route, path: str, body: Any, idempotency_key: str) -> Any:
        """Send in the version spoken: 2026-01-11 as the routes build it, or
        translated out and back (a 2026-04-08 error envelope, HTTP 200, is raised
        as the 4xx 2026-01-11 would have sent, for the failure policies)."""
        if route.name == "Discover":
            return await super()._send(route, path, body, idempotency_key)
        version = self.ucp_version
        if version is None or (self.ucp_transport != "rest" and self._mcp is None):
            version = await self.negotiate()
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
            while len(self._sessions) > SESSIONS_KEPT:
                self._sessions.popitem(last=False)
        return old

