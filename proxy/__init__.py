"""Proxy: bridge Langshaw protocols to HTTP services.

A :class:`ProxyAdapter` is a Peach adapter that plays a role by talking to an
HTTP service: :meth:`ProxyAdapter.route` maps a round trip of actions onto a
request, with identity or JSONPath field mapping; :meth:`ProxyAdapter.request`
sends one for custom orchestration.
"""

from proxy.adapter import HTTPEvent, ProxyAdapter, ProxyRequest
from proxy.errors import ProxyError, ProxyHTTPError, ProxyUnreachable, RouteError
from proxy.routes import Route

__all__ = [
    "HTTPEvent",
    "ProxyAdapter",
    "ProxyError",
    "ProxyHTTPError",
    "ProxyRequest",
    "ProxyUnreachable",
    "Route",
    "RouteError",
]
