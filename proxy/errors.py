"""What can go wrong between a proxy and the HTTP service it bridges."""

from __future__ import annotations

from typing import Any


class RouteError(ValueError):
    """A route declaration that cannot work (bad method, path or JSONPath...)."""


class ProxyError(Exception):
    """A request the service did not answer with success."""

    def __init__(self, message: str, *, route: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.route = route

    def summary(self) -> dict[str, Any]:
        """What a failure action may bind: status, code and message, as JSON."""
        return {"status": None, "code": "unreachable", "message": self.message}


class ProxyUnreachable(ProxyError):
    """No answer at all, even after the retries (connection refused, timeouts)."""


class ProxyHTTPError(ProxyError):
    """An HTTP error answer: ``status``, ``code`` and ``message`` from its body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        body: Any = None,
        route: str | None = None,
    ) -> None:
        super().__init__(f"{status} {message}", route=route)
        self.status = status
        self.code = code
        self.detail = message
        self.body = body

    def summary(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.code, "message": self.detail}
