"""The database goes away and comes back, under a running PostgresStore.

A TCP relay stands between the store and the session's cluster (which other
tests use, so it cannot be stopped): cutting the relay drops every connection
and refuses new ones, as a stopped server does. While the database is away the
store says so in one log line, not once per retry and not with a traceback
(asyncpg's pool logs one per attempt to restore its connection floor); when it
is back, the store says so, listens again, and turns work.

Then a SyncServer over HTTP, with PostgreSQL stopping in the middle of a turn:
every attempt gets 503 (retryable) while the state cannot be rebuilt, never 500
and never no answer, the rebuild is tried again until the database is back,
and then every attempt id resent is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from langshaw import LangshawProtocol
from syncserver import Batch, Entry, SyncServer, create_app
from syncserver._pgstore import PostgresStore
from syncserver.serving import serve
from tests.harness import CLIENT_LIMITS, until
from tests.syncserver.postgres.test_store import MAS, SIMPLE, create


class Relay:
    """Forwards loopback TCP connections to ``port`` until :meth:`cut`."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Refuse new connections and drop the open ones."""
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        await asyncio.gather(*self.pipes, return_exceptions=True)
        await self.server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self.writers |= {writer, up_writer}
        for pipe in (self._pipe(reader, up_writer), self._pipe(up_reader, writer)):
            task = asyncio.ensure_future(pipe)
            self.pipes.add(task)
            task.add_done_callback(self.pipes.discard)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.transport.abort()
            self.writers.discard(writer)


class Records(logging.Handler):
    """Every record of the loggers watched, and an event set at each one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.arrived = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.arrived.set()

    async def until(self, condition: Callable[[], bool], seconds: float = 15) -> None:
        async with asyncio.timeout(seconds):
            while not condition():
                self.arrived.clear()
                await self.arrived.wait()

    def lines(self, level: int = logging.WARNING) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= level]


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    loggers = [logging.getLogger(name) for name in ("strabo.syncserver", "asyncpg")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


async def test_an_outage_is_one_log_line_and_the_store_recovers(
    pg_url: str, records: Records
) -> None:
    target = int(pg_url.rsplit(":", 1)[1].split("/")[0])
    relay = Relay(target)
    await relay.start()
    url = pg_url.replace(f":{target}/", f":{relay.port}/")
    store = PostgresStore(url, poll_interval=0.05)
    await store.open()
    try:
        await store.watch(MAS, "SimpleUCP", lambda seq, carried=None: None)
        await store.append(MAS, SIMPLE, [Batch("SimpleUCP", 1, (Entry(create("c1"), "p", "a"),))])
        await relay.cut()

        def retried(times: int) -> Callable[[], bool]:
            refused = "Connect call failed"
            return lambda: sum(refused in r.getMessage() for r in records.records) >= times

        # Many retries (a poll every 50 ms, at most 0.5 s apart), one warning for
        # them (a poll caught mid-query by the cut may have failed otherwise first).
        await records.until(retried(4))
        assert [r for r in records.records if r.exc_info or r.name.startswith("asyncpg")] == []
        warnings = records.lines()
        assert sum("Connect call failed" in line for line in warnings) == 1, warnings
        assert len(warnings) <= 2, warnings
        assert all(line.startswith(f"PostgreSQL store {url}: ") for line in warnings), warnings

        await relay.start()  # the same port: the database is back
        await records.until(lambda: "reachable again" in " ".join(records.lines()))
        async with asyncio.timeout(10), store.turn(MAS, SIMPLE, 1) as turn:
            assert turn.last_seq == 1
        assert [r for r in records.records if r.exc_info or r.name.startswith("asyncpg")] == []
    finally:
        await store.close()
        await relay.cut()


# PostgreSQL stops in the middle of a turn -----------------------------------------------


class StopsMidTurn(PostgresStore):
    """When ``armed``, the next turn that writes stops PostgreSQL (cuts the relay)
    once it has checked its attempts and is about to write them, at the test's
    signal; the rebuild of the state that follows waits at ``rebuild_gate``, so
    that attempts can arrive while it runs."""

    def __init__(self, url: str, relay: Relay) -> None:
        super().__init__(url, poll_interval=0.05)
        self.relay = relay
        self.armed = False
        self.in_turn = asyncio.Event()
        self.stop = asyncio.Event()
        self.rebuilding = asyncio.Event()
        self.rebuild_gate = asyncio.Event()

    async def _write(self, conn: Any, query: str, *args: Any) -> list[Any]:
        if self.armed:
            self.armed = False
            self.in_turn.set()
            await self.stop.wait()
            await self.relay.cut()
        return await super()._write(conn, query, *args)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Whatever happens in the block, nothing is left waiting for the test."""
        try:
            yield
        finally:
            self.stop.set()
            self.rebuild_gate.set()

    async def load(self, mas: str, protocol: LangshawProtocol) -> list[Batch]:
        if self.in_turn.is_set() and not self.rebuilding.is_set():
            self.rebuilding.set()
            await self.rebuild_gate.wait()
        return await super().load(mas, protocol)


