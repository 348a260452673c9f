"""Assembling the Starlette app: one new merchant, its endpoints, its error handlers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from . import _discovery
from ._ap2 import Ap2, Ap2Settings
from ._csvdata import load_data_dir
from ._discovery import MCP_PATH
from ._errors import EXCEPTION_HANDLERS
from ._headers import RefuseControlHeaders
from ._negotiation import NegotiatingProfiles
from ._routes import Endpoints
from ._versioning import SERVED
from .catalog import Catalog, load_catalog
from .merchant import Merchant
from .wire import UCP_VERSION


def create_app(
    catalog: str | Path | Catalog | None = None,
    *,
    data_dir: str | Path | None = None,
    base_url: str | None = None,
    simulation_secret: str | None = None,
    profile_timeout: float = 3.0,
    ucp_version: str = UCP_VERSION,
    ap2: Ap2Settings | bool = False,
) -> Starlette:
    """A Starlette app serving one new merchant with its own in-memory state.

    ``catalog`` is a catalog file (or an already loaded :class:`Catalog`); the bundled
    flower shop when None. ``data_dir`` is a directory of CSV files instead (the UCP
    conformance format, see ``_csvdata``); give one or the other. ``base_url`` is
    the URL agents reach the server at, used in the discovery profile and order
    links; when None it is taken from each request. ``simulation_secret`` guards
    ``/testing/simulate-shipping`` (a random one, readable as
    ``merchant_of(app).simulation_secret``, when None).
    ``profile_timeout`` bounds the fetch of an agent's profile, in seconds.
    ``ucp_version`` is the UCP version served: 2026-01-11 (the merchant's own) or
    2026-04-08, which answers each platform in the version its profile declares
    (both are accepted; see ``_versioning`` and docs/merchant.md).
    ``ap2`` turns on the AP2 mandates extension (``_ap2``): True with a fresh
    signing key, or :class:`Ap2Settings`; off, ``ap2`` is accepted and ignored.
    Serving 2026-04-08, the app also serves UCP checkout over MCP at ``/ucp/mcp``
    (``_mcp``), while its lifespan runs (uvicorn runs it). At either version, it
    serves UCP checkout over A2A at ``/ucp/a2a`` (``_a2a``) when the A2A SDK is
    installed (``_discovery.a2a_available``; the ``a2a`` extra), and lists it
    in its profiles.

    Raises :class:`CatalogError` for a catalog file or data directory that cannot be
    used, and ValueError when given both or an unknown ``ucp_version``.
    """
    if ucp_version not in SERVED:
        raise ValueError(f"ucp_version must be one of {', '.join(SERVED)}, not {ucp_version!r}")
    if data_dir is not None:
        if catalog is not None:
            raise ValueError("give a catalog or a data directory, not both")
        shop = load_data_dir(data_dir)
    else:
        shop = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
    merchant = Merchant(shop, simulation_secret=simulation_secret)
    profiles = NegotiatingProfiles(timeout=profile_timeout)
    settings = Ap2Settings() if ap2 is True else ap2 or None
    endpoints = Endpoints(
        merchant,
        base_url=base_url,
        profiles=profiles,
        ucp_version=ucp_version,
        ap2=Ap2(settings, profiles) if settings is not None else None,
    )
    routes = endpoints.routes()
    running: list[Any] = []  # the transports served beside REST: bind(app), running()
    if endpoints.versions.translating:  # UCP checkout over MCP: a 2026-04-08 binding
        from ._mcp import CheckoutMcp  # loads the MCP SDK for this merchant only

        mcp = CheckoutMcp()
        routes.append(Route(MCP_PATH, mcp))
        running.append(mcp)
    if _discovery.a2a_available():  # UCP checkout over A2A, at either version
        from ._a2a import CheckoutA2a  # loads the A2A SDK for this merchant only

        def title_of(product_id: str) -> str | None:
            product = shop.product(product_id)
            return product.title if product is not None else None

        a2a = CheckoutA2a(
            serving=ucp_version, base=endpoints.base,
            capabilities=lambda request: endpoints.versions.old_profile(request)["ucp"][
                "capabilities"],
            title_of=title_of, currency=shop.currency)
        routes += a2a.routes()
        running.append(a2a)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for transport in running:
                context: AbstractAsyncContextManager[None] = transport.running()
                await stack.enter_async_context(context)
            yield

    app = Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS,
                    middleware=[Middleware(RefuseControlHeaders)],  # before any route
                    lifespan=lifespan if running else None)
    for transport in running:
        transport.bind(app)
    app.state.merchant = merchant
    return app


def merchant_of(app: Starlette) -> Merchant:
    """The :class:`Merchant` behind an app made by :func:`create_app`."""
    merchant = getattr(app.state, "merchant", None)
    if not isinstance(merchant, Merchant):
        raise TypeError("not an app made by strabo.merchant.create_app")
    return merchant
