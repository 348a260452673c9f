"""Channels: attempts, answers and the event stream on one upgraded connection.

Real uvicorn on loopback, served as ``strabo syncserver`` serves it; raw sockets
for the wire, and the SyncExecutor for the agent's side.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from langshaw import ActionInstance
from peach import PeachAdapter, SyncExecutor
from strabo.serving import serve
from syncserver import Limits, SyncServer, create_app
from tests.conftest import SIMPLE_CREATED
from tests.hostile._support import SIMPLE, closed_by_server, create, guarded, raw

AGENTS = {"p1": ["Platform"], "b1": ["Business"]}
PATH = "/mas/default/protocols/SimpleUCP"


async def open_channel(
    url: str, token: str = "p1-token", after: int = 0, protocol: str = "SimpleUCP"
) -> Any:
    reader, writer = await raw(url)
    writer.write(
        f"GET /mas/default/protocols/{protocol}/channel?after={after} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nConnection: Upgrade\r\n"
        "Upgrade: strabo-channel\r\n\r\n".encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 101 "), head
    assert b"upgrade: strabo-channel" in head.lower()
    assert await asyncio.wait_for(reader.readuntil(b"\n\n"), 5) == b": connected\n\n"
    return reader, writer


async def next_event(reader: asyncio.StreamReader) -> tuple[str, dict[str, Any]]:
    """The next event (comments skipped): its kind and its data."""
    while True:
        block = (await asyncio.wait_for(reader.readuntil(b"\n\n"), 5)).decode()
        kind, data = "message", None
        for line in block.splitlines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if data is not None:
            return kind, data


def line(payload: Any) -> bytes:
    return json.dumps(payload).encode() + b"\n"


async def seqs_until_answered(reader: asyncio.StreamReader, writer: Any, cid: str) -> list[int]:
    """Attempt a Create of ``cid`` (its attempt id too); the sequence numbers of
    the batches the channel gave until its answer (a 200), the answer's last:
    the stream leaves that batch out, the answer carries it."""
    writer.write(line({"instances": [create(cid)], "attempt_id": cid}))
    seqs = []
    while True:
        kind, data = await next_event(reader)
        if kind == "batch":
            seqs.append(data["seq"])
        elif data["id"] == cid:
            assert data["status"] == 200, data
            assert data["seq"] not in seqs, "the stream gave the answered batch too"
            return [*seqs, data["seq"]]


async def test_an_attempt_on_a_channel_gets_its_answer_and_the_others_the_batch_first() -> None:
    async with guarded([SIMPLE], AGENTS) as (server, url):
        reader, writer = await open_channel(url)
        other, other_writer = await open_channel(url, "b1-token")
        writer.write(line({"instances": [create("c1")], "attempt_id": "a-1"}))
        # The other agent has the batch before the attempter's answer is written.
        kind, batch = await next_event(other)
        assert kind == "batch" and batch["seq"] == 1
        assert batch["instances"][0]["performer"] == "p1"
        # The attempter gets the answer alone: it carries the batch (its own
        # instances by position, the others' in full), so the stream leaves it out.
        kind, answer = await next_event(reader)
        assert kind == "answer"
        assert answer == {"id": "a-1", "status": 200, "seq": 1, "attempt": [0], "others": []}
        # The same attempt id again: the same answer, nothing finalized twice.
        writer.write(line({"instances": [create("c1")], "attempt_id": "a-1"}))
        assert (await next_event(reader))[1]["seq"] == 1
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == 1
        # Another agent's batch reaches the first agent's stream as usual.
        created = {
            "action": "Created",
            "bindings": {"cid": "c1", "Create": True, "id": "s1", **SIMPLE_CREATED},
        }
        other_writer.write(line({"instances": [created], "attempt_id": "b-1"}))
        kind, batch = await next_event(reader)
        assert (kind, batch["seq"], batch["instances"][0]["performer"]) == ("batch", 2, "b1")
        kind, answer = await next_event(other)
        assert (kind, answer["id"], answer["seq"]) == ("answer", "b-1", 2)
        writer.close()
        other_writer.close()


async def test_a_batch_holding_an_attempt_already_answered_comes_on_the_stream() -> None:
    """Only an attempt still waiting for its answer keeps its batch off the stream:
    a stream catching up from the log gives every batch, the agent's own too."""
    async with guarded([SIMPLE], AGENTS) as (_, url):
        reader, writer = await open_channel(url)
        assert await seqs_until_answered(reader, writer, "c1") == [1]
        writer.close()
        again, again_writer = await open_channel(url, after=0)
        kind, batch = await next_event(again)
        assert (kind, batch["seq"], batch["instances"][0]["performer"]) == ("batch", 1, "p1")
        again_writer.close()