class Counting(SyncServer):
    """A SyncServer that counts the attempts reaching it (an event at each)."""

    arrived = 0
    changed: asyncio.Event

    async def attempt(self, *args: Any, **kwargs: Any) -> Any:
        self.arrived += 1
        self.changed.set()
        return await super().attempt(*args, **kwargs)


async def test_an_outage_mid_turn_leaves_no_attempt_id_unanswered(
    pg_url: str, records: Records
) -> None:
    """PostgreSQL stops during a turn: the marked attempt, those queued behind
    it, one arriving while the state is rebuilt (which fails: the database is
    away) and one after that all get 503 (retryable), none 500 and none no
    answer. Once PostgreSQL is back, each id resent is answered, new ids too,
    and no task ended with an exception nobody retrieved."""
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    target = int(pg_url.rsplit(":", 1)[1].split("/")[0])
    relay = Relay(target)
    await relay.start()
    store = StopsMidTurn(pg_url.replace(f":{target}/", f":{relay.port}/"), relay)
    server = Counting.embedded([SIMPLE], {"platform": ["Platform"]}, store=store)
    server.changed = asyncio.Event()
    path = "/mas/default/protocols/SimpleUCP"
    try:
        async with serve(create_app(server)) as base, store.held(), httpx.AsyncClient(
            base_url=base,
            headers={"Authorization": "Bearer platform"},
            timeout=30,
            limits=CLIENT_LIMITS,
        ) as http:

            async def post(cid: str) -> httpx.Response:
                """Create ``cid`` under the attempt id ``cid``; an answer within 5 s."""
                body = {"instances": [{"action": "Create", "bindings": create(cid).bindings}],
                        "attempt_id": cid}
                try:
                    async with asyncio.timeout(5):
                        return await http.post(f"{path}/attempts", json=body)
                except TimeoutError:
                    raise AssertionError(f"attempt {cid!r} got no answer") from None

            def refused(answer: httpx.Response) -> bool:
                error = answer.json()["error"]["code"]
                return answer.status_code == 503 and error == "store-failed"

            assert (await post("before")).status_code == 200
            store.armed = True
            marked = asyncio.ensure_future(post("marked"))
            await store.in_turn.wait()
            queued = [asyncio.ensure_future(post(f"queued{i}")) for i in range(3)]
            await until(lambda: server.arrived == 5, server.changed)
            store.stop.set()  # PostgreSQL stops now, in the middle of the turn
            assert refused(await marked), (await marked).text
            await store.rebuilding.wait()
            during = asyncio.ensure_future(post("during"))
            await until(lambda: server.arrived == 6, server.changed)
            store.rebuild_gate.set()  # the rebuild goes on, and fails: no database
            for answer in await asyncio.gather(*queued, during):
                assert refused(answer), answer.text
            await records.until(lambda: "cannot rebuild" in " ".join(records.lines()))
            after = await post("after")  # the state still cannot be read
            assert refused(after), after.text
            # The rebuild is tried again and again, said once (not at every try).
            retried = "cannot rebuild default/SimpleUCP yet"
            await records.until(lambda: sum(retried in r.getMessage() for r in records.records) > 2)
            assert sum("cannot rebuild" in line for line in records.lines()) == 1

            await relay.start()  # PostgreSQL is back
            await records.until(lambda: "rebuilt" in " ".join(records.lines()))
            cids = ["marked", "queued0", "queued1", "queued2", "during", "after", "new"]
            for cid in cids:  # the same ids again, and a new one: each answered
                answer = await post(cid)
                assert answer.status_code == 200, (cid, answer.text)
            log = (await http.get(f"{path}/log", params={"after": 0})).json()
            found = [i["bindings"]["cid"] for b in log["events"] for i in b["instances"]]
            assert found == ["before", *cids]
            assert [b["seq"] for b in log["events"]] == list(range(1, len(cids) + 2))
    finally:
        await relay.cut()
    gc.collect()  # a task whose exception nobody retrieved says so when collected
    assert unhandled == [], unhandled
    assert not [r for r in records.records if r.levelno >= logging.ERROR and r.exc_info]
