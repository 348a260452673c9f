"""The PostgreSQL store: one log that several SyncServers share.

The log has the SQLite store's rows (``strabo_instances``) plus one row per
ledger (``strabo_ledgers``) holding its last sequence number. That row is the
ledger's lock: a server's :meth:`PostgresStore.turn` begins a transaction,
locks the row (``SELECT ... FOR UPDATE``), reads the batches other servers
committed since its replica's last one, lets the ledger check its attempts and
number the accepted ones, then inserts them, moves the counter, and commits.
Turns of one ledger therefore run one at a time across every server, numbers
are given in commit order (dense, no two servers giving the same), and what a
server checks an attempt against is the whole committed log.

A third table (``strabo_protocols``) holds, per ledger, the meaning of the
protocol text the log is written with (``langshaw.identity``): a server whose
text means something else refuses to start (``SyncServer.start``).

Each commit also sends a notification on its MAS's channel (:func:`channel`)
with the ledger and its new last seq; every server listens on the channels of
the MASes it hosts and reads what it has not seen, to publish it to its own
subscribers (servers hosting other MASes in the same database are not woken).
A notification can be lost (the listening connection dropped), so each server
also polls the counters every ``poll_interval`` seconds and after it reconnects.

The driver is asyncpg, an optional dependency: ``pip install 'strabo[postgres]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from langshaw import LangshawProtocol
from syncserver.batch import Batch
from syncserver.store import (
    SharedStore,
    StoreError,
    Turn,
    password_of,
    redact,
    root_text,
    rows_of,
    scrub,
)
from syncserver.store import batches_of as _batches_of

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger("strabo.syncserver")


def channel(mas: str) -> str:
    """The notification channel of one MAS (an identifier, whatever the name)."""
    return "strabo_" + hashlib.sha1(mas.encode()).hexdigest()[:20]


_SCHEMA_VERSION = "1"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS strabo_instances (
    mas TEXT NOT NULL,
    protocol TEXT NOT NULL,
    seq BIGINT NOT NULL,
    idx INTEGER NOT NULL,
    root TEXT NOT NULL,
    action TEXT NOT NULL,
    performer TEXT NOT NULL,
    bindings TEXT NOT NULL,
    attempt_id TEXT,
    PRIMARY KEY (mas, protocol, seq, idx)
);
CREATE INDEX IF NOT EXISTS strabo_instances_by_root ON strabo_instances (mas, protocol, root);
CREATE INDEX IF NOT EXISTS strabo_instances_by_attempt
    ON strabo_instances (mas, protocol, performer, attempt_id) WHERE attempt_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS strabo_ledgers (
    mas TEXT NOT NULL,
    protocol TEXT NOT NULL,
    last_seq BIGINT NOT NULL,
    PRIMARY KEY (mas, protocol)
);
CREATE TABLE IF NOT EXISTS strabo_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS strabo_protocols (
    mas TEXT NOT NULL,
    protocol TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    meaning TEXT NOT NULL,
    PRIMARY KEY (mas, protocol)
);
"""
# Servers starting at once must not race on CREATE TABLE: a transaction-level
# advisory lock on this arbitrary constant serializes schema creation.
_SCHEMA_LOCK = 0x5354_5241_424F
_COLUMNS = "seq, idx, action, performer, bindings, attempt_id"
_LOCK = "SELECT last_seq FROM strabo_ledgers WHERE mas = $1 AND protocol = $2 FOR UPDATE"
# One round trip: the rows, the counter and the notification (sent at commit).
_WRITE = """
WITH rows AS (
    INSERT INTO strabo_instances (mas, protocol, seq, idx, root, action, performer, bindings,
                                  attempt_id)
    SELECT $1, $2, * FROM unnest($3::bigint[], $4::int[], $5::text[], $6::text[], $7::text[],
                                 $8::text[], $9::text[])
), counter AS (
    UPDATE strabo_ledgers SET last_seq = $10 WHERE mas = $1 AND protocol = $2
)
SELECT pg_notify($11, $12)
"""


