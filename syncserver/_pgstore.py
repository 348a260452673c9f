"""The PostgreSQL store: one log that several SyncServers share.

The log has the SQLite store's rows (``strabo_instances``) plus one row per
ledger (``strabo_ledgers``) holding its last sequence number. A server appends
to a ledger only while it holds the ledger's lock (an advisory lock held to
the end of a transaction), after reading what other servers committed since
its replica's last batch: appends of one ledger run one at a time across
servers, numbers are given in commit order (dense), and attempts are checked
against the whole committed log.

What runs while the lock is held is what every server waits for, so most turns
(:meth:`PostgresStore.append_apart`) hold it for one statement: the server has
checked its attempts against its replica; the statement (``strabo_append_1``,
a function of the schema) takes the lock, reads what the replica missed,
writes unless a missed batch touches an enactment of the attempts (then the
server catches up and checks again), notifies, and commits. The others
(:meth:`PostgresStore.turn`: batched windows, a turn after two such clashes)
hold it for a transaction, checking between the read and the write.

A third table (``strabo_protocols``) holds, per ledger, the meaning of the
protocol text the log is written with (``langshaw.identity``): a server whose
text means something else refuses to start (``SyncServer.start``).

Each commit notifies its MAS's channel (:func:`channel`) with the ledger and
its new last seq, and the rows it wrote when they fit, signed with the log's
secret (:func:`signature`: any role that connects may NOTIFY); every server
listens on the channels of the MASes it hosts, applies the rows it is given,
and reads what it has not seen, to publish it to its own subscribers. A lost
notification (the listening connection dropped) is made up for by a poll of
the counters every ``poll_interval`` seconds and after reconnecting.

The driver is asyncpg, an optional dependency: ``pip install 'strabo[postgres]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from langshaw import LangshawProtocol
from syncserver._pgsql import (
    APPEND,
    COLUMNS,
    NOTE_BYTES,
    RECORD,
    SCHEMA,
    SCHEMA_LOCK,
    SCHEMA_VERSION,
    Rows,
    define_functions,
)
from syncserver.batch import Batch
from syncserver.store import (
    Hearing,
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


def channel(schema: str, mas: str) -> str:
    """The notification channel of one MAS in one schema (an identifier,
    whatever the names): logs in two schemas of a database do not hear each
    other."""
    return "strabo_" + hashlib.sha1(f"{schema}\0{mas}".encode()).hexdigest()[:20]


def signature(secret: str, body: str) -> str:
    """What ``strabo_append_2`` signs a notification's rows with."""
    return hashlib.sha256((secret + body).encode()).hexdigest()


