"""The database goes away and comes back, under a running PostgresStore.

A TCP relay stands between the store and the session's cluster (which other
tests use, so it cannot be stopped): cutting the relay drops every connection
and refuses new ones, as a stopped server does. While the database is away the
store says so in one log line, not once per retry and not with a traceback
(asyncpg's pool logs one per attempt to restore its connection floor); when it
is back, the store says so, listens again, and turns work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

import pytest

from syncserver import Batch, Entry
from syncserver._pgstore import PostgresStore
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
        await store.watch(MAS, "SimpleUCP", lambda seq: None)
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
