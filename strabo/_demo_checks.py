"""What ``strabo demo`` checks before a checkout starts, and how its trace lines up.

Kept apart from :mod:`strabo.demo` (which is long enough): each check is asked
before anything is enacted, so that a wrong URL is one line naming what is
wrong, with the exit status of its kind (``strabo --help``), and not a failed
checkout or a wait for the whole ``--timeout``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from syncserver.options import DONE, FAILED, USAGE

PROFILE_SECONDS = 5.0
"""How long a profile (the merchant's, the Platform's) gets to answer, at most."""
__all__ = ["PROFILE_SECONDS", "platform_profile_problem",
           "profile_problem", "url_problem"]


def url_problem(option: str, url: str | None) -> str | None:
    """Why ``url``, given with ``option``, is not an http(s) URL (a usage error),
    or None (also for no URL)."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- a port that is not a number raises here
    except ValueError as exc:
        return f"{option} {url!r} is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return (f"{option} {url!r} is not an http:// or https:// URL (e.g. "
                "http://127.0.0.1:8182)")
    return None


async def profile_problem(url: str, seconds: float = PROFILE_SECONDS) -> tuple[str | None, int]:
    """Why ``url`` is not a UCP merchant the demo can use (and the exit status:
    1 when nothing answers, 2 when what answers is not a UCP merchant), or None.
    Asked before the checkout starts, so that a wrong URL is one line naming the
    request that failed, not a failed checkout."""
    return await _profile(url.rstrip("/") + "/.well-known/ucp", "UCP merchant", url, seconds)


async def platform_profile_problem(url: str, seconds: float = PROFILE_SECONDS
                                   ) -> tuple[str | None, int]:
    """Why the Platform profile at ``url`` (``--platform-profile``) cannot be
    read (1 when nothing answers, 2 when what answers is no UCP profile), or
    None: a merchant that cannot read it refuses the checkout, or never calls
    the Platform back, and the demo would wait for nothing."""
    return await _profile(url, "Platform profile", url, seconds)


async def _profile(target: str, what: str, url: str, seconds: float) -> tuple[str | None, int]:
    import httpx

    seconds = min(seconds, PROFILE_SECONDS)
    path = urlsplit(target).path or "/"
    try:
        async with httpx.AsyncClient(timeout=seconds) as client:
            response = await client.get(target)
    except httpx.ConnectTimeout:
        return f"no {what} answers at {url} (no connection within {seconds:g} s)", FAILED
    except httpx.TimeoutException:  # it says nothing itself: say what did not happen
        who = "merchant" if what == "UCP merchant" else what
        return f"the {who} at {url} did not answer GET {path} within {seconds:g} s", FAILED
    except httpx.HTTPError as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return f"no {what} answers at {url} ({reason})", FAILED
    if response.status_code != 200:
        return (f"{url} is not a {what}: GET {path} answered {response.status_code} "
                f"{response.reason_phrase} (a UCP {_where(what)})", USAGE)
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("ucp"), dict):
        return (f"{url} is not a {what}: GET {path} answered something that is not a "
                "UCP profile (a JSON object with a 'ucp' object)", USAGE)
    return None, DONE


def _where(what: str) -> str:
    if what == "UCP merchant":
        return "merchant publishes its profile there"
    return "Platform profile is a JSON object with a 'ucp' object, served with 200"


def ending(platform: Any, protocol: Any) -> Any:
    """An event set as soon as ``platform`` (a PeachAdapter) learns an ending of
    ``protocol`` that is not ``Completed`` (Failed, Cancelled...): an ending is
    final, and with no order there is nothing more to wait for."""
    import asyncio

    endings = {name for clause in protocol.completion for name in clause} - {"Completed"}
    ended = asyncio.Event()

    def listen(batch: Any, newly: Any) -> None:
        if any(entry.instance.name in endings for entry in batch.entries):
            ended.set()

    platform.listeners.append(listen)
    return ended


def refused(history: list[Any]) -> str:
    """The line for a checkout that ended with no order and no other failure
    said: the ending, and the reason it carries."""
    last = next((i for i in reversed(history) if i.name != "Completed"), None)
    reason = last.get("reason") if last is not None else None
    if isinstance(reason, dict):
        reason = reason.get("message") or reason.get("code")
    if last is None or last.name not in ("Failed", "Cancel", "Cancelled"):
        return "the merchant refused it (see above)"
    said = f": {reason}" if isinstance(reason, str) and reason else " (see above)"
    return f"the checkout ended {last.name}{said}"
