"""A hostile review of channels: odd framing, clients that vanish at every
stage, floods, shutdowns, and the executor when its channel drops or fills.

Real uvicorn on loopback (``guarded``); the server is never mocked. Where a
test must reach inside the server it records the :class:`Channel` objects the
server makes, or injects a fault into the ledger as other tests do.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import PeachAdapter, SyncExecutor
from syncserver import Limits
from syncserver._channel import MAX_IN_FLIGHT, Channel
from tests.hostile._support import SIMPLE, closed_by_server, create, guarded, raw
from tests.hostile.test_slow_clients import Watched
from tests.syncserver.test_channel import (
    PATH,
    line,
    next_event,
    open_channel,
    seqs_until_answered,
)

AGENTS = {"p1": ["Platform"], "b1": ["Business"]}
UPGRADE = (
    f"GET {PATH}/channel HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer p1-token\r\n"
    "Connection: Upgrade\r\nUpgrade: strabo-channel\r\n\r\n"
).encode()


class Made(list[Channel]):
    """The channels the server makes, and an event for each new one."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    async def count(self, n: int, seconds: float = 5) -> None:
        async def wait() -> None:
            while len(self) < n:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), seconds)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    """Records each channel the server hands a connection to (observation only)."""
    channels = Made()
    original = Channel.connection_made

    def connection_made(self: Channel, transport: Any) -> None:
        original(self, transport)
        channels.append(self)
        channels.changed.set()

    monkeypatch.setattr(Channel, "connection_made", connection_made)
    yield channels


async def streams(url: str) -> int:
    """The server's count of open streams and channels (``/health``)."""
    reader, writer = await raw(url)
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    body = (await closed_by_server(reader, 5)).partition(b"\r\n\r\n")[2]
    writer.close()
    count: int = json.loads(body)["streams"]
    return count


async def settled(watched: Watched, url: str, connections: set[Any]) -> None:
    """Wait until no subscriber is left, then check presence and uvicorn's set."""
    await watched.empty(5)
    assert await streams(url) == 0
    # /health's own connection closed before streams() returned; uvicorn drops
    # it from its set when the transport reports the loss (bounded poll).
    for _ in range(100):
        if not any(isinstance(c, Channel) for c in connections):
            break
        await asyncio.sleep(0.01)
    assert not [c for c in connections if isinstance(c, Channel)]


# Framing ------------------------------------------------------------------------------


async def test_an_attempt_written_with_the_upgrade_request_is_answered() -> None:
    """A client that writes its first attempt without waiting for the 101."""
    async with guarded([SIMPLE], AGENTS) as (_, url):
        reader, writer = await raw(url)
        writer.write(UPGRADE + line({"instances": [create("c1")], "attempt_id": "early"}))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 101 ")
        kind, answer = await next_event(reader)  # the answer carries the batch
        assert (kind, answer["id"], answer["status"], answer["seq"]) == (
            "answer", "early", 200, 1
        ), answer
        writer.close()


async def test_a_request_pipelined_before_the_upgrade_and_an_attempt_after_it() -> None:
    async with guarded([SIMPLE], AGENTS) as (_, url):
        reader, writer = await raw(url)
        writer.write(
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            + UPGRADE
            + line({"instances": [create("c1")], "attempt_id": "piped"})
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 ")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 101 "), head
        kind, answer = await next_event(reader)
        while kind != "answer":
            kind, answer = await next_event(reader)
        assert answer["id"] == "piped" and answer["status"] == 200
        writer.close()


