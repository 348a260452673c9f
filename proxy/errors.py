"""What can go wrong between a proxy and the HTTP service it bridges."""

from __future__ import annotations

from typing import Any

from syncserver.client import Answer


class RouteError(ValueError):
    """A route declaration that cannot work (bad method, path, JSONPath or failure
    policy...). Raised when the route or the adapter is declared, never later."""


class ProxyError(Exception):
    """A request the service did not answer with success.

    ``attempts`` is how many times it was sent, ``elapsed`` how long that took,
    and ``gave_up`` why the proxy stopped retrying (``None`` when the failure was
    not one to retry, a 400 say): an ``on_error`` handler can tell a refusal
    from a service that stayed down, and the log line says both.
    """

    default_code: str | None = "proxy_error"

    def __init__(self, message: str, *, route: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.route = route
        self.code = code if code is not None else self.default_code
        self.attempts = 1
        self.elapsed = 0.0
        self.gave_up: str | None = None

    def summary(self) -> dict[str, Any]:
        """What a failure action may bind: status, code and message, as JSON."""
        return {"status": None, "code": self.code, "message": self.message}

    def __str__(self) -> str:
        if self.attempts <= 1 and self.gave_up is None:
            return self.message
        tries = f"{self.attempts} tries in {self.elapsed:.2f} s"
        return (
            f"{self.message} ({tries}; {self.gave_up})"
            if self.gave_up
            else f"{self.message} ({tries})"
        )


class ProxyUnreachable(ProxyError):
    """No answer at all, even after the retries (connection refused, timeouts)."""

    default_code = "unreachable"


class ProxyRequestError(ProxyError):
    """A request that cannot be built from the trigger's bindings (a path parameter
    bound to null, a malformed preference a handler checks): nothing was sent, so
    there is nothing to retry. ``attribute`` names the binding at fault."""

    default_code = "invalid_binding"

    def __init__(
        self,
        message: str,
        *,
        attribute: str | None = None,
        route: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, route=route, code=code)
        self.attribute = attribute


class ProxyAnswerError(ProxyError):
    """An answer that does not fit the protocol: a value of the wrong type for a
    typed attribute of the response action (``attribute``, ``path`` inside it),
    or a required attribute the answer lacks. The service acted, but what it
    said cannot be bound, so the route's failure policy answers instead."""

    default_code = "invalid_answer"

    def __init__(
        self,
        message: str,
        *,
        attribute: str | None = None,
        path: str | None = None,
        route: str | None = None,
    ) -> None:
        super().__init__(message, route=route)
        self.attribute = attribute
        self.path = path


class ProxyHTTPError(ProxyError):
    """An HTTP error answer: ``status``, ``code`` and ``message`` from its body."""

    default_code = None

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        body: Any = None,
        route: str | None = None,
    ) -> None:
        super().__init__(f"{status} {message}", route=route, code=code)
        self.status = status
        self.detail = message
        self.body = body

    def summary(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.code, "message": self.detail}


def http_error(response: Answer, *, route: str | None = None) -> ProxyHTTPError:
    """An error answer read as ProxyHTTPError: the UCP merchant's
    ``{"detail", "code"}``, FastAPI's validation lists, or plain text."""
    try:
        body: Any = response.json()
    except (ValueError, RecursionError):  # not JSON, or nested past reading
        body = response.text
    code = None
    message = response.reason_phrase or "error"
    if isinstance(body, dict):
        code = body.get("code") if isinstance(body.get("code"), str) else None
        detail = body.get("detail", body.get("message"))
        if isinstance(detail, str):
            message = detail
        elif isinstance(detail, list) and detail:  # FastAPI validation errors
            parts = []
            for item in detail[:3]:
                if isinstance(item, dict):
                    where = ".".join(str(x) for x in item.get("loc", ()))
                    parts.append(f"{where}: {item.get('msg', '')}".strip(": "))
            message = "; ".join(parts) or message
            code = code or "validation"
    elif isinstance(body, str) and body.lstrip().startswith("<"):
        message = f"{message} (an HTML page: is this the service's base URL?)"
    elif isinstance(body, str) and body.strip():
        message = " ".join(body.split())[:200]
    return ProxyHTTPError(response.status_code, message, code=code, body=body, route=route)
