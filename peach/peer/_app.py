"""The HTTP face of a peer: ``POST /peer/messages`` and ``POST /peer/flush``.

Everything else (authentication, parsing, the checks, the answer) is the
executor's endpoint, the same function the in-memory network calls; this module
only carries requests to it. Bodies are bounded before they are read whole.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from peach.peer._wire import Endpoint

MAX_BODY = 8 * 1024 * 1024


def create_app(endpoint: Endpoint) -> Starlette:
    async def handle(request: Request) -> JSONResponse:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
            return _too_large()
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                return _too_large()
            chunks.append(chunk)
        status, answer = await endpoint(
            request.path_params["kind"], dict(request.headers), b"".join(chunks)
        )
        return JSONResponse(answer, status_code=status)

    return Starlette(routes=[Route("/peer/{kind}", handle, methods=["POST"])])


def _too_large() -> JSONResponse:
    body: dict[str, Any] = {
        "error": {"code": "too-large", "message": f"the body exceeds {MAX_BODY} bytes"}
    }
    return JSONResponse(body, status_code=413)