async def test_crlf_lines_split_lines_and_many_lines_in_one_segment() -> None:
    async with guarded([SIMPLE], AGENTS) as (_, url):
        reader, writer = await open_channel(url)
        # CRLF ends, and blank lines between attempts.
        writer.write(
            json.dumps({"instances": [create("crlf")], "attempt_id": "crlf"}).encode()
            + b"\r\n\r\n\n"
        )
        # One line over many segments.
        split = line({"instances": [create("split")], "attempt_id": "split"})
        for i in range(0, len(split), 7):
            writer.write(split[i : i + 7])
            await writer.drain()
        # Many lines (and a hundred thousand empty ones) in one write.
        writer.write(
            b"\n" * 100_000
            + b"".join(
                line({"instances": [create(f"m{i}")], "attempt_id": f"m{i}"})
                for i in range(MAX_IN_FLIGHT - 2)
            )
        )
        answers: dict[str, int] = {}
        seqs: list[int] = []
        while len(answers) < MAX_IN_FLIGHT:
            kind, data = await next_event(reader)
            if kind == "answer":
                answers[data["id"]] = data["status"]
                seqs.append(data["seq"])  # each answer carries its batch
            else:
                seqs.append(data["seq"])  # one answered already (the stream lagged)
        assert set(answers.values()) == {200}
        assert sorted(set(seqs)) == list(range(1, MAX_IN_FLIGHT + 1))
        writer.close()


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"1e400", b"-1e400"])
async def test_a_non_json_number_with_an_id_gets_a_400_and_the_channel_goes_on(
    value: bytes,
) -> None:
    async with guarded([SIMPLE], AGENTS) as (server, url):
        reader, writer = await open_channel(url)
        bindings = json.dumps(create("c1")["bindings"]).encode()
        bad = bindings.replace(b'"payment_pref": {}', b'"payment_pref": {"x": ' + value + b"}")
        assert bad != bindings
        writer.write(
            b'{"attempt_id": "n", "instances": [{"action": "Create", "bindings": '
            + bad
            + b"}]}\n"
        )
        kind, answer = await next_event(reader)
        assert (kind, answer["id"], answer["status"]) == ("answer", "n", 400), answer
        writer.write(line({"instances": [create("c2")], "attempt_id": "ok"}))
        kind, data = await next_event(reader)
        assert (kind, data["id"], data["status"], data["seq"]) == ("answer", "ok", 200, 1)
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == 1
        writer.close()


async def test_binary_garbage_and_deep_nesting_get_an_error_frame() -> None:
    garbage = [
        bytes(range(256)).replace(b"\n", b"") + b"\n",
        b"\xff\xfe{\x00\n",
        b'{"attempt_id": "d", "instances": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        b"[" * 200_000 + b"\n",
    ]
    async with guarded([SIMPLE], AGENTS) as (server, url):
        for bad in garbage:
            reader, writer = await open_channel(url)
            writer.write(bad)
            rest = (await closed_by_server(reader, 5)).decode()
            assert rest.startswith("event: error\ndata: "), (bad[:20], rest)
            writer.close()
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == 0


# Clients that leave ----------------------------------------------------------------------


async def test_clients_that_vanish_at_every_stage_leave_nothing_behind(made: Made) -> None:
    options = {"policy": "batched", "batch_window_ms": 100}
    async with guarded([SIMPLE], AGENTS, **options) as (server, url):
        ledger = server.ledgers[("default", "SimpleUCP")]
        ledger.subscribers = watched = Watched()
        _, writer = await open_channel(url)
        connections = made[0].connections
        assert connections is not None
        writer.transport.abort()
        await settled(watched, url, connections)
        attempt = line({"instances": [create("c")], "attempt_id": "v"})
        stages = [
            UPGRADE[:40],  # mid-head
            UPGRADE,  # before the 101 is read
            UPGRADE + attempt[:20],  # mid-line, before the 101
            UPGRADE + attempt,  # mid-attempt, before the 101
        ]
        for i, data in enumerate(stages):
            for abrupt in (True, False):
                _, writer = await raw(url)
                writer.write(data.replace(b'"c"', f'"c{i}{abrupt}"'.encode()))
                await writer.drain()
                if abrupt:
                    writer.transport.abort()
                else:
                    writer.close()
        # After the 101: right away, mid-line, mid-attempt.
        for tail in [b"", attempt[:20], attempt.replace(b'"c"', b'"after"')]:
            _, writer = await open_channel(url)
            writer.write(tail)
            await writer.drain()
            writer.transport.abort()
        await settled(watched, url, connections)
        # The attempts that got in are committed once each, densely.
        reader, writer = await open_channel(url)
        seqs = await seqs_until_answered(reader, writer, "last")
        assert seqs == list(range(1, len(seqs) + 1))
        writer.close()


async def test_half_closing_after_an_attempt_still_gets_its_answer() -> None:
    """EOF from the client: the answers owed go out before the channel closes."""
    async with guarded([SIMPLE], AGENTS, policy="batched", batch_window_ms=200) as (_, url):
        reader, writer = await open_channel(url)
        writer.write(line({"instances": [create("c1")], "attempt_id": "eof"}))
        writer.write_eof()
        rest = (await closed_by_server(reader, 5)).decode()
        assert '"id":"eof","status":200' in rest, rest


# Floods ----------------------------------------------------------------------------------


