"""The HTTP endpoints: turn requests into :class:`Merchant` operations and back.

Each endpoint reads the request in the reference merchant's order (body, headers,
fields; see ``_intake``), fetches the agent's profile when the operation may keep a
webhook URL, runs the operation, and delivers any order event before answering, so
that an agent that got the reply can rely on its webhook having been called.

The endpoints speak 2026-01-11. A merchant serving 2026-04-08 wraps the checkout
and order endpoints in ``_versioning``, which decides each request's version and
translates at the edge; the endpoints only read their body through it and tell
the header checks the version it accepted.
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import _handlers, _testing
from ._ap2 import Ap2
from ._errors import RequestInvalid
from ._idempotency import Reply
from ._intake import AgentHeaders, check_headers, parse_body
from ._order_update import OrderUpdateRequest
from ._versioning import OLD_PROFILE_PATH, Versioning
from ._webhooks import AgentProfiles, WebhookSigner, deliver
from .merchant import Merchant, Notification
from .wire import (
    UCP_VERSION,
    CheckoutCompleteRequest,
    CheckoutCreateRequest,
    CheckoutUpdateRequest,
)

SIMULATION_HEADER = "simulation-secret"


def _answer(reply: Reply) -> Response:
    return JSONResponse(reply.body, status_code=reply.status)


def _raise_if(errors: list[dict[str, Any]]) -> None:
    if errors:
        raise RequestInvalid(errors)


class Endpoints:
    """The merchant's HTTP endpoints, bound to one merchant and its settings."""

    def __init__(self, merchant: Merchant, *, base_url: str | None, profiles: AgentProfiles,
                 ucp_version: str = UCP_VERSION, ap2: Ap2 | None = None):
        self.merchant = merchant
        self.base_url = base_url.rstrip("/") if base_url else None
        self.profiles = profiles
        self.ap2 = ap2
        # Webhooks are signed with a key of the profile (the AP2 key when there is one).
        self.signer = WebhookSigner(ap2.key, ap2.settings.kid) if ap2 else WebhookSigner()
        self.versions = Versioning(merchant, serving=ucp_version, profiles=profiles,
                                   base=self.base,
                                   ap2_key=ap2.public_jwk() if ap2 is not None else None)

    def routes(self) -> list[Route]:
        """The routes, one per path; other methods on a path get a JSON 405.
        Checkout answers are signed (AP2) after their translation, on the wire shape."""
        ap2 = self.ap2

        def wrap(kind: str, endpoint: Any) -> Any:
            versioned = self.versions.wrap(kind, endpoint)
            return ap2.wrap(versioned) if ap2 is not None and kind == "checkout" else versioned

        old_profile = [Route(OLD_PROFILE_PATH, self.old_discovery, methods=["GET"])]
        return [
            Route("/.well-known/ucp", self.discovery, methods=["GET"]),
            *(old_profile if self.versions.translating else []),
            Route(_handlers.PATH + "/{id}", self.handler_document, methods=["GET"]),
            Route(_handlers.PATH + "/{id}/{document}", self.handler_document, methods=["GET"]),
            Route("/checkout-sessions", wrap("checkout", self.create), methods=["POST"]),
            Route("/checkout-sessions/{id}", wrap("checkout", self.session),
                  methods=["GET", "PUT"]),
            Route("/checkout-sessions/{id}/complete", wrap("checkout", self.complete),
                  methods=["POST"]),
            Route("/checkout-sessions/{id}/cancel", wrap("checkout", self.cancel),
                  methods=["POST"]),
            Route("/orders/{id}", wrap("order", self.order), methods=["GET", "PUT"]),
            Route("/testing/simulate-shipping/{id}", self.ship, methods=["POST"]),
            *_testing.routes(self.merchant, self.base),
        ]

    def base(self, request: Request) -> str:
        """This server's base URL (no trailing slash): configured, or as the client sees it."""
        return self.base_url or str(request.base_url).rstrip("/")

    def _check_headers(
        self, request: Request, *, idempotent: bool, errors: list[dict[str, Any]]
    ) -> AgentHeaders:
        """``_intake.check_headers``, told the version accepted for the request, if any."""
        return check_headers(request, idempotent=idempotent, errors=errors,
                             version=self.versions.of(request))

    async def _notify(self, notification: Notification | None, request: Request) -> None:
        if notification is not None:
            await deliver(notification.url, notification.event, signer=self.signer,
                          profile_url=self.base(request) + "/.well-known/ucp")

    async def discovery(self, request: Request) -> Response:
        """``GET /.well-known/ucp``: no headers needed."""
        return JSONResponse(self.signer.publish(self.versions.profile(request)))

    async def old_discovery(self, request: Request) -> Response:
        """``GET /.well-known/ucp/2026-01-11`` (serving 2026-04-08 only)."""
        return JSONResponse(self.signer.publish(self.versions.old_profile(request)))

    async def handler_document(self, request: Request) -> Response:
        """``GET /payment-handlers/{id}[/config.json|/instrument.json]``: no headers needed."""
        info = _handlers.handler(request.path_params["id"])
        if info is None:
            raise HTTPException(404, "Not Found")
        document = request.path_params.get("document")
        base = self.base(request)
        if document is None:
            return JSONResponse(_handlers.spec_document(info, base))
        if document == "config.json":
            return JSONResponse(_handlers.config_schema(info, base))
        if document == "instrument.json":
            return JSONResponse(_handlers.instrument_schema(info, base))
        raise HTTPException(404, "Not Found")

    async def create(self, request: Request) -> Response:
        """``POST /checkout-sessions``."""
        body = await self.versions.read(request, "create")
        errors: list[dict[str, Any]] = []
        headers = self._check_headers(request, idempotent=True, errors=errors)
        parsed = parse_body(CheckoutCreateRequest, body, errors)
        _raise_if(errors)
        assert parsed is not None and headers.idempotency_key is not None
        webhook_url = await self.profiles.webhook_url(headers.profile_url)
        reply = self.merchant.create_checkout(
            parsed, key=headers.idempotency_key, body=body, webhook_url=webhook_url
        )
        return _answer(reply)

    async def session(self, request: Request) -> Response:
        """``GET`` or ``PUT /checkout-sessions/{id}``."""
        checkout_id = request.path_params["id"]
        if request.method != "PUT":
            errors: list[dict[str, Any]] = []
            self._check_headers(request, idempotent=False, errors=errors)
            _raise_if(errors)
            return JSONResponse(self.merchant.get_checkout(checkout_id))
        body = await self.versions.read(request, "update")
        errors = []
        headers = self._check_headers(request, idempotent=True, errors=errors)
        parsed = parse_body(CheckoutUpdateRequest, body, errors)
        _raise_if(errors)
        assert parsed is not None and headers.idempotency_key is not None
        webhook_url = await self.profiles.webhook_url(headers.profile_url)
        reply = self.merchant.update_checkout(
            checkout_id, parsed, key=headers.idempotency_key, body=body, webhook_url=webhook_url
        )
        return _answer(reply)

    async def complete(self, request: Request) -> Response:
        """``POST /checkout-sessions/{id}/complete``."""
        body = await self.versions.read(request, "complete")
        errors: list[dict[str, Any]] = []
        headers = self._check_headers(request, idempotent=True, errors=errors)
        parsed = parse_body(CheckoutCompleteRequest, body, errors, embedded=True)
        _raise_if(errors)
        assert parsed is not None and headers.idempotency_key is not None
        verify = (await self.ap2.verifier(request, audience=self.base(request))
                  if self.ap2 is not None else None)
        reply, notification = self.merchant.complete_checkout(
            request.path_params["id"],
            parsed,
            key=headers.idempotency_key,
            body=body,
            base_url=self.base(request),
            check=(lambda session: verify(parsed.ap2, session)) if verify is not None else None,
        )
        await self._notify(notification, request)
        return _answer(reply)

    async def cancel(self, request: Request) -> Response:
        """``POST /checkout-sessions/{id}/cancel``; any body is ignored."""
        errors: list[dict[str, Any]] = []
        headers = self._check_headers(request, idempotent=True, errors=errors)
        _raise_if(errors)
        assert headers.idempotency_key is not None
        reply = self.merchant.cancel_checkout(
            request.path_params["id"], key=headers.idempotency_key
        )
        return _answer(reply)

    async def order(self, request: Request) -> Response:
        """``GET`` or ``PUT /orders/{id}`` (an update appends events and adjustments)."""
        order_id = request.path_params["id"]
        if request.method != "PUT":
            errors: list[dict[str, Any]] = []
            self._check_headers(request, idempotent=False, errors=errors)
            _raise_if(errors)
            return JSONResponse(self.merchant.get_order(order_id))
        body = await self.versions.read(request, "update_order")
        errors = []
        headers = self._check_headers(request, idempotent=True, errors=errors)
        parsed = parse_body(OrderUpdateRequest, body, errors)
        _raise_if(errors)
        assert parsed is not None and headers.idempotency_key is not None
        reply, notification = self.merchant.update_order(
            order_id, parsed, key=headers.idempotency_key, body=body
        )
        await self._notify(notification, request)
        return _answer(reply)

    async def ship(self, request: Request) -> Response:
        """``POST /testing/simulate-shipping/{id}``: a test hook, guarded by a secret."""
        given = request.headers.get(SIMULATION_HEADER, "").encode()
        if not secrets.compare_digest(given, self.merchant.simulation_secret.encode()):
            raise HTTPException(403, "Invalid Simulation Secret")
        errors: list[dict[str, Any]] = []
        check_headers(request, idempotent=False, errors=errors)
        _raise_if(errors)
        notification = self.merchant.ship_order(request.path_params["id"])
        await self._notify(notification, request)
        return JSONResponse({"status": "shipped"})
