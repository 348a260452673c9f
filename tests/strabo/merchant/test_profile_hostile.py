"""A hostile platform's profile URL: what the merchant's fetch must bound.

overview.md *Fetching*: no redirects followed, connect and response timeouts,
a fixed discovery footprint however many profile URLs are named. Each server
here is a real one on loopback: one that accepts and never answers, one that
trickles its answer a byte at a time (every read within the timeout, the
whole never done), one whose profile is huge.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from strabo.merchant._negotiation import CACHE_SIZE, MAX_PROFILE_BYTES, NegotiatingProfiles

PROFILE = {"ucp": {"version": "2026-04-08", "capabilities": {}}}
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _until_closed(writer: asyncio.StreamWriter, stop: asyncio.Event) -> None:
    try:
        await stop.wait()
    finally:
        writer.close()


def server(handler: Handler) -> Callable[[], AsyncIterator[str]]:
    async def serving() -> AsyncIterator[str]:
        listener = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        async with listener:
            yield f"http://127.0.0.1:{port}/profile"
            listener.close()
    return serving


@pytest.fixture
async def silent() -> AsyncIterator[str]:
    """Accepts, reads the request, never answers."""
    stop = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await _until_closed(writer, stop)

    async for url in server(handler)():
        yield url
    stop.set()


@pytest.fixture
async def trickle() -> AsyncIterator[str]:
    """Answers 200 and then one byte of its body every 50 ms, for ever."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"content-length: 100000000\r\n\r\n{")
        try:
            while True:
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(0.05)  # the trickle itself, not a wait for a race
        except (ConnectionError, asyncio.CancelledError):
            writer.close()

    async for url in server(handler)():
        yield url


@pytest.fixture
async def huge() -> AsyncIterator[str]:
    """A valid profile padded to four times the limit."""
    body = json.dumps({**PROFILE, "padding": "x" * (4 * MAX_PROFILE_BYTES)}).encode()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n" % len(body))
        try:
            writer.write(body)
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    async for url in server(handler)():
        yield url


async def test_a_profile_that_never_answers_is_unreachable_after_the_timeout(silent: str) -> None:
    started = time.monotonic()
    resolution = await asyncio.wait_for(NegotiatingProfiles(timeout=0.3).resolve(silent), 5)
    assert resolution.refusal is not None
    assert (resolution.refusal.status, resolution.refusal.code) == (424, "profile_unreachable")
    assert time.monotonic() - started < 3


async def test_a_trickling_profile_is_cut_at_the_timeout(trickle: str) -> None:
    """Each byte comes within the read timeout: only a bound on the whole fetch ends it."""
    started = time.monotonic()
    resolution = await asyncio.wait_for(NegotiatingProfiles(timeout=0.3).resolve(trickle), 5)
    assert resolution.refusal is not None
    assert (resolution.refusal.status, resolution.refusal.code) == (424, "profile_unreachable")
    assert time.monotonic() - started < 3


async def test_a_huge_profile_is_refused_unread(huge: str) -> None:
    resolution = await NegotiatingProfiles(timeout=5).resolve(huge)
    assert resolution.refusal is not None, "a 4 MiB profile was accepted"
    assert (resolution.refusal.status, resolution.refusal.code) == (422, "profile_malformed")
    assert "larger than" in resolution.refusal.content


async def test_the_profile_cache_has_a_fixed_size() -> None:
    """A platform naming ever new URLs does not grow the merchant's memory."""
    profiles = NegotiatingProfiles()
    for n in range(CACHE_SIZE + 50):
        resolution = await profiles.resolve(f"ftp://platform.example/{n}")
        assert resolution.refusal is not None and resolution.refusal.code == "invalid_profile_url"
    assert len(profiles._resolved) == CACHE_SIZE
    assert "ftp://platform.example/0" not in profiles._resolved  # the oldest went first
    assert f"ftp://platform.example/{CACHE_SIZE + 49}" in profiles._resolved