async def test_a_client_that_writes_but_never_reads_cannot_grow_the_servers_buffer(
    made: Made,
) -> None:
    """Each bad line costs the server an answer frame several times its size:
    a client that writes and never reads must not make it queue them all."""
    limits = Limits(write_timeout=30)  # the flood would otherwise end by the timeout
    async with guarded([SIMPLE], AGENTS, limits) as (_, url):
        reader, writer = await raw(url, rcvbuf=4096)
        writer.write(UPGRADE)
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        await made.count(1)
        channel = made[0]
        assert channel.transport is not None
        flood = b'{"attempt_id":"x"}\n' * 200_000  # 3.8 MB in, ~40 MB of answers out
        writer.write(flood)
        sending = asyncio.create_task(writer.drain())
        # No event says the server stopped reading: poll its transport (bounded).
        for _ in range(500):
            if not channel.transport.is_reading():
                break
            if channel.transport.get_write_buffer_size() > 4 * 1024 * 1024:
                break
            await asyncio.sleep(0.01)
        held = channel.transport.get_write_buffer_size()
        assert held <= 4 * limits.write_buffer, f"the server queued {held} bytes"
        assert not channel.transport.is_reading()  # the client is held back instead
        sending.cancel()
        writer.transport.abort()


# The executor ----------------------------------------------------------------------------


async def test_the_executor_with_more_attempts_at_once_than_a_channel_takes() -> None:
    """An agent attempting concurrently past MAX_IN_FLIGHT: none may fail."""
    async with guarded([SIMPLE], AGENTS, policy="batched", batch_window_ms=200) as (server, url):
        executor = SyncExecutor(url, "p1-token")
        platform = PeachAdapter("p1", SIMPLE, "Platform", executor)
        async with platform:
            await executor.connected("SimpleUCP")
            count = MAX_IN_FLIGHT + 16
            instances = [
                ActionInstance(SIMPLE.action("Create"), create(f"c{i}")["bindings"])
                for i in range(count)
            ]
            results = await asyncio.wait_for(
                asyncio.gather(*(platform.attempt([i]) for i in instances)), 20
            )
            assert len(results) == count
            await platform.sync()
        assert len(server.ledgers[("default", "SimpleUCP")].state) == count


async def _attempt_waits_in_the_window(server: Any) -> tuple[Any, asyncio.Event]:
    """The ledger, and an event set once an attempt reaches it (it then waits in
    the batched window: its task resumes only once the window is open)."""
    ledger = server.ledgers[("default", "SimpleUCP")]
    arrived = asyncio.Event()
    check = ledger.attempt

    async def attempt(*args: Any) -> Any:
        arrived.set()
        return await check(*args)

    ledger.attempt = attempt
    return ledger, arrived


async def test_an_attempt_in_flight_at_a_graceful_shutdown_gets_its_answer() -> None:
    """uvicorn's graceful shutdown lets a POST in flight finish: a channel must
    not do worse (drop the answer, so that the agent's resend finds no server)."""
    serving = guarded([SIMPLE], AGENTS, policy="batched", batch_window_ms=300)
    server, url = await serving.__aenter__()
    stopped = False
    try:
        executor = SyncExecutor(url, "p1-token", retries=1)
        platform = PeachAdapter("p1", SIMPLE, "Platform", executor)
        async with platform:
            await executor.connected("SimpleUCP")
            ledger, arrived = await _attempt_waits_in_the_window(server)
            instance = ActionInstance(SIMPLE.action("Create"), create("c1")["bindings"])
            task = asyncio.create_task(platform.attempt([instance]))
            await asyncio.wait_for(arrived.wait(), 10)
            stopped = True
            await asyncio.wait_for(serving.__aexit__(None, None, None), 10)
            finalized = await asyncio.wait_for(task, 10)
            assert [i.name for i in finalized] == ["Create"]
            assert ledger.committed_seq == 1
    finally:
        if not stopped:
            await serving.__aexit__(None, None, None)


async def test_a_channel_dropped_mid_attempt_resends_once(made: Made) -> None:
    async with guarded([SIMPLE], AGENTS, policy="batched", batch_window_ms=300) as (server, url):
        executor = SyncExecutor(url, "p1-token")
        platform = PeachAdapter("p1", SIMPLE, "Platform", executor)
        async with platform:
            await executor.connected("SimpleUCP")
            ledger, arrived = await _attempt_waits_in_the_window(server)
            instance = ActionInstance(SIMPLE.action("Create"), create("c1")["bindings"])
            task = asyncio.create_task(platform.attempt([instance]))
            await asyncio.wait_for(arrived.wait(), 10)
            assert made[0].transport is not None
            made[0].transport.abort()  # the connection breaks; the answer is owed
            finalized = await asyncio.wait_for(task, 10)
            assert [i.name for i in finalized] == ["Create"]
            await platform.sync()
        assert ledger.committed_seq == 1 and len(ledger.state) == 1


