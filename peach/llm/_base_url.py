"""The base URL of a model API, checked before anything starts."""

from __future__ import annotations

import re

__all__ = ["check_base_url"]


def check_base_url(url: str, name: str = "base_url") -> None:
    """Raise ``ValueError`` unless ``url`` is an http(s) URL with a host. The SDKs
    take any text and fail only at the first request, with a URL made by joining
    it to a path ('not-a-url/chat/completions'), after everything else started;
    ``name`` is what the message calls it (an option, a variable)."""
    from urllib.parse import urlsplit

    example = "e.g. http://127.0.0.1:11434/v1"
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        bare = "://" not in url and re.match(r"[\w.-]+:\d+(/|$)", url.strip())
        hint = f"; write http://{url.strip()}" if bare else ""  # host:port, no scheme
        raise ValueError(f"{name} {url!r} is not an http(s) URL with a host ({example}){hint}")
    try:
        parts.port  # noqa: B018 - parsing it is the check
    except ValueError:
        raise ValueError(f"{name} {url!r} has no valid port (1 to 65535; {example})") from None