def _ledger_key(mas: str, protocol: str) -> int:
    """The second integer of a ledger's advisory locks (a signed 32-bit digest of
    its names; two ledgers with one key would only take turns together)."""
    digest = hashlib.sha1(json.dumps([mas, protocol]).encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


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
        self._watchers: dict[tuple[str, str], Hearing] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._reconnect: asyncio.Event | None = None
        self._secret = ""  # signs the rows notifications carry (strabo_meta)
        self._schema = ""  # where the log is: its channels are named after it

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
                await conn.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
                await conn.execute(SCHEMA)
                version = await conn.fetchval("SELECT value FROM strabo_meta WHERE key = 'schema'")
                if version is None:
                    await conn.execute(
                        "INSERT INTO strabo_meta VALUES ('schema', $1)", SCHEMA_VERSION
                    )
                elif version != SCHEMA_VERSION:
                    raise StoreError(
                        f"{redact(self.url)}: schema version {version}, "
                        f"this strabo reads {SCHEMA_VERSION}"
                    )
                await conn.execute(
                    "INSERT INTO strabo_meta VALUES ('notify_secret', $1) ON CONFLICT DO NOTHING",
                    secrets.token_hex(32),
                )
                row = await conn.fetchrow(
                    "SELECT value, current_schema() FROM strabo_meta WHERE key = 'notify_secret'"
                )
                assert row is not None  # inserted just before, in this transaction
                self._secret, self._schema = row[0], row[1]
                await define_functions(conn)
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

    async def watch(self, mas: str, protocol: str, callback: Hearing) -> None:
        self._watchers[(mas, protocol)] = callback
        if self._listener is not None and sum(m == mas for m, _ in self._watchers) == 1:
            await self._listener.add_listener(channel(self._schema, mas), self._notified)

    def unwatch(self, mas: str, protocol: str) -> None:
        self._watchers.pop((mas, protocol), None)

    async def _listen(self) -> None:
        import asyncpg

        listener = await asyncpg.connect(self.url)
        listener.add_termination_listener(self._listener_lost)
        for mas in {m for m, _ in self._watchers}:
            await listener.add_listener(channel(self._schema, mas), self._notified)
        self._listener = listener

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        """A commit on one of the hosted MASes: the payload names the ledger and
        its new last seq, then (when they fit) the seq before the commit and
        the rows it wrote."""
        text = str(payload)
        try:
            signed = not text.startswith("[")  # the rows come signed (``signature``)
            if signed:
                digest, _, text = text.partition(" ")
                if not hmac.compare_digest(digest, signature(self._secret, text)):
                    raise ValueError("not signed with this log's secret")
            mas, protocol, seq, *carried = json.loads(text)
            seq = int(seq)
            rows = CarriedRows(int(carried[0]), carried[1]) if signed else None
            callback = self._watchers.get((mas, protocol))
        except (ValueError, TypeError, IndexError, OverflowError):
            log.warning("unexpected notification on %s: %.200r", _channel, payload)
            return
        if callback is not None:
            callback(seq, rows)

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
        """A transaction holding the ledger from its first statement, which
        reads what was missed, to its commit, after the write."""
        async with self.pool.acquire() as conn:
            transaction = conn.transaction()
            await transaction.start()
            try:
                turn = await self._append(conn, mas, protocol, after, [], ())
                yield turn
                if turn.batches:
                    last = turn.last_seq
                    rows = [(seq - last, *rest) for seq, *rest in rows_of(protocol, turn.batches)]
                    await self._append(conn, mas, protocol, last, rows, ())
                await transaction.commit()
            except BaseException:
                with contextlib.suppress(Exception):
                    await transaction.rollback()
                raise

    async def append_apart(
        self, mas: str, protocol: LangshawProtocol, after: int, rows: Rows, roots: Iterable[str]
    ) -> MissedRows:
        """A whole turn in one statement, its attempts checked already against
        a replica holding the batches up to ``after``: take the ledger and,
        unless a batch after ``after`` touches one of ``roots`` (``clash``),
        write ``rows`` (batch relative to the last one, 1 for the first; idx,
        root, action, performer, bindings, attempt id) as the next batches, and
        commit. The result holds the last seq before them, and the batches after
        ``after``, which the caller applies before its own."""
        async with self.pool.acquire() as conn:
            return await self._append(conn, mas, protocol, after, rows, roots)

    async def _append(
        self,
        conn: Any,
        mas: str,
        protocol: LangshawProtocol,
        after: int,
        rows: Rows,
        roots: Iterable[str],
    ) -> MissedRows:
        """One call of ``strabo_append_1`` on ``conn``: alone, a whole turn; in a
        transaction, a turn's read (no rows) or its write."""
        name = protocol.name
        columns = [list(column) for column in zip(*rows, strict=True)] or [[] for _ in range(7)]
        count = rows[-1][0] if rows else 0
        key = _ledger_key(mas, name)
        args = (mas, name, after, key, list(roots), count, *columns, channel(self._schema, mas))
        if count:
            found = await self._write(conn, APPEND, *args, _note(rows), self._secret)
        else:
            found = await conn.fetch(APPEND, *args, None, None)
        last = int(found[-1][0])
        if last > after:
            _check_dense(mas, name, [row[0] for row in found[:-1]], after, last)
        result = MissedRows(last, found[:-1], protocol)
        result.clash = found[-1][1] == -2
        return result

    async def _write(self, conn: Any, query: str, *args: Any) -> list[Any]:
        """Run the statement that writes a turn's batches (a seam for the tests,
        which fail it or stop the database there)."""
        rows: list[Any] = await conn.fetch(query, *args)
        return rows

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
            f"SELECT {COLUMNS} FROM strabo_instances WHERE mas = $1 AND protocol = $2 "
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
        self, mas: str, protocol: LangshawProtocol, attempt_id: str, performer: str, root: Any
    ) -> Batch | None:
        # Not through the root: one enactment may hold thousands of rows.
        where = "AND performer = $3 AND attempt_id = $4"
        batches = await self._query(protocol, where, mas, protocol.name, performer, attempt_id)
        return batches[0] if batches else None

    async def record_protocol(
        self, mas: str, protocol: str, fingerprint: str, meaning: str
    ) -> tuple[str, str]:
        # Two statements: the second's snapshot holds the row of a server that
        # recorded first (its insert made this one do nothing).
        try:
            async with self.pool.acquire() as conn:
                await conn.execute(RECORD, mas, protocol, fingerprint, meaning)
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