async def test_an_answer_that_comes_after_the_executors_timeout() -> None:
    """The executor gives up waiting, resends on the same channel under the same
    id; the server answers both lines with the one batch."""
    async with guarded([SIMPLE], AGENTS, policy="batched", batch_window_ms=500) as (server, url):
        executor = SyncExecutor(url, "p1-token", timeout=0.3, retries=5)
        platform = PeachAdapter("p1", SIMPLE, "Platform", executor)
        seen: list[int] = []

        @platform.observation()
        async def observe(action: ActionInstance, performer: str) -> None:
            seen.append(1)

        async with platform:
            await executor.connected("SimpleUCP")
            instance = ActionInstance(SIMPLE.action("Create"), create("c1")["bindings"])
            finalized = await asyncio.wait_for(platform.attempt([instance]), 10)
            assert [i.name for i in finalized] == ["Create"]
            line = executor._lines["SimpleUCP"]
            assert not line._waiting  # nothing left owed
            await platform.sync()
        ledger = server.ledgers[("default", "SimpleUCP")]
        assert ledger.committed_seq == 1


async def test_a_channel_whose_stream_fails_is_closed(made: Made) -> None:
    """A channel without its stream would take attempts and never tell the
    agent of anyone else's: it closes, and the agent reconnects."""
    async with guarded([SIMPLE], AGENTS) as (server, url):
        ledger = server.ledgers[("default", "SimpleUCP")]
        agent = server.agent("default", "p1")
        await server.attempt("default", "SimpleUCP", agent, [create("c0")])

        async def failing(after: int, limit: int) -> Any:
            raise RuntimeError("the store is gone")

        ledger._shared_read = failing
        reader, writer = await raw(url)
        writer.write(UPGRADE.replace(b"/channel ", b"/channel?after=0 "))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 101 ")
        await closed_by_server(reader, 5)
        writer.close()
        assert await streams(url) == 0


async def test_max_connections_counts_channels_and_frees_their_places(made: Made) -> None:
    limits = Limits(max_connections=3)
    async with guarded([SIMPLE], AGENTS, limits) as (server, url):
        ledger = server.ledgers[("default", "SimpleUCP")]
        ledger.subscribers = watched = Watched()
        held = [await open_channel(url) for _ in range(3)]
        reader, writer = await raw(url)
        writer.write(UPGRADE)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 503 ")
        writer.close()
        for _, w in held:
            w.transport.abort()
        await settled(watched, url, made[0].connections or set())
        again = [await open_channel(url) for _ in range(3)]
        for _, w in again:
            w.close()


async def test_the_executor_follows_a_server_restart(tmp_path: Any) -> None:
    from strabo.serving import free_port, serve
    from syncserver import SyncServer, create_app, uvicorn_options

    port = free_port()
    db = str(tmp_path / "strabo.db")
    tokens = {a: f"{a}-token" for a in AGENTS}

    def app() -> Any:
        server = SyncServer.embedded([SIMPLE], AGENTS, tokens=tokens, store=db)
        return server, create_app(server)

    first, first_app = app()
    url = f"http://127.0.0.1:{port}"
    executor = SyncExecutor(url, "p1-token")
    platform = PeachAdapter("p1", SIMPLE, "Platform", executor)
    observed: list[str] = []

    @platform.observation()
    async def observe(action: ActionInstance, performer: str) -> None:
        observed.append(f"{action.name}:{action['cid']}")

    def create_instance(cid: str) -> ActionInstance:
        return ActionInstance(SIMPLE.action("Create"), create(cid)["bindings"])

    async with serve(first_app, port=port, **uvicorn_options(first.config.limits)):
        await platform.start()
        await executor.connected("SimpleUCP")
        await platform.attempt([create_instance("c1")])
    try:
        second, second_app = app()
        async with serve(second_app, port=port, **uvicorn_options(second.config.limits)):
            await platform.attempt([create_instance("c2")])
            await platform.sync()
            assert observed == ["Create:c1", "Create:c2"]  # each once, in order
            assert second.ledgers[("default", "SimpleUCP")].committed_seq == 2
    finally:
        await platform.stop()