class PostgresStore(SharedStore):
    """A log in PostgreSQL that several SyncServers write at once.

    ``url`` is a libpq connection URL (``postgresql://user:pass@host:5432/db``).
    Durability is the database's: a turn's commit returns once PostgreSQL says it
    committed (with its default ``synchronous_commit = on``, once the WAL is
    flushed); ``--sync`` does not apply. ``pool_size`` bounds the connections for
    turns and reads; one more listens for other servers' commits.
    """

    def __init__(self, url: str, *, pool_size: int = 8, poll_interval: float = 2.0) -> None:
        self.url = url
        self.pool_size = pool_size
        self.poll_interval = poll_interval
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None
        self._watchers: dict[tuple[str, str], Callable[[int], None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._reconnect: asyncio.Event | None = None

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.url)!r})"

    # Life cycle -------------------------------------------------------------------

    async def open(self) -> None:
        try:
            import asyncpg
        except ImportError:
            raise StoreError(
                "a PostgreSQL store needs the asyncpg driver: pip install 'strabo[postgres]'"
            ) from None
        try:
            # No connection floor (min_size 0): asyncpg restores a floor in the
            # background, and while the database is away logs a full traceback
            # per retry. Without one, a turn or the watchdog connects on demand,
            # and the watchdog says in one line what is wrong.
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=0,
                max_size=self.pool_size,
                command_timeout=60,
                reset=_keep_session,
            )
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
                await conn.execute(_SCHEMA)
                version = await conn.fetchval("SELECT value FROM strabo_meta WHERE key = 'schema'")
                if version is None:
                    await conn.execute(
                        "INSERT INTO strabo_meta VALUES ('schema', $1)", _SCHEMA_VERSION
                    )
                elif version != _SCHEMA_VERSION:
                    raise StoreError(
                        f"{redact(self.url)}: schema version {version}, "
                        f"this strabo reads {_SCHEMA_VERSION}"
                    )
            await self._listen()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            await self._close_connections()
            raise StoreError(
                f"{redact(self.url)}: cannot open the database: {scrub(str(exc), self.url)}"
            ) from None
        except (ValueError, OverflowError) as exc:  # asyncpg could not parse the URL
            await self._close_connections()
            raise StoreError(
                f"{redact(self.url)}: not a valid PostgreSQL URL: {_url_fault(self.url, exc)}"
            ) from None
        except BaseException:
            await self._close_connections()
            raise
        self._reconnect = asyncio.Event()
        self._spawn(self._watchdog())

    async def close(self) -> None:
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._close_connections()

    async def _close_connections(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close(timeout=5)
            self._listener = None
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), 10)
            self._pool = None

    def _spawn(self, coroutine: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("the PostgreSQL store is not open")
        return self._pool

    # Hearing of other servers' commits --------------------------------------------

    async def watch(self, mas: str, protocol: str, callback: Callable[[int], None]) -> None:
        self._watchers[(mas, protocol)] = callback
        if self._listener is not None and sum(m == mas for m, _ in self._watchers) == 1:
            await self._listener.add_listener(channel(mas), self._notified)

    def unwatch(self, mas: str, protocol: str) -> None:
        self._watchers.pop((mas, protocol), None)

    async def _listen(self) -> None:
        import asyncpg

        listener = await asyncpg.connect(self.url)
        listener.add_termination_listener(self._listener_lost)
        for mas in {m for m, _ in self._watchers}:
            await listener.add_listener(channel(mas), self._notified)
        self._listener = listener

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        """A commit on one of the hosted MASes (the payload names the ledger)."""
        try:
            mas, protocol, seq = json.loads(str(payload))
        except (ValueError, TypeError):
            log.warning("unexpected notification on %s: %.200r", _channel, payload)
            return
        callback = self._watchers.get((mas, protocol))
        if callback is not None:
            callback(int(seq))

    def _listener_lost(self, _conn: Any) -> None:
        if not self._closing and self._reconnect is not None:
            self._reconnect.set()

    async def _watchdog(self) -> None:
        """Poll the counters now and then, and reconnect the listener when it drops:
        notifications sent while it was away are lost, the poll finds their batches.

        While the database is away, the same failure is logged once (a warning),
        not at every retry; its end is logged too."""
        assert self._reconnect is not None
        failing: str | None = None  # the failure last logged, while it lasts
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reconnect.wait(), self.poll_interval)
            try:
                if self._reconnect.is_set():
                    self._reconnect.clear()
                    if self._listener is not None:
                        with contextlib.suppress(Exception):
                            self._listener.terminate()
                        self._listener = None
                    await self._listen()
                    log.info("listening to %s again", redact(self.url))
                await self.poll()
                if failing is not None:
                    log.warning("PostgreSQL store %s: reachable again", redact(self.url))
                    failing = None
            except Exception as exc:  # the database is away: try again later
                message = scrub(str(exc), self.url) or type(exc).__name__
                level = logging.DEBUG if message == failing else logging.WARNING
                log.log(level, "PostgreSQL store %s: %s", redact(self.url), message)
                failing = message
                if self._listener is None or self._listener.is_closed():
                    self._reconnect.set()
                    await asyncio.sleep(min(self.poll_interval, 0.5))  # back-off, not a race fix

    async def poll(self) -> None:
        """Tell every watcher its ledger's last committed seq."""
        if not self._watchers:
            return
        rows = await self.pool.fetch("SELECT mas, protocol, last_seq FROM strabo_ledgers")
        for mas, protocol, last in rows:
            callback = self._watchers.get((mas, protocol))
            if callback is not None:
                callback(int(last))

    async def last_seq(self, mas: str, protocol: str) -> int:
        last = await self.pool.fetchval(
            "SELECT last_seq FROM strabo_ledgers WHERE mas = $1 AND protocol = $2", mas, protocol
        )
        return int(last or 0)

    # Turns --------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def turn(self, mas: str, protocol: LangshawProtocol, after: int) -> AsyncIterator[Turn]:
        name = protocol.name
        async with self.pool.acquire() as conn:
            transaction = conn.transaction()
            await transaction.start()
            try:
                last = await conn.fetchval(_LOCK, mas, name)
                if last is None:  # the ledger's first turn anywhere
                    await conn.execute(
                        "INSERT INTO strabo_ledgers VALUES ($1, $2, 0) ON CONFLICT DO NOTHING",
                        mas,
                        name,
                    )
                    last = await conn.fetchval(_LOCK, mas, name)
                missed: list[Batch] = []
                if last > after:
                    # A statement after the lock: its snapshot holds every commit
                    # of the turns that ran before this one.
                    rows = await conn.fetch(
                        f"SELECT {_COLUMNS} FROM strabo_instances WHERE mas = $1 AND "
                        "protocol = $2 AND seq > $3 ORDER BY seq, idx",
                        mas,
                        name,
                        after,
                    )
                    missed = batches_of(protocol, rows)
                    _check_dense(mas, name, missed, after, last)
                turn = Turn(int(last), missed)
                yield turn
                if turn.batches:
                    await self._write(conn, mas, protocol, turn.batches)
                await transaction.commit()
            except BaseException:
                with contextlib.suppress(Exception):
                    await transaction.rollback()
                raise

    async def _write(
        self, conn: Any, mas: str, protocol: LangshawProtocol, batches: list[Batch]
    ) -> None:
        columns: list[list[Any]] = [[], [], [], [], [], [], []]
        for row in rows_of(protocol, batches):
            for column, value in zip(columns, row, strict=True):
                column.append(value)
        last = batches[-1].seq
        payload = json.dumps([mas, protocol.name, last], separators=(",", ":"))
        await conn.execute(_WRITE, mas, protocol.name, *columns, last, channel(mas), payload)

    # The Store interface -------------------------------------------------------------

    async def append(self, mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]) -> None:
        """Write batches that must follow the ledger's last one (for tools and tests:
        the ledger finalizes through turns)."""
        if not batches:
            return
        first = batches[0].seq
        async with self.turn(mas, protocol, first - 1) as turn:
            if turn.last_seq != first - 1:
                raise StoreError(
                    f"{mas}/{protocol.name}: batch {first} appended after batch {turn.last_seq}"
                )
            turn.append(batches)

    async def _query(self, protocol: LangshawProtocol, where: str, *args: Any) -> list[Batch]:
        sql = (
            f"SELECT {_COLUMNS} FROM strabo_instances WHERE mas = $1 AND protocol = $2 "
            f"{where} ORDER BY seq, idx"
        )
        try:
            rows = await self.pool.fetch(sql, *args)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(f"{redact(self.url)}: read failed: {exc}") from None
        return batches_of(protocol, rows)

    async def load(self, mas: str, protocol: LangshawProtocol) -> list[Batch]:
        return await self._query(protocol, "", mas, protocol.name)

    async def read(
        self, mas: str, protocol: LangshawProtocol, after: int, until: int
    ) -> list[Batch]:
        return await self._query(
            protocol, "AND seq > $3 AND seq <= $4", mas, protocol.name, after, until
        )

    async def by_root(
        self, mas: str, protocol: LangshawProtocol, root: tuple[Any, ...]
    ) -> list[Batch]:
        return await self._query(protocol, "AND root = $3", mas, protocol.name, root_text(root))

    async def find_attempt(
        self,
        mas: str,
        protocol: LangshawProtocol,
        attempt_id: str,
        performer: str,
        root: tuple[Any, ...],
    ) -> Batch | None:
        # Not through the root: one enactment may hold thousands of rows.
        batches = await self._query(
            protocol,
            "AND performer = $3 AND attempt_id = $4",
            mas,
            protocol.name,
            performer,
            attempt_id,
        )
        return batches[0] if batches else None

    async def record_protocol(
        self, mas: str, protocol: str, fingerprint: str, meaning: str
    ) -> tuple[str, str]:
        # Two statements: the second's snapshot holds the row of a server that
        # recorded first (its insert made this one do nothing).
        try:
            async with self.pool.acquire() as conn:
                await conn.execute(
                    "INSERT INTO strabo_protocols VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    mas,
                    protocol,
                    fingerprint,
                    meaning,
                )
                row = await conn.fetchrow(
                    "SELECT fingerprint, meaning FROM strabo_protocols "
                    "WHERE mas = $1 AND protocol = $2",
                    mas,
                    protocol,
                )
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(
                f"{redact(self.url)}: cannot record the protocol: {scrub(str(exc), self.url)}"
            ) from None
        assert row is not None  # inserted, or there already
        return row[0], row[1]


