"""A critical review of session 8's changes (6e5c065..): each test here failed
before its fix.

- A peer's catch-up request (``flush``) that arrives while the agent stops,
  after its sender loop was cancelled but before ``stop()`` is done, started a
  request nobody cancelled: ``stop()`` returned with a "round to" task under
  way, which went on posting to the peer and writing to a closed log.
- The httpx client now inflates gzip and deflate itself (to bound them), with
  the lean client's ``decoded``, which read zlib's format only: a ``deflate``
  answer of bare deflate data, which httpx had read, became a NoAnswer.
- ``strabo check --verify``: a file whose verification failed was counted
  after its summary was printed; a stdout closed there exited 141, not 1.
- The answer bound's public names (``TooLarge``, ``max_body=``) and the log
  page's new limit had no CHANGELOG line.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from peach.peer.directory import Peer
from syncserver import http1
from syncserver.client import open_client
from tests.peach.peer.test_in_flight_hostile import Answer, Network, Send, nono, order, pair


def _rounds_to(peer: str) -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == f"round to {peer}" and not t.done()]


async def test_a_catch_up_asked_while_stopping_leaves_no_request_under_way() -> None:
    network = Network()
    buyer_ex, _seller_ex, buyer, seller = pair(nono(), network, network)
    entered, cancelled, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
    held = asyncio.Event()  # never set: a request that gets here stays under way
    first = True

    async def hook(peer: Peer, path: str, body: bytes, send: Send) -> Answer:
        nonlocal first
        if path != "messages" or peer.name != "seller":
            return await send()
        if not first:  # a request started after the first: held for good
            await held.wait()
        first = False
        entered.set()  # the first: ended by stop()'s cancel, a little later
        try:
            await held.wait()
        except asyncio.CancelledError:
            cancelled.set()  # the request ends a little after the cancel: the stop goes on
            await release.wait()
            raise
        raise AssertionError("unreachable")

    network.hook = hook
    async with seller:
        await buyer.start()
        try:
            await order(buyer, 0, 1)
            await asyncio.wait_for(entered.wait(), 5)
            syncing = asyncio.create_task(seller.sync())  # the buyer's _flush_to waits
            await network.watch.until(lambda: network.watch.posts["buyer", "flush"] == 1)
            stopping = asyncio.create_task(buyer.stop())
            await asyncio.wait_for(cancelled.wait(), 5)
            release.set()
            await asyncio.wait_for(stopping, 5)
            left = _rounds_to("seller")
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
            assert left == [], "stop() returned with a request to the seller under way"
            await asyncio.wait_for(syncing, 5)
        finally:
            if buyer.running:
                await buyer.stop()
    assert buyer_ex.outstanding() == 1


# A deflate answer without zlib's header ---------------------------------------------
#
# Content-Encoding: deflate is zlib's format by RFC 9110, yet servers have long
# sent bare deflate data under it; httpx reads both (it tries the other on an
# error). The httpx client now inflates gzip and deflate itself (to bound them)
# through ``http1.decoded``, which read zlib's format only: a raw deflate answer
# that httpx read before became a NoAnswer.


@contextlib.asynccontextmanager
async def _answering(body: bytes, coding: str) -> AsyncIterator[str]:
    """A loopback server answering every request with ``body`` in ``coding``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Encoding: {coding}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize("client", ["httpx", "lean"])
async def test_a_raw_deflate_answer_is_read(client: str) -> None:
    document = {"status": "ok", "items": list(range(50))}
    body = _raw_deflate(json.dumps(document).encode())
    async with _answering(body, "deflate") as url:
        transport = httpx.AsyncHTTPTransport() if client == "httpx" else None
        http = open_client(url, 5.0, transport)
        try:
            answer = await http.request("GET", "/x")
        finally:
            await http.aclose()
    assert answer.status_code == 200 and answer.json() == document


async def test_a_raw_deflate_bomb_is_still_bounded() -> None:
    body = _raw_deflate(bytes(4 * 1024 * 1024))
    assert http1.decoded(_raw_deflate(b"{}"), "deflate") == b"{}"
    with pytest.raises(http1.TooLarge):
        http1.decoded(body, "deflate", 1024 * 1024, "http://x/")


# A closed stdout after a verification failed -----------------------------------------
#
# "141 ..., or 1 when a file had already failed": a file whose verification
# failed was counted only after its summary lines were printed, so a stdout
# that closed as they were written (its buffer flushed there) exited 141.


class _ClosesOnSummary(io.StringIO):
    """A stdout whose reader goes away as the first verdict is written."""

    def write(self, text: str) -> int:
        if ": unknown (" in text:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_a_stdout_closed_on_a_failed_files_summary_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from strabo.cli import main
    from tests.conftest import PROTOCOLS

    market = PROTOCOLS / "patterns" / "market.lsh"
    monkeypatch.setattr(sys, "stdout", _ClosesOnSummary())
    status = main(["check", "--verify", "--semantics", "decentralized", "--max-states", "50",
                   str(market)])
    assert status == 1


# Public names the change added, said in the CHANGELOG --------------------------------
#
# The clients' answer bound added public API (``TooLarge``, ``max_body=``) and
# changed a wire promise (a log page may hold fewer than ``limit`` events), with
# no CHANGELOG line; the other parts of the change had theirs.


def _unreleased() -> str:
    from tests.conftest import ROOT

    text = (ROOT / "CHANGELOG.md").read_text()
    start = text.index("(unreleased)")
    return text[start : text.index("\n## ", start)]


@pytest.mark.parametrize(
    "said", ["`syncserver.client.TooLarge`", "`open_client(max_body=)`",
             "`GET .../log`: a page ends once its batches pass about 8 MiB",
             "`ProxyAnswerError`, never retried"]
)
def test_the_changelog_says_what_the_answer_bound_changed(said: str) -> None:
    assert said in _unreleased()


# A SyncExecutor reads its own SyncServer with a bound of its own ---------------------------


@pytest.mark.parametrize("bound", [None, 20_000])
async def test_a_sync_executor_reads_its_server_with_its_own_bound(
    bound: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One batch of a batched window holds every attempt of it, so a SyncServer's
    answers may pass the 64 MiB a third-party service gets: the SyncExecutor
    opens its client with ``peach.http.SERVER_ANSWERS``. Lowered under the size
    of one batch, an agent catching up from the log fails on it (so the bound is
    the one applied); as it is, the same agent reads it."""
    from peach import PeachAdapter
    from peach import http as peach_http
    from peach.errors import ExecutorError
    from tests.conftest import load
    from tests.harness import Harness

    simple = load("atomic-ucp.lsh")
    agents = {"platform": ["Platform"], "business": ["Business"]}
    bulky = {"line_items": [], "currency": "USD", "payment_pref": {"memo": "x" * 60_000}}
    async with Harness("http", [simple], agents) as h:
        platform = PeachAdapter("platform", simple, "Platform", h.executor("platform"))
        async with platform:
            await platform.attempt([platform.build_action("Create", bulky)])
        if bound is not None:
            monkeypatch.setattr(peach_http, "SERVER_ANSWERS", bound)
        business = PeachAdapter("business", simple, "Business", h.executor("business"))
        if bound is None:
            async with business:
                assert len(business.enactments()) == 1
        else:
            with pytest.raises(ExecutorError, match="exceeds 20000 bytes"):
                async with business:
                    pass
