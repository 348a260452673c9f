"""Refusing header values that hold control characters, before any endpoint runs.

RFC 9110 (section 5.5) has a recipient refuse a field value holding a control
character, or replace each one by a space before processing it. h11, under
uvicorn, refuses CR, LF and NUL only. Blanking would quietly turn an
Idempotency-Key or a profile URL into another one, so the merchant refuses the
request instead: a 400 ``INVALID_REQUEST`` naming the header (not quoting its
value, so logs and errors stay plain text). It runs ahead of routing, so
nothing is stored and no idempotency record is written; REST, MCP and A2A
routes alike. The SyncServer does the same (its own regex: the merchant does
not import it).
"""

from __future__ import annotations

import re

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .wire import ErrorBody, dump

CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""A control character but HTAB, which is a header value's own whitespace."""


class RefuseControlHeaders:
    """ASGI middleware: an HTTP request with a control character in a header value
    gets a 400 in the merchant's business error shape; anything else goes on to
    ``app``. Pure ASGI (no ``BaseHTTPMiddleware``): the body is never read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if CONTROL.search(value):
                    return await refusal(name)(scope, receive, send)
        await self.app(scope, receive, send)


def refusal(name: bytes) -> JSONResponse:
    """The answer to a header ``name`` whose value holds a control character:
    ``{"detail": ..., "code": "INVALID_REQUEST"}``, as :func:`_errors.invalid`."""
    message = (
        f"Header {name.decode('latin-1')!r} holds a control character: a header value "
        "may hold visible characters, spaces and tabs only (RFC 9110, section 5.5)"
    )
    return JSONResponse(dump(ErrorBody(detail=message, code="INVALID_REQUEST")), status_code=400)
