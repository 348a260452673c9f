"""Testing endpoints: make the merchant fail the way real shops do, on request.

An agent must handle a declined payment, stock that runs out, a checkout that
needs the buyer (``requires_escalation``) and a session the shop cancels. A
real merchant does these when it likes; these endpoints make them happen to
one chosen session, over the same HTTP the agent uses, so that tests and demos
can play each ending against a running server. Like
``/testing/simulate-shipping``, each needs the ``Simulation-Secret`` header.

* ``POST /testing/checkout-sessions/{id}/decline`` (``code``, ``message``): the
  next complete fails with a 402 and ``code`` (default ``INSUFFICIENT_FUNDS``);
* ``POST /testing/checkout-sessions/{id}/escalate`` (``code``, ``message``,
  ``continue_url``): the next complete answers 200 with status
  ``requires_escalation``, an error message and the ``continue_url``;
* ``POST /testing/checkout-sessions/{id}/expire`` (no body): the shop cancels
  the session now (status ``canceled``);
* ``PUT /testing/inventory/{product_id}`` (``quantity``, an integer >= 0): sets
  the units in stock.

Body fields are optional, but ``quantity``; unknown fields are a 400.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .merchant import Merchant, Rig
from .wire import dump

SIMULATION_HEADER = "simulation-secret"
Endpoint = Callable[[Request], Awaitable[Response]]

__all__ = ["routes"]


def routes(merchant: Merchant, base: Callable[[Request], str]) -> list[Route]:
    """The testing routes of ``merchant``; ``base(request)`` is its base URL (for
    the default ``continue_url``)."""

    def guarded(endpoint: Endpoint) -> Endpoint:
        async def check(request: Request) -> Response:
            given = request.headers.get(SIMULATION_HEADER, "").encode()
            if not secrets.compare_digest(given, merchant.simulation_secret.encode()):
                raise HTTPException(403, "Invalid Simulation Secret")
            return await endpoint(request)

        return check

    async def decline(request: Request) -> Response:
        body = await _body(request, {"code", "message"})
        code = _text(body, "code", "INSUFFICIENT_FUNDS")
        rig = Rig("decline", code, _text(body, "message", f"Payment Failed: {code} (simulated)"))
        merchant.rig_completion(request.path_params["id"], rig)
        return JSONResponse({"checkout_id": request.path_params["id"], "next_complete": "decline",
                             "code": rig.code})

    async def escalate(request: Request) -> Response:
        body = await _body(request, {"code", "message", "continue_url"})
        checkout_id = request.path_params["id"]
        url = _text(body, "continue_url", f"{base(request)}/checkout/{checkout_id}")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or " " in url:
            # UCP's continue_url is an absolute URL (format uri): the buyer goes there.
            raise HTTPException(400, "continue_url must be an absolute http(s) URL")
        rig = Rig("escalate", _text(body, "code", "requires_buyer_review"),
                  _text(body, "message", "The buyer must review this order (simulated)"), url)
        merchant.rig_completion(checkout_id, rig)
        return JSONResponse({"checkout_id": checkout_id, "next_complete": "escalate",
                             "continue_url": url})

    async def expire(request: Request) -> Response:
        await _body(request, set())
        return JSONResponse(dump(merchant.expire(request.path_params["id"]).core()))

    async def inventory(request: Request) -> Response:
        body = await _body(request, {"quantity"})
        quantity = body.get("quantity")
        if isinstance(quantity, bool) or not isinstance(quantity, int) or quantity < 0:
            raise HTTPException(400, "quantity must be an integer of at least 0")
        product = request.path_params["product_id"]
        merchant.set_stock(product, quantity)
        return JSONResponse({"product_id": product, "quantity": quantity})

    prefix = "/testing/checkout-sessions/{id}"
    return [
        Route(f"{prefix}/decline", guarded(decline), methods=["POST"]),
        Route(f"{prefix}/escalate", guarded(escalate), methods=["POST"]),
        Route(f"{prefix}/expire", guarded(expire), methods=["POST"]),
        Route("/testing/inventory/{product_id}", guarded(inventory), methods=["PUT"]),
    ]


async def _body(request: Request, allowed: set[str]) -> dict[str, Any]:
    """The JSON object sent (empty when nothing was), with only ``allowed`` keys."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: a body of [[[[...
        raise HTTPException(400, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise HTTPException(400, "the body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise HTTPException(400, f"unknown field(s) {', '.join(unknown)} (known: {known})")
    return body


def _text(body: dict[str, Any], name: str, default: str) -> str:
    value = body.get(name, default)
    if not isinstance(value, str) or not value:
        raise HTTPException(400, f"{name} must be a non-empty string")
    return value