class MissedRows(Turn):
    """A turn whose missed batches stay rows until read (``missed`` decodes
    them), with their enactments as the log keeps them (``missed_roots``):
    ``syncserver._shared`` applies them after the commit when they touch none
    of its attempts' enactments."""

    def __init__(self, last_seq: int, rows: Sequence[Any], protocol: LangshawProtocol) -> None:
        self._protocol = protocol
        self._missed: list[Batch] = []
        super().__init__(last_seq, [])
        self._rows: Sequence[Any] | None = rows
        self.missed_roots = frozenset(row[6] for row in rows)
        # (performer, attempt id) of the missed batches: a turn whose attempts
        # carry one of them follows them before checking (the id is taken).
        self.missed_ids = frozenset((row[3], row[5]) for row in rows if row[5] is not None)
        self.clash = False  # (append_apart) a batch missed touches an attempt's enactment

    @property
    def missed(self) -> list[Batch]:
        if self._rows is not None:
            rows, self._rows = self._rows, None
            self._missed = batches_of(self._protocol, [row[:6] for row in rows])
        return self._missed

    @missed.setter
    def missed(self, batches: list[Batch]) -> None:
        self._rows, self._missed = None, batches


async def _keep_session(_conn: Any) -> None:
    """No session state changes on the pool's connections (no SET, LISTEN or
    session lock): no reset query, a round trip saved per turn. asyncpg still
    rolls back a transaction left open."""


def _note(rows: Rows) -> str | None:
    """What a commit's notification carries of its rows: their JSON (seq
    relative to the last before them; idx, action, performer, bindings' text,
    attempt id), or None when it cannot fit (the followers then read the log)."""
    note = json.dumps([(rel, idx, action, who, text, key) for rel, idx, _, action, who, text, key
                       in rows], separators=(",", ":"))
    return note if len(note) < NOTE_BYTES else None


class CarriedRows:
    """The rows a notification carried (``_note``): batches ``first`` on, decoded
    only by a follower that can apply them as they come."""

    def __init__(self, before: int, rows: list[list[Any]]) -> None:
        self.first = before + 1
        self._before = before
        self._rows = rows

    def batches(self, protocol: LangshawProtocol) -> list[Batch]:
        before = self._before
        return batches_of(protocol, [(before + rel, *rest) for rel, *rest in self._rows])


def batches_of(protocol: LangshawProtocol, rows: Sequence[Any]) -> list[Batch]:
    """Batches from asyncpg records (sequences of their columns).

    Each entry keeps the bindings' text as read (what the writer encoded: the
    same compact JSON), so that its event frame is not encoded again: every
    server frames every batch it follows, for its streams' tail."""
    batches = _batches_of(protocol, rows)
    texts = iter(row[4] for row in rows)
    for batch in batches:
        for entry in batch.entries:
            entry._json = next(texts)
    return batches


def _url_fault(url: str, exc: Exception) -> str:
    """What is wrong with a URL asyncpg could not parse, without its password.

    A password holding a character that ends the URL's credentials is read by
    the parser as part of the host or port, and its complaint quotes that piece:
    then the advice replaces the complaint."""
    password = password_of(url)
    if password and any(c in password for c in "/?#[]"):
        return "percent-encode the password's / ? # [ ] (as %2F %3F %23 %5B %5D)"
    return scrub(str(exc), url) or type(exc).__name__


def _check_dense(mas: str, protocol: str, seqs: list[int], after: int, last: int) -> None:
    """``seqs``: of each row read, in order (a batch's rows share one)."""
    expected = after + 1
    for seq in seqs:
        if seq == expected - 1 and seq > after:
            continue  # another row of the same batch
        if seq != expected:
            raise StoreError(
                f"the log of {mas}/{protocol} has no batch {expected} but has batch {seq}"
            )
        expected += 1
    if expected != last + 1:
        raise StoreError(
            f"the log of {mas}/{protocol} ends at batch {expected - 1}, its counter says {last}"
        )