async def _keep_session(_conn: Any) -> None:
    """The store changes no session state (no SET, LISTEN or advisory lock on the
    pool's connections), so a released connection needs no reset query: a round
    trip saved per turn. asyncpg still rolls back a transaction left open."""


def batches_of(protocol: LangshawProtocol, rows: Iterable[Any]) -> list[Batch]:
    """Batches from asyncpg records (sequences of their columns)."""
    return _batches_of(protocol, rows)


def _url_fault(url: str, exc: Exception) -> str:
    """What is wrong with a URL asyncpg could not parse, without its password.

    A password holding a character that ends the URL's credentials is read by
    the parser as part of the host or port, and its complaint quotes that piece:
    then the advice replaces the complaint."""
    password = password_of(url)
    if password and any(c in password for c in "/?#[]"):
        return "percent-encode the password's / ? # [ ] (as %2F %3F %23 %5B %5D)"
    return scrub(str(exc), url) or type(exc).__name__


def _check_dense(mas: str, protocol: str, batches: list[Batch], after: int, last: int) -> None:
    expected = after + 1
    for batch in batches:
        if batch.seq != expected:
            raise StoreError(
                f"the log of {mas}/{protocol} has no batch {expected} but has batch {batch.seq}"
            )
        expected += 1
    if expected != last + 1:
        raise StoreError(
            f"the log of {mas}/{protocol} ends at batch {expected - 1}, its counter says {last}"
        )
