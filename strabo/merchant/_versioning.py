"""Which UCP version each request is answered in, and the translation at the edge.

The merchant's core speaks 2026-01-11 (``wire.py``). Serving 2026-04-08 as well
means deciding, per request, which version the platform speaks, and then
translating a 2026-04-08 request into the 2026-01-11 body the endpoints parse
and their answer back (the pure functions of ``_versions``). Doing it here, as
a wrapper around the endpoints, keeps one set of business rules and one
conformance suite, and leaves ``_routes`` reading like the 2026-01-11 merchant
it is.

A merchant serving 2026-01-11 gets no wrapper at all: :meth:`Versioning.wrap`
returns the endpoint itself and :meth:`Versioning.of` is None, so nothing about
its answers changes.

The version of a request (2026-04-08 *Request-Time Validation*) is the
``ucp.version`` of the profile its UCP-Agent header points at. A 2026-01-11
platform may instead say it as a ``version`` parameter of that header, so that
is read when there is no usable profile. A profile that cannot be used is
refused with the 2026-04-08 transport error (400 ``invalid_profile_url``, 424
``profile_unreachable``, 422 ``profile_malformed``; ``_negotiation``) unless
the header says an older version, whose merchants answered such platforms; a
request without UCP-Agent goes on to the header checks. Each 2026-04-08
answer lists the capabilities negotiated with that profile that its operation
uses (``checkout`` or ``order`` and their extensions).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import _discovery, _versions
from ._errors import EXCEPTION_HANDLERS
from ._intake import agent_parameters, read_body
from ._negotiation import NegotiatingProfiles, Refusal, negotiated, response_capabilities
from ._webhooks import AgentProfiles
from .merchant import Merchant
from .wire import UCP_VERSION, dump

Endpoint = Callable[[Request], Awaitable[Response]]

NEW = _versions.SUPPORTED[-1]
SERVED = _versions.SUPPORTED
"""The versions the merchant can be told to serve (``--ucp-version``)."""

OLD_PROFILE_PATH = f"/.well-known/ucp/{UCP_VERSION}"
"""Where a merchant serving 2026-04-08 keeps its 2026-01-11 profile
(``supported_versions`` points there), for platforms still speaking it."""

_STATE = "ucp_version"
_PLATFORM = "ucp_platform_profile"
_ROOTS = {"checkout": "dev.ucp.shopping.checkout", "order": "dev.ucp.shopping.order"}

__all__ = ["NEW", "OLD_PROFILE_PATH", "SERVED", "Versioning"]


class Versioning:
    """The protocol version of each request to a merchant serving ``serving``."""

    def __init__(self, merchant: Merchant, *, serving: str, profiles: AgentProfiles,
                 base: Callable[[Request], str], ap2_key: dict[str, Any] | None = None) -> None:
        if serving not in SERVED:
            raise ValueError(f"ucp_version must be one of {', '.join(SERVED)}, not {serving!r}")
        self.merchant = merchant
        self.serving = serving
        self.profiles = profiles
        self.base = base
        self.ap2_key = ap2_key  # the public JWK the profile lists, when AP2 is on

    @property
    def translating(self) -> bool:
        """Whether requests may be in another version than the core's."""
        return self.serving != UCP_VERSION

    # ------------------------------------------------------------------ discovery

    def profile(self, request: Request) -> dict[str, Any]:
        """The discovery profile in the version served; the 2026-04-08 one names
        the 2026-01-11 profile, still served, in ``supported_versions``."""
        old = self._old_profile(request)
        if not self.translating:
            return old
        base = self.base(request)
        new = _versions.profile_to_new(old, supported_versions={
            UCP_VERSION: base + OLD_PROFILE_PATH})
        # UCP checkout over MCP is served beside REST at 2026-04-08 (``_mcp``).
        new["ucp"]["services"].setdefault("dev.ucp.shopping", []).append(
            _discovery.mcp_service(base))
        return new

    def old_profile(self, request: Request) -> dict[str, Any]:
        """The 2026-01-11 profile, unchanged (served at :data:`OLD_PROFILE_PATH`)."""
        return self._old_profile(request)

    def _old_profile(self, request: Request) -> dict[str, Any]:
        return _discovery.profile(self.base(request), catalog=self.merchant.catalog,
                                  shop_id=self.merchant.shop_id, ap2_key=self.ap2_key)

    # --------------------------------------------------------------- per request

    @staticmethod
    def of(request: Request) -> str | None:
        """The version :meth:`wrap` accepted for ``request``; None when the
        merchant serves 2026-01-11 (then the endpoints negotiate as they always did)."""
        version = getattr(request.state, _STATE, None)
        return version if isinstance(version, str) else None

    async def read(self, request: Request, operation: str) -> Any:
        """The request body as the 2026-01-11 endpoints parse it: read as ever
        (``_intake.read_body``), then, for a 2026-04-08 request, translated. An
        update needs the stored session (for method types a 2026-04-08 update
        may leave out) and both need the catalog's titles, which 2026-04-08
        requests no longer send."""
        body = await read_body(request)
        if self.of(request) != NEW:
            return body
        checkout_id = request.path_params.get("id")
        session = None
        if operation == "update" and isinstance(checkout_id, str):
            stored = self.merchant.checkout(checkout_id)
            session = dump(stored) if stored is not None else None
        return _versions.request_to_old(
            operation, body, checkout_id=checkout_id, session=session, title_of=self._title)

    def _title(self, product_id: str) -> str | None:
        product = self.merchant.catalog.product(product_id)
        return product.title if product is not None else None

    async def requested(self, request: Request) -> tuple[str | None, Any, Refusal | None]:
        """The version the platform declares, its profile, and the refusal its
        profile calls for, if any: the profile's ``ucp.version``, else the
        UCP-Agent ``version`` parameter a 2026-01-11 platform sends. A profile
        that is missing or cannot be used is refused (``_negotiation``) unless
        that parameter names an older version than 2026-04-08 (the 2026-01-11
        merchant's rules have no such refusal); no UCP-Agent at all is left to
        the header checks (None, nothing, no refusal)."""
        header = request.headers.get("ucp-agent")
        if header is None:
            return None, None, None
        params = agent_parameters(header)
        url, said = params.get("profile"), params.get("version") or None
        # Naming no profile, a platform says its version in the header: an older
        # one is served by its rules (no profile needed), one not served gets its
        # 422 from the version check; 2026-04-08 itself needs the profile.
        if url is None and said is not None and said != NEW:
            return said, None, None
        document, refusal = None, None
        if isinstance(self.profiles, NegotiatingProfiles):
            resolution = await self.profiles.resolve(url)
            document, refusal = resolution.document, resolution.refusal
        else:
            document = await self.profiles.profile(url)
        if refusal is not None:
            return said, None, (None if said is not None and said < NEW else refusal)
        return _versions.platform_version(document) or said, document, None

    def wrap(self, kind: str, endpoint: Endpoint) -> Endpoint:
        """``endpoint`` answering in the version of each request.

        ``kind`` is what the endpoint answers with, ``checkout`` or ``order``,
        which says how its answer translates. A platform profile that cannot
        be used is refused first (400, 424 or 422, ``_negotiation``), then a
        version the merchant does not serve is a 422 ``version_unsupported``,
        before anything else is read; a 2026-01-11 request runs the endpoint as it is; a
        2026-04-08 one has its errors and answer translated."""
        if not self.translating:
            return endpoint

        async def versioned(request: Request) -> Response:
            requested, platform, refusal = await self.requested(request)
            if refusal is not None:
                return JSONResponse(refusal.body(self.base(request) + "/"),
                                    status_code=refusal.status)
            setattr(request.state, _PLATFORM, platform)
            accepted = _versions.accepted_version(requested, serving=self.serving)
            if accepted is None:
                assert requested is not None  # no version declared is answered in ours
                status, body = _versions.version_unsupported(
                    requested, serving=self.serving, continue_url=self.base(request) + "/")
                return JSONResponse(body, status_code=status)
            setattr(request.state, _STATE, accepted)
            if accepted != NEW:
                return await endpoint(request)
            try:
                response = await endpoint(request)
            except Exception as exc:
                response = await _rendered(request, exc)
            return self._to_new(request, kind, response)

        return versioned

    def _to_new(self, request: Request, kind: str, response: Response) -> Response:
        """A 2026-01-11 answer (success or error) as the 2026-04-08 one."""
        raw = bytes(response.body)
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        status = response.status_code
        if status >= 400 or not isinstance(body, dict):
            status, new = _versions.error_to_new(status, body)
        elif kind == "checkout":
            # The sessions list no payment handlers; 2026-04-08 answers must,
            # so they come from the profile.
            new = _versions.checkout_to_new(body, profile=self._old_profile(request))
        elif kind == "order":
            new = _versions.order_to_new(body, currency=self._order_currency(body))
        else:
            new = body
        ucp = new.get("ucp") if isinstance(new, dict) else None
        if kind in _ROOTS and isinstance(ucp, dict) and ucp.get("status") != "error":
            ucp["capabilities"] = self.capabilities(request, kind)
        headers = {k: v for k, v in response.headers.items()
                   if k.lower() not in ("content-length", "content-type")}
        return JSONResponse(new, status_code=status, headers=headers)

    def capabilities(self, request: Request, kind: str) -> dict[str, Any]:
        """The ``ucp.capabilities`` of a 2026-04-08 answer of ``kind``: the
        capabilities negotiated with the request's platform profile that the
        operation uses (overview.md, *Response Capability Selection*)."""
        business = self.profile(request)["ucp"].get("capabilities")
        platform = getattr(request.state, _PLATFORM, None)
        ucp = platform.get("ucp") if isinstance(platform, dict) else None
        theirs = ucp.get("capabilities") if isinstance(ucp, dict) else None
        return response_capabilities(negotiated(business, theirs), _ROOTS[kind])

    def _order_currency(self, order: dict[str, Any]) -> str | None:
        """2026-04-08 orders must name their currency; 2026-01-11 ones take it
        from their checkout."""
        checkout_id = order.get("checkout_id")
        checkout = self.merchant.checkout(checkout_id) if isinstance(checkout_id, str) else None
        return checkout.currency if checkout is not None else None


async def _rendered(request: Request, exc: Exception) -> Response:
    """The answer the app's exception handlers give ``exc`` (``_errors``), so
    that it can be translated; an exception they do not know goes on up."""
    for kind in type(exc).__mro__:
        handler = EXCEPTION_HANDLERS.get(kind)
        if handler is not None:
            response: Response = await handler(request, exc)
            return response
    raise exc
