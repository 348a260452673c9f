"""Errors the merchant answers with, and how each one looks on the wire.

The reference merchant is a FastAPI app, so its error bodies come in four shapes:
business errors ``{"detail": msg, "code": CODE}``, request validation errors
``{"detail": [ {type, loc, msg, input, ...} ]}``, version negotiation failures
``{"detail": {"status": "error", "errors": [...]}}`` and plain HTTP errors
``{"detail": msg}``. Agents may parse any of them, so we keep all four.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from .wire import UCP_VERSION, ErrorBody, dump

log = logging.getLogger("strabo.merchant")


class UcpError(Exception):
    """A business error: the request was understood but cannot be carried out."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def invalid(message: str) -> UcpError:
    """400 INVALID_REQUEST: something in the request makes no sense to the shop."""
    return UcpError(400, "INVALID_REQUEST", message)


def not_found(message: str) -> UcpError:
    """404 RESOURCE_NOT_FOUND: no checkout session or order with that id."""
    return UcpError(404, "RESOURCE_NOT_FOUND", message)


def not_modifiable(action: str, status: str) -> UcpError:
    """409 CHECKOUT_NOT_MODIFIABLE: the session is completed or canceled."""
    return UcpError(409, "CHECKOUT_NOT_MODIFIABLE", f"Cannot {action} checkout in state '{status}'")


def out_of_stock(message: str, status: int = 400) -> UcpError:
    """OUT_OF_STOCK: 400 while shopping, 409 when stock ran out before completion."""
    return UcpError(status, "OUT_OF_STOCK", message)


def idempotency_conflict() -> UcpError:
    """409 IDEMPOTENCY_CONFLICT: the key was used before for a different request."""
    return UcpError(409, "IDEMPOTENCY_CONFLICT", "Idempotency key reused with different parameters")


class RequestInvalid(Exception):
    """422: headers or body failed validation; ``errors`` are FastAPI-style entries."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(errors)} validation errors")
        self.errors = errors


class VersionUnsupported(Exception):
    """400: the agent asked for a protocol version newer than ours."""

    def __init__(self, version: str) -> None:
        super().__init__(version)
        self.version = version


class MissingItemTitle(Exception):
    """A line item without ``item.title``.

    The reference merchant fails with a bare 500 on it (it copies the request title
    into a response model that requires one). Agents written against it send titles,
    and the traces record the 500, so we answer the same instead of inventing a 422.
    """


async def _ucp_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, UcpError)
    return JSONResponse(dump(ErrorBody(detail=exc.message, code=exc.code)), status_code=exc.status)


async def _request_invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestInvalid)
    return JSONResponse({"detail": exc.errors}, status_code=422)


async def _version_unsupported(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, VersionUnsupported)
    message = (
        f"Version {exc.version} is not supported. "
        f"This merchant implements version {UCP_VERSION}."
    )
    error = {"code": "VERSION_UNSUPPORTED", "message": message, "severity": "critical"}
    return JSONResponse({"detail": {"status": "error", "errors": [error]}}, status_code=400)


async def _missing_item_title(request: Request, exc: Exception) -> Response:
    log.warning("line item without item.title: answering 500 as the reference merchant does")
    return PlainTextResponse("Internal Server Error", status_code=500)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


EXCEPTION_HANDLERS: dict[Any, Any] = {
    UcpError: _ucp_error,
    RequestInvalid: _request_invalid,
    VersionUnsupported: _version_unsupported,
    MissingItemTitle: _missing_item_title,
    HTTPException: _http_error,
}
"""Starlette exception handlers for every error above, plus 404/405 as JSON."""
