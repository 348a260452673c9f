"""One HTTP request sent to an ASGI app in process, its answer read back as JSON.

The merchant's other transports (MCP, ``_mcp``; A2A, ``_a2a``) stand for REST requests: they
build the request and run it through the merchant's own app, so that the
version negotiation, the rules, idempotency, webhooks and AP2 signatures are
the ones REST has.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from starlette.types import ASGIApp


@dataclass(frozen=True)
class Answer:
    """What the app answered: its status, its body (JSON, else text, else None)
    and its headers (lowercase names)."""

    status: int
    body: Any
    headers: Mapping[str, str]


async def call(app: ASGIApp, method: str, path: str, headers: Mapping[str, str], body: Any,
               origin: Mapping[str, Any] | None = None) -> Answer:
    """``method path`` with ``headers`` and ``body`` (JSON; None for none) sent to
    ``app``. ``origin`` carries the scheme, server, client and ``host`` of the
    request this one stands for, so that the links the app makes point where
    the caller reached it. An exception of the app goes up unless it answered
    first (Starlette re-raises after answering 500: the answer is what counts)."""
    payload = b"" if body is None else json.dumps(body).encode()
    origin = origin or {}
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    raw += [(b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode())]
    host = origin.get("host")
    if isinstance(host, str):
        raw.append((b"host", host.encode("latin-1")))
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": method, "scheme": origin.get("scheme") or "http", "path": path,
        "raw_path": quote(path).encode(), "query_string": b"", "root_path": "",
        "headers": raw, "server": origin.get("server") or ("127.0.0.1", 80),
        "client": origin.get("client") or ("127.0.0.1", 0),
    }
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if given:
            return {"type": "http.disconnect"}
        given = True
        return {"type": "http.request", "body": payload, "more_body": False}

    started: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    try:
        await app(scope, receive, send)
    except Exception:
        if "status" not in started:
            raise
    text = b"".join(chunks).decode("utf-8", errors="replace")
    try:
        answer: Any = json.loads(text) if text else None
    except ValueError:
        answer = text
    names = {k.decode("latin-1").lower(): v.decode("latin-1")
             for k, v in started.get("headers", ())}
    return Answer(int(started.get("status", 500)), answer, names)


__all__ = ["Answer", "call"]
