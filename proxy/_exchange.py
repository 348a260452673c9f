"""What one HTTP exchange of a proxy is made of: the request a header hook sees,
the event listeners hear, the idempotency keys of an orchestration, and the
small helpers that read an answer and tell a failure's story."""

from __future__ import annotations

import contextvars
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langshaw import ActionInstance
from strabo.proxy.errors import ProxyAnswerError, ProxyError, ProxyRequestError
from strabo.proxy.routes import Route
from syncserver.client import Answer


@dataclass(frozen=True)
class ProxyRequest:
    """A request about to be sent: what ``header_hook`` gets to build headers from."""

    route: str
    method: str
    url: str
    body: Any
    idempotency_key: str
    attempt: int  # 1 for the first try


@dataclass(frozen=True)
class HTTPEvent:
    """One HTTP exchange, for listeners (never the headers)."""

    route: str
    method: str
    path: str
    status: int | None
    seconds: float
    attempt: int
    error: str | None = None


HeaderHook = Callable[[ProxyRequest], Mapping[str, str]]
ErrorHandler = Callable[[ProxyError, Route, ActionInstance | None], Awaitable[Any] | None]


def hook_headers(hook: HeaderHook, request: ProxyRequest) -> Mapping[str, str]:
    """What ``hook`` adds to ``request``'s headers. Nothing is sent when it
    raises (a ProxyError, code ``proxy_error``) or gives anything but names and
    values as strings (a ProxyRequestError): never a client's TypeError."""
    try:
        headers = hook(request)
    except Exception as exc:
        raise ProxyError(f"{type(exc).__name__}: {exc}", route=request.route) from exc
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise ProxyRequestError(
            f"header_hook gave {str(headers)[:80]!r}, not a dict of header names to strings",
            route=request.route,
            code="invalid_header",
        )
    for name, value in headers.items():
        why = (
            "the client frames the JSON body itself"
            if name.lower() in _FRAMING
            else None if (name + value).isascii() else "headers are ASCII (RFC 9110)"
        )
        if why is not None:  # a second Content-Length or a Transfer-Encoding desyncs
            raise ProxyRequestError(
                f"header_hook gave {name}: {value[:40]!r}, which is not sent: {why}",
                route=request.route,
                code="invalid_header",
            )
    return headers


_FRAMING = frozenset({"content-length", "transfer-encoding", "content-type"})


class Orchestration:
    """The handling of one trigger: the requests it makes are numbered per route."""

    def __init__(self, seed: str) -> None:
        self.seed = seed
        self.counts: dict[str, int] = {}

    def key(self, route: str) -> str:
        rank = self.counts.get(route, 0)
        self.counts[route] = rank + 1
        return digest_key(f"{self.seed}|{route}|{rank}")


current: contextvars.ContextVar[Orchestration | None] = contextvars.ContextVar(
    "strabo_proxy_orchestration", default=None
)


def digest_key(text: str) -> str:
    """An idempotency key from a description: a UUID-shaped digest."""
    return str(uuid.UUID(bytes=hashlib.sha256(text.encode()).digest()[:16]))


def read_json(response: Answer) -> Any:
    """The answer's JSON; ``{}`` for no body, ``{"text": ...}`` for one that is
    not JSON. The JSON is asked for first: an answer of another transport
    (MCP, A2A) holds it decoded, and would encode it again for ``content``."""
    try:
        data = response.json()
    except ValueError:
        return {"text": response.text} if response.content else {}
    except RecursionError:  # JSON, but nested deeper than any answer should be
        raise ProxyAnswerError("the answer's JSON is nested too deeply to be read") from None
    return {} if data is None and not response.content else data


def settled(error: ProxyError, attempts: int, first: float, gave_up: str | None) -> ProxyError:
    """``error`` with the story of its tries, for handlers and the log line."""
    error.attempts = attempts
    error.elapsed = time.monotonic() - first
    error.gave_up = gave_up
    return error


def where(trigger: ActionInstance | None) -> str:
    if trigger is None or not trigger.keys:
        return ""
    return " [" + ", ".join(f"{k}={v!r}" for k, v in trigger.keys.items()) + "]"
