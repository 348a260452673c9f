"""Promises this session's documentation made (git diff 6e5c065..HEAD -- docs
README.md CHANGELOG.md) that no other test held: each test here quotes the
sentence it keeps true, and fails if the promise breaks. Real parts: real
servers on loopback, real subprocesses for the command line's exit statuses, a
real in-process SyncServer behind the proxy.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import zlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from langshaw import LangshawProtocol
from langshaw import verify as verify_module
from langshaw._vsearch import Search
from langshaw.verify import verify
from peach.peer import MemoryNetwork
from peach.peer import _wire as wire
from peach.peer import executor as peer_executor
from peach.peer._app import PeerServer
from strabo import serve
from strabo.proxy import HTTPEvent, ProxyAnswerError, ProxyError, ProxyRequestError
from tests.conftest import PROTOCOLS
from tests.peach.peer.test_in_flight import Gated, buyer_and_seller, order
from tests.peach.peer.test_server import Recorder
from tests.peach.test_http1 import raw_server
from tests.peach.test_peer import settle
from tests.proxy.test_policy import MAS, SIMPLE, Scripted, create
from tests.proxy.test_policy import answer as scripted_answer
from tests.strabo.test_closed_pipe import closed
from tests.syncserver.test_fastlane import HEALTH, post
from tests.syncserver.test_fastlane import create as create_body
from tests.syncserver.test_fastlane_hostile import served
from tests.syncserver.test_fastlane_hostile import to_the_end as syncserver_to_the_end

PURCHASE = PROTOCOLS / "purchase.lsh"
MiB = 1024 * 1024

# CHANGELOG.md, "The verifier's budget": "A closed stdout (`strabo check ... |
# head`, `protocols`, `demo`, `inspect`, `--help`) exits 141 (128 + SIGPIPE)".
# test_closed_pipe.py pins check, protocols and --help, test_inspect_cli.py
# inspect; test_exit_statuses.py lets the demo exit 0 or 141 (a race there).


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
def test_the_demo_with_its_stdout_closed_exits_141_and_says_nothing(buffered: bool) -> None:
    assert closed("demo", buffered=buffered) == (141, "")


# docs/peach.md, Delivery: "a wave of attempts is shared out among them, at
# least 8 and at most 200 messages per request". test_in_flight.py pins the
# 8; a wave of 1,000 would give each of 4 requests 250.


async def test_a_wave_larger_than_four_full_requests_goes_at_most_200_a_request() -> None:
    network = Gated("seller")
    buyer_ex, seller_ex, buyer, seller = buyer_and_seller(network)
    async with buyer, seller:
        await order(buyer, 1000)
        await network.until_under_way(peer_executor.IN_FLIGHT)
        sizes = sorted(len(seqs) for seqs in network.under_way)
        assert sizes == [wire.MAX_MESSAGES] * peer_executor.IN_FLIGHT == [200] * 4
        network.gate.set()
        await settle([buyer_ex, seller_ex])
        assert len(seller.enactments()) == 1000
    assert max(len(seqs) for seqs in network.carried) == 200
    assert sorted(s for seqs in network.carried for s in seqs) == list(range(1, 1001))


# docs/peach.md, Transports: "`MemoryNetwork(Faults(...), timeout=10.0)`" and
# "at most 1,024 connections are open at once, one more is answered `503
# overloaded` and closed". test_server_hostile.py tries a cap of 3 given
# explicitly; HTTPTransport makes its server as PeerServer(endpoint).


def test_the_memory_networks_timeout_is_ten_seconds_by_default() -> None:
    assert MemoryNetwork().timeout == 10.0


async def test_a_peer_server_holds_1024_connections_by_default_and_refuses_one_more() -> None:
    """The cap's behaviour is test_server_hostile.py's, with a cap of 3 (1,024
    connections held here would need more descriptors than a default limit
    gives a process: 1,024 a side); here, the default and that the transport's
    server has it."""
    from peach.peer.directory import Peer
    from peach.peer.transport import HTTPTransport
    from strabo.serving import free_port

    assert PeerServer(Recorder()).max_connections == 1024
    transport = HTTPTransport()
    me = Peer(name="a", roles={}, secret="s", url=f"http://127.0.0.1:{free_port()}")
    await transport.listen(me, Recorder())
    try:
        assert transport._server is not None and transport._server.max_connections == 1024
    finally:
        await transport.close()


# docs/syncserver.md, the fast lane: "A client that shuts its side down right
# after its requests ... gets the answer to each request it sent whole, in
# order, under either policy". test_half_close.py runs the batched policy;
# test_fastlane_hostile.py counts the instant policy's answers, not their order.
# Under the instant policy two things hold it: the lane stops reading while it
# answers (so the end of input is read after the answers), and the guard keeps a
# half-closed connection open for what is owed; the lane-only pipeline fails
# with both removed.


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "h11"])
@pytest.mark.parametrize("health", [True, False], ids=["with-health", "attempts-only"])
async def test_under_the_instant_policy_a_half_closed_pipeline_is_answered_in_order(
    lane: bool, health: bool,
) -> None:
    middle = HEALTH if health else b""
    data = post(create_body("i1")) + middle + post(create_body("i2")) + post(create_body("i3"))
    async with served(lane) as (url, _):
        got = await syncserver_to_the_end(url, data, half_close=True)
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", got) == [b"200"] * (3 + health), got
    # Each attempt's answer names its batch: 1, 2, 3 in the order sent.
    assert re.findall(rb'"seq":(\d+)', got) == [b"1", b"2", b"3"], got
    if health:  # /health's answer between the first attempt's and the second's
        assert got.index(b'"seq":1') < got.index(b'"status":"ok"') < got.index(b'"seq":2')


# docs/proxy.md: "It reads at most 64 MiB of an answer, through the lean client
# or httpx alike (counted as it arrives and once decoded, gzip included): a
# longer one fails the request at once with `ProxyAnswerError`, naming the URL
# and the bound, without a retry". test_dsl_hostile.py sends a long
# Content-Length to the lean client; here a gzip bomb goes through httpx (the
# proxy takes that way when given a transport=).


def gzip_of_zeros(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: gzip's header and trailer
    chunk = bytes(MiB)
    return b"".join(packer.compress(chunk) for _ in range(size // MiB)) + packer.flush()


async def test_a_gzip_bomb_through_httpx_is_an_answer_error_not_retried() -> None:
    bomb = gzip_of_zeros(65 * MiB)  # about 65 KB on the wire
    heads = 0

    async def bomb_away(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal heads
        heads += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb) + bomb)
        await writer.drain()
        await reader.read()  # until the client goes away

    async with raw_server(bomb_away) as url:
        mas = MAS(SIMPLE, url, retries=3, backoff=0.01, transport=httpx.AsyncHTTPTransport())
        mas.proxy.route("Put", "PUT-/c")
        async with mas.server, mas.proxy:
            with pytest.raises(ProxyAnswerError) as caught:
                await asyncio.wait_for(mas.proxy.request("Put", {}, idempotency_key="k"), 10)
        assert f"{url}/c exceeds 64 MiB" in str(caught.value), caught.value
        assert heads == 1  # never retried


# docs/proxy.md: a header_hook that "sets `Content-Length`, `Transfer-Encoding`
# or `Content-Type`, which the client sets for the JSON body (code
# `invalid_header`), and one that raises fails it with a `ProxyError` (code
# `proxy_error`)"; "A listener that raises is logged (WARNING) and changes
# nothing". test_dsl_hostile.py checks the kinds and the messages, not the codes
# nor the level.


@pytest.fixture
async def service() -> AsyncIterator[tuple[Scripted, str]]:
    script = Scripted(scripted_answer(201, b'{"id": "chk_1"}'))
    async with serve(script, lifespan="off") as url:
        yield script, url


def raises(request: Any) -> dict[str, str]:
    raise KeyError("UCP_SIGNING_KEY")


@pytest.mark.parametrize(
    ("hook", "kind", "code"),
    [
        (lambda request: {"Content-Length": "0"}, ProxyRequestError, "invalid_header"),
        (lambda request: {"Transfer-Encoding": "chunked"}, ProxyRequestError, "invalid_header"),
        (lambda request: {"Content-Type": "text/plain"}, ProxyRequestError, "invalid_header"),
        (lambda request: None, ProxyRequestError, "invalid_header"),
        (lambda request: {"X-Try": 1}, ProxyRequestError, "invalid_header"),
        (raises, ProxyError, "proxy_error"),
    ],
    ids=["content-length", "transfer-encoding", "content-type", "none", "not-str", "raises"],
)
async def test_a_misbehaving_header_hook_fails_the_request_with_its_code(
    service: tuple[Scripted, str], hook: Any, kind: type[ProxyError], code: str
) -> None:
    script, url = service
    mas = MAS(SIMPLE, url, retries=0, header_hook=hook)
    mas.proxy.route("Put", "PUT-/c")
    async with mas.server, mas.proxy:
        with pytest.raises(kind) as caught:
            await mas.proxy.request("Put", {}, idempotency_key="k")
    assert type(caught.value) is kind and caught.value.code == code
    assert caught.value.summary()["code"] == code
    assert script.requests == []  # never sent


async def test_a_listener_that_raises_is_logged_at_warning(
    service: tuple[Scripted, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, url = service
    mas = MAS(SIMPLE, url, retries=0)

    def broken(event: HTTPEvent) -> None:
        raise RuntimeError("dashboard down")

    mas.proxy.http_listeners.append(broken)
    mas.proxy.route("Create->>Created", "POST-/c", failure="Failed")
    with caplog.at_level(logging.DEBUG):
        async with mas.server, mas.proxy, mas.platform:
            await create(mas)
            made = await mas.wait_for("Created")
    assert made["id"] == "chk_1"
    [record] = [r for r in caplog.records if "dashboard down" in r.getMessage()]
    assert record.levelno == logging.WARNING


# docs/semantics.md: "Out of time once the exploration is done, the searches for
# shortest traces settle for short ones instead" (and docs/language.md:
# `--shortest` waits "within `--max-seconds`"). The exploration here is given no
# deadline, so the whole budget is spent by the time the traces are sought.


class Unhurried(Search):
    """The exploration, blind to the deadline (it finishes whatever the clock)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["deadline"] = None
        super().__init__(*args, **kwargs)