async def test_a_violation_is_answered_with_its_rule_and_the_channel_stays_open() -> None:
    async with guarded([SIMPLE], AGENTS) as (server, url):
        reader, writer = await open_channel(url, "b1-token")
        created = {"action": "Created", "bindings": {"cid": "nope", **SIMPLE_CREATED}}
        writer.write(line({"instances": [created], "attempt_id": "x"}))
        kind, answer = await next_event(reader)
        assert kind == "answer" and answer["id"] == "x"
        assert answer["status"] == 422 and answer["error"]["rule"] == "missing-attribute"
        # Bad shape, but an id to answer: a 400 answer, and the channel goes on.
        writer.write(line({"instances": [], "attempt_id": "y"}))
        kind, answer = await next_event(reader)
        assert (answer["id"], answer["status"], answer["error"]["code"]) == (
            "y",
            400,
            "bad-request",
        )
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == 0
        writer.close()


async def test_a_line_with_no_attempt_id_or_no_json_closes_the_channel() -> None:
    async with guarded([SIMPLE], AGENTS) as (_, url):
        for bad in (line({"instances": [create("c1")]}), b"{not json\n", b"[1, 2]\n"):
            reader, writer = await open_channel(url)
            writer.write(bad)
            rest = (await closed_by_server(reader, 5)).decode()
            assert rest.startswith("event: error\ndata: "), rest
            error = json.loads(rest.splitlines()[1][6:])["error"]
            assert error["code"] in ("bad-request", "bad-json")
            writer.close()


async def test_a_line_longer_than_max_body_closes_the_channel() -> None:
    async with guarded([SIMPLE], AGENTS, Limits(max_body=2000)) as (server, url):
        reader, writer = await open_channel(url)
        writer.write(b'{"instances": [' + b" " * 3000)  # no end of line in sight
        rest = (await closed_by_server(reader, 5)).decode()
        assert json.loads(rest.splitlines()[1][6:])["error"]["code"] == "too-large"
        writer.close()
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == 0


