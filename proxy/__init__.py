"""Proxy: bridge Langshaw protocols to HTTP services.

A :class:`ProxyAdapter` is a Peach adapter that plays a role by talking to an
HTTP service: :meth:`ProxyAdapter.route` maps a round trip of actions onto a
request, with identity or JSONPath field mapping, and gives it a failure policy
(:class:`RetryPolicy`, then a failure action or the ``on_error`` handlers);
:meth:`ProxyAdapter.request` sends one for custom orchestration.
"""

from strabo.proxy._exchange import HTTPEvent, ProxyRequest
from strabo.proxy.adapter import ProxyAdapter
from strabo.proxy.errors import (
    ProxyAnswerError,
    ProxyError,
    ProxyHTTPError,
    ProxyRequestError,
    ProxyUnreachable,
    RouteError,
)
from strabo.proxy.policy import FailureFunction, RetryPolicy
from strabo.proxy.routes import Route
from syncserver.retry import RETRY_STATUS

__all__ = [
    "RETRY_STATUS",
    "FailureFunction",
    "HTTPEvent",
    "ProxyAdapter",
    "ProxyAnswerError",
    "ProxyError",
    "ProxyHTTPError",
    "ProxyRequest",
    "ProxyRequestError",
    "ProxyUnreachable",
    "RetryPolicy",
    "Route",
    "RouteError",
]
