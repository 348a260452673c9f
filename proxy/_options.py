"""The ProxyAdapter's options, checked when the adapter is made: a careless value
(``internal="cid"``, a header hook that is not a function, a base URL with no
scheme) is a RouteError naming the option at once, not a puzzle at the first
request."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from langshaw import LangshawProtocol
from strabo.proxy.errors import RouteError


def names(given: Iterable[str], option: str) -> frozenset[str]:
    """``given`` as a set of names; a lone string is refused (``internal="cid"``
    would otherwise read as the names ``c``, ``i`` and ``d``)."""
    if isinstance(given, str) or not isinstance(given, Iterable):
        raise RouteError(f"{option} must be a list of names, not {given!r}")
    found = frozenset(given)
    odd = sorted(repr(n) for n in found if not isinstance(n, str))
    if odd:
        raise RouteError(f"{option} holds {', '.join(odd)}: names are strings")
    return found


def check_names(
    protocol: LangshawProtocol, internal: frozenset[str], exclude: frozenset[str]
) -> None:
    for action in sorted(exclude):
        if action not in protocol.actions:
            raise RouteError(f"exclude names {action!r}, which is not an action of {protocol.name}")
    unknown = internal - set(protocol.attributes)
    if unknown:
        raise RouteError(
            f"internal names {', '.join(sorted(unknown))}, not attributes of {protocol.name}"
        )


def check_base_url(value: Any) -> str:
    """The service's URL, without its trailing slash: http(s), with a host."""
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise RouteError(
            f"base_url must be an http(s) URL such as 'http://127.0.0.1:8182', not {value!r}"
        )
    return str(value).rstrip("/")


def check_function(value: Any, option: str, returns: str) -> None:
    """A hook called without ``await``: a plain function (or None)."""
    if value is None:
        return
    if not callable(value):
        raise RouteError(f"{option} must be a function {returns}, not {value!r}")
    call = type(value).__call__  # an object's own, if async, says so too
    if inspect.iscoroutinefunction(value) or inspect.iscoroutinefunction(call):
        raise RouteError(f"{option} must be a plain function {returns}, not an async one")