async def test_refusals_before_the_switch_are_json_errors() -> None:
    async with guarded([SIMPLE], AGENTS) as (_, url):
        cases = {
            "Connection: Upgrade\r\nUpgrade: strabo-channel\r\nAuthorization: Bearer no\r\n": 401,
            "Authorization: Bearer p1-token\r\n": 426,  # no upgrade asked for
            "Upgrade: strabo-channel\r\nAuthorization: Bearer p1-token\r\n": 426,
        }
        for headers, status in cases.items():
            reader, writer = await raw(url)
            writer.write(f"GET {PATH}/channel HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(f"HTTP/1.1 {status} ".encode()), (headers, head)
            writer.close()


async def test_without_the_guarded_protocol_the_app_says_it_has_no_channels() -> None:
    server = SyncServer.embedded([SIMPLE], AGENTS, tokens={a: f"{a}-token" for a in AGENTS})
    async with serve(create_app(server)) as url:
        reader, writer = await raw(url)
        writer.write(
            f"GET {PATH}/channel HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer p1-token\r\n"
            "Connection: Upgrade\r\nUpgrade: strabo-channel\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 501 ")
        writer.close()


class Posts:
    """ASGI middleware counting the POSTs to the attempts endpoint, and the
    reads of the log (how an agent fills a gap in its stream)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0
        self.log_reads = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            self.count += 1
        if scope["type"] == "http" and scope["path"].endswith("/log"):
            self.log_reads += 1
        await self.app(scope, receive, send)


async def enact(url: str) -> tuple[SyncExecutor, list[str]]:
    """Two agents through SyncExecutors: p1 creates, b1 answers Created."""
    seen: list[str] = []
    done = asyncio.Event()
    platform_executor = SyncExecutor(url, "p1-token")
    platform = PeachAdapter("p1", SIMPLE, "Platform", platform_executor)
    business = PeachAdapter("b1", SIMPLE, "Business", SyncExecutor(url, "b1-token"))

    @business.on_enabled("Created")
    async def created(fa: Any) -> None:
        await business.attempt([fa.bind(id="s1", **SIMPLE_CREATED)])

    @platform.observation()
    async def observe(action: ActionInstance, performer: str) -> None:
        seen.append(action.name)
        if action.name == "Created":
            done.set()

    async with platform, business:
        await platform_executor.connected("SimpleUCP")
        await platform.attempt([ActionInstance(SIMPLE.action("Create"), create("c1")["bindings"])])
        await asyncio.wait_for(done.wait(), 10)
        return platform_executor, seen


async def test_the_executor_sends_its_attempts_on_the_channel() -> None:
    server = SyncServer.embedded([SIMPLE], AGENTS, tokens={a: f"{a}-token" for a in AGENTS})
    from syncserver import uvicorn_options

    app = Posts(create_app(server))
    async with serve(app, **uvicorn_options(server.config.limits)) as url:
        executor, seen = await enact(url)
    assert seen == ["Create", "Created"]
    assert app.count == 0  # no attempt was POSTed
    assert executor.channel


async def test_each_agent_applies_its_own_batches_from_the_answers_in_order() -> None:
    """The stream leaves an agent's own batches out; its reader applies each from
    the attempt's answer in its place, so nothing is missed, nothing is applied
    twice, and no gap has to be filled from the log, however the two agents'
    attempts interleave."""
    server = SyncServer.embedded([SIMPLE], AGENTS, tokens={a: f"{a}-token" for a in AGENTS})
    from syncserver import uvicorn_options

    app = Posts(create_app(server))
    async with serve(app, **uvicorn_options(server.config.limits)) as url:
        platform = PeachAdapter("p1", SIMPLE, "Platform", SyncExecutor(url, "p1-token"))
        business = PeachAdapter("b1", SIMPLE, "Business", SyncExecutor(url, "b1-token"))
        seen: dict[str, list[int]] = {"p1": [], "b1": []}
        done = asyncio.Event()
        checkouts = 30

        @business.on_enabled("Created")
        async def created(fa: Any) -> None:
            await business.attempt([fa.bind(id=f"s-{fa.keys['cid']}", **SIMPLE_CREATED)])

        def follow(adapter: PeachAdapter) -> None:
            adapter.listeners.append(lambda batch, _: seen[adapter.name].append(batch.seq))

        follow(platform)
        follow(business)

        @platform.observation("Created")
        async def answered(action: ActionInstance, performer: str) -> None:
            if len(platform.enactments()) == checkouts and all(
                platform.history(root)[-1][1].name == "Created" for root in platform.enactments()
            ):
                done.set()

        async with platform, business:
            reads = app.log_reads  # the catch-up at start
            await asyncio.gather(
                *(
                    platform.attempt(
                        [ActionInstance(SIMPLE.action("Create"), create(f"c{i}")["bindings"])]
                    )
                    for i in range(checkouts)
                )
            )
            await asyncio.wait_for(done.wait(), 10)
            await business.drain()
            committed = server.ledgers[("default", "SimpleUCP")].committed_seq
            assert committed == 2 * checkouts
            for name in ("p1", "b1"):
                assert seen[name] == list(range(1, committed + 1)), name
            assert app.log_reads == reads  # no gap to fill
            assert app.count == 0


async def test_the_executor_falls_back_to_posts_and_events_without_channels() -> None:
    server = SyncServer.embedded([SIMPLE], AGENTS, tokens={a: f"{a}-token" for a in AGENTS})
    app = Posts(create_app(server))
    async with serve(app) as url:  # plain uvicorn: no channels
        executor, seen = await enact(url)
    assert seen == ["Create", "Created"]
    assert app.count == 2
    assert not executor.channel


async def test_an_attempt_in_flight_when_the_streams_end_is_answered_before_the_close() -> None:
    """The streams end (as on a restart) while an answer is owed: the channel
    answers it before it closes, and the batch is finalized once. (An answer
    lost with its connection is resent: tests/hostile/test_channel_review.py.)"""
    async with guarded([SIMPLE], AGENTS, policy="batched", batch_window_ms=300) as (server, url):
        executor = SyncExecutor(url, "p1-token")
        platform = PeachAdapter("p1", SIMPLE, "Platform", executor)
        async with platform:
            await executor.connected("SimpleUCP")
            ledger = server.ledgers[("default", "SimpleUCP")]
            instance = ActionInstance(SIMPLE.action("Create"), create("c1")["bindings"])
            arrived = asyncio.Event()
            check = ledger.attempt

            async def attempt(*args: Any) -> Any:
                arrived.set()  # its task resumes once the attempt waits in the window
                return await check(*args)

            ledger.attempt = attempt  # type: ignore[method-assign]
            task = asyncio.create_task(platform.attempt([instance]))
            await asyncio.wait_for(arrived.wait(), 10)
            assert ledger._window  # the attempt waits in the open window
            server.close_streams()  # the channel closes; its answer is owed
            finalized = await asyncio.wait_for(task, 10)
        assert [i.name for i in finalized] == ["Create"]
        assert ledger.committed_seq == 1