@pytest.mark.parametrize("shortest", [False, True], ids=["default", "--shortest"])
def test_out_of_time_after_the_exploration_the_traces_settle_for_short_ones(
    monkeypatch: pytest.MonkeyPatch, shortest: bool
) -> None:
    protocol = LangshawProtocol.load(PURCHASE)
    full = verify(protocol, semantics="decentralized", shortest=True)
    assert full.verdict == "unsafe" and full.shortest and full.conflicts
    # A budget already past: spent on the exploration, as a long one would.
    monkeypatch.setattr(verify_module, "Search", Unhurried)
    now = time.perf_counter
    clock = iter([now() - 3600.0])  # the start, an hour ago; then the real clock
    monkeypatch.setattr(verify_module, "time", SimpleNamespace(
        perf_counter=lambda: next(clock, None) or now()))
    report = verify(protocol, semantics="decentralized", shortest=shortest, max_seconds=60)
    assert report.complete and report.ran_out is None  # the verdict stands
    assert report.verdict == "unsafe" and report.conflicts
    assert report.shortest is False  # settled for short traces, and says so


# docs/language.md: "`--progress` (a verification that runs past 2 s prints a
# line on stderr about once a second" (docs/semantics.md: "`progress=` hears how
# far a run longer than 2 s got, about once a second"). test_verify_budget.py
# sets both figures to 0; here the clock is scripted and the figures are kept.


def test_progress_starts_past_two_seconds_and_comes_once_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings = iter([1.99, 2.0, 2.5, 2.99, 3.0, 3.5, 3.99, 4.2])
    monkeypatch.setattr(verify_module, "time", SimpleNamespace(perf_counter=lambda: next(readings)))
    heard: list[verify_module.Progress] = []
    ticker = verify_module._Ticker(0.0, heard.append)
    for states in range(8):
        ticker(states)
    assert [(p.states, p.seconds) for p in heard] == [(1, 2.0), (4, 3.0), (7, 4.2)]
