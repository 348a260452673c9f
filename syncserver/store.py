"""Where finalized instances are kept: SQLite on disk, or memory.

The log is append-only. A batch is written in one transaction, and the server
acknowledges an attempt only after the transaction holding it has committed, so
an acknowledged action survives ``kill -9``. Concurrent attempts share a
transaction (group commit): the cost of a commit is paid once per batch of
attempts, not once per action.

Several SyncServers may share one log in PostgreSQL (``syncserver._pgstore``):
such a store is ``shared``, and the ledger then finalizes inside
:meth:`SharedStore.turn`, which serializes finalization across the servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from langshaw import ActionInstance, LangshawProtocol
from syncserver.batch import Batch, Entry

log = logging.getLogger("strabo.syncserver")


def root_text(values: tuple[Any, ...]) -> str:
    """The root key values as canonical JSON, the form the log indexes them by."""
    return json.dumps(list(values), separators=(",", ":"))


def root_of(protocol: LangshawProtocol, instance: ActionInstance) -> tuple[Any, ...]:
    return tuple(instance.bindings[k] for k in protocol.root_keys)


class StoreError(Exception):
    """The store failed, or holds a log that does not fit the protocol."""


class Store:
    """The interface both stores implement; batches go in and come out whole."""

    #: True when append() is instantaneous and needs no writer task (memory).
    inline: bool = False
    #: True when append_now() writes durably without waiting on the disk.
    synchronous_append: bool = False
    #: True when several servers write the log at once (a :class:`SharedStore`).
    shared: bool = False

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def append(self, mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]) -> None:
        """Write batches in one transaction."""
        raise NotImplementedError

    async def load(self, mas: str, protocol: LangshawProtocol) -> list[Batch]:
        """Every batch of one ledger, in order (used once, at start-up)."""
        raise NotImplementedError

    async def read(
        self, mas: str, protocol: LangshawProtocol, after: int, until: int
    ) -> list[Batch]:
        """The batches ``after < seq <= until``, in order."""
        raise NotImplementedError

    async def by_root(
        self, mas: str, protocol: LangshawProtocol, root: tuple[Any, ...]
    ) -> list[Batch]:
        """The batches touching one enactment, holding only its entries."""
        raise NotImplementedError

    async def find_attempt(
        self,
        mas: str,
        protocol: LangshawProtocol,
        attempt_id: str,
        performer: str,
        root: tuple[Any, ...],
    ) -> Batch | None:
        """The batch holding an agent's attempt, with only that attempt's entries
        (attempt ids are the agent's own: two agents may use the same one). ``root``
        is the enactment of the attempt's first instance: the log is indexed by it."""
        raise NotImplementedError

    async def record_protocol(
        self, mas: str, protocol: str, fingerprint: str, meaning: str
    ) -> tuple[str, str]:
        """Record which protocol a ledger's log is written with (its meaning and
        that meaning's digest: ``langshaw.identity``), unless the log already
        says; the ``(fingerprint, meaning)`` recorded. A store that keeps
        nothing across runs (memory) records nothing: it returns its arguments."""
        return fingerprint, meaning


class Turn:
    """One ledger's exclusive turn at a shared log: no other server appends to
    the ledger until the turn ends (committed, or rolled back on an exception).

    ``missed`` holds the batches other servers committed after the seq the turn
    was asked for, in order; ``last_seq`` is the last committed batch. Batches
    given to :meth:`append` must follow ``last_seq`` densely; they are written
    and published to every server when the turn commits."""

    def __init__(self, last_seq: int, missed: list[Batch]) -> None:
        self.last_seq = last_seq
        self.missed = missed
        self.batches: list[Batch] = []

    def append(self, batches: Sequence[Batch]) -> None:
        expected = self.last_seq + len(self.batches) + 1
        for batch in batches:
            if batch.seq != expected:
                raise StoreError(f"batch {batch.seq} appended where batch {expected} belongs")
            expected += 1
        self.batches.extend(batches)


class SharedStore(Store):
    """A log that several SyncServers write at once (PostgreSQL).

    Each server keeps its own replica of the social state, which other servers'
    commits make stale. So a ledger finalizes only inside a :meth:`turn`: the
    turn serializes the ledger's writers across servers, hands over what the
    replica missed, and commits the new batches with the next sequence numbers.
    Servers hear of each other's commits through :meth:`watch`."""

    shared = True

    def turn(
        self, mas: str, protocol: LangshawProtocol, after: int
    ) -> AbstractAsyncContextManager[Turn]:
        """An exclusive turn at the ledger; ``after`` is the last batch the caller holds."""
        raise NotImplementedError

    async def watch(self, mas: str, protocol: str, callback: Callable[[int], None]) -> None:
        """Call ``callback(seq)`` when some server may have committed batches up
        to ``seq`` (hints: notifications, and polls in case one was missed)."""
        raise NotImplementedError

    def unwatch(self, mas: str, protocol: str) -> None:
        raise NotImplementedError

    async def last_seq(self, mas: str, protocol: str) -> int:
        """The ledger's last committed batch, as the log says now."""
        raise NotImplementedError


class MemoryStore(Store):
    """Keeps the log in memory: fast and ephemeral (``--db :memory:``).

    Only the attempt ids are indexed; reading one enactment scans the log, which
    is fine for the tests and small systems a memory store is for.
    """

    inline = True
    synchronous_append = True

    def __init__(self) -> None:
        self._logs: dict[tuple[str, str], list[Batch]] = {}
        self._attempts: dict[tuple[str, str, str, str], Batch] = {}

    async def append(self, mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]) -> None:
        self.append_now(mas, protocol, batches)

    def append_now(self, mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]) -> None:
        name = protocol.name
        self._logs.setdefault((mas, name), []).extend(batches)
        attempts = self._attempts
        for batch in batches:
            for entry in batch.entries:
                if entry.attempt_id is not None:
                    attempts.setdefault((mas, name, entry.performer, entry.attempt_id), batch)

    async def load(self, mas: str, protocol: LangshawProtocol) -> list[Batch]:
        return list(self._logs.get((mas, protocol.name), ()))

    async def read(
        self, mas: str, protocol: LangshawProtocol, after: int, until: int
    ) -> list[Batch]:
        log = self._logs.get((mas, protocol.name), [])
        # Batches are numbered from 1 without gaps: seq n is at index n - 1.
        return log[max(after, 0) : max(until, 0)]

    async def by_root(
        self, mas: str, protocol: LangshawProtocol, root: tuple[Any, ...]
    ) -> list[Batch]:
        def mine(entry: Entry) -> bool:
            return root_of(protocol, entry.instance) == root

        return [
            batch.only(mine)
            for batch in self._logs.get((mas, protocol.name), ())
            if any(mine(e) for e in batch.entries)
        ]

    async def find_attempt(
        self,
        mas: str,
        protocol: LangshawProtocol,
        attempt_id: str,
        performer: str,
        root: tuple[Any, ...],
    ) -> Batch | None:
        batch = self._attempts.get((mas, protocol.name, performer, attempt_id))
        if batch is None:
            return None
        return batch.only(lambda e: e.attempt_id == attempt_id and e.performer == performer)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    mas TEXT NOT NULL,
    protocol TEXT NOT NULL,
    seq INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    root TEXT NOT NULL,
    action TEXT NOT NULL,
    performer TEXT NOT NULL,
    bindings TEXT NOT NULL,
    attempt_id TEXT,
    PRIMARY KEY (mas, protocol, seq, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS instances_by_root ON instances (mas, protocol, root);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS protocols (
    mas TEXT NOT NULL,
    protocol TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    meaning TEXT NOT NULL,
    PRIMARY KEY (mas, protocol)
) WITHOUT ROWID;
"""
_SCHEMA_VERSION = "1"
_INSERT = "INSERT INTO instances VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
_COLUMNS = "seq, idx, action, performer, bindings, attempt_id"


class SQLiteStore(Store):
    """The durable store: one SQLite file in WAL mode.

    ``synchronous='normal'`` (the default) makes a commit durable against the
    process dying (``kill -9``), which is what an acknowledgement promises. Such a
    commit is a write to the WAL without fsync, so it is done right away on the
    event loop, and checkpoints (which do sync) run on a worker thread.
    ``'full'`` also survives power loss, at the price of an fsync per commit; its
    commits run on the worker thread. Reads always run there, on a connection of
    their own.
    """

    def __init__(
        self, path: str | Path, synchronous: str = "normal", checkpoint_pages: int = 4000
    ) -> None:
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self.path = Path(path)
        self.synchronous = synchronous
        self.synchronous_append = synchronous == "normal"
        self.checkpoint_pages = checkpoint_pages
        self._db: sqlite3.Connection | None = None  # the writer
        self._reader: sqlite3.Connection | None = None  # reads and checkpoints
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strabo-sqlite")
        self._rows_since_checkpoint = 0
        self._checkpoint: asyncio.Future[Any] | None = None

    async def _run(self, fn: Any, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, fn, *args)

    async def open(self) -> None:
        await self._run(self._open)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        return db

    def _open(self) -> None:
        try:
            if self.path.parent and not self.path.parent.exists():
                raise StoreError(f"{self.path}: directory {self.path.parent} does not exist")
            db = self._connect()
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run off the loop
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('schema', ?)", (_SCHEMA_VERSION,))
            elif row[0] != _SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {row[0]}, this strabo reads {_SCHEMA_VERSION}"
                )
            self._reader = self._connect()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the database: {exc}") from None
        self._db = db

    async def close(self) -> None:
        if self._checkpoint is not None:
            await asyncio.gather(self._checkpoint, return_exceptions=True)
        if self._db is not None:
            await self._run(self._close)
        self._thread.shutdown(wait=True)

    def _close(self) -> None:
        assert self._db is not None and self._reader is not None
        with contextlib.suppress(sqlite3.Error):  # the WAL is replayed at open anyway
            self._reader.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._reader.close()
        self._db.close()
        self._db = self._reader = None

    async def append(self, mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]) -> None:
        if self.synchronous == "full":
            await self._run(self._append, self._rows(mas, protocol, batches))
        else:
            self.append_now(mas, protocol, batches)

    @staticmethod
    def _rows(
        mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]
    ) -> list[tuple[Any, ...]]:
        name = protocol.name
        return [(mas, name, *row) for row in rows_of(protocol, batches)]

    def append_now(self, mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]) -> None:
        """Write batches at once (``synchronous='normal'``: no fsync to wait for)."""
        rows = self._rows(mas, protocol, batches)
        self._append(rows)
        self._rows_since_checkpoint += len(rows)
        if self._rows_since_checkpoint >= self.checkpoint_pages and self._checkpoint is None:
            self._rows_since_checkpoint = 0
            self._checkpoint = asyncio.ensure_future(self._run(self._passive_checkpoint))
            self._checkpoint.add_done_callback(self._checkpoint_done)

    def _passive_checkpoint(self) -> None:
        assert self._reader is not None
        self._reader.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _checkpoint_done(self, future: asyncio.Future[Any]) -> None:
        self._checkpoint = None
        if not future.cancelled() and future.exception() is not None:
            log.warning("checkpoint of %s failed: %s", self.path, future.exception())

    def _append(self, rows: list[tuple[Any, ...]]) -> None:
        db = self._db
        assert db is not None, "store is not open"
        try:
            if len(rows) == 1:  # one statement is its own transaction: no BEGIN, no COMMIT
                db.execute(_INSERT, rows[0])
            else:
                db.execute("BEGIN")
                db.executemany(_INSERT, rows)
                db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreError(f"{self.path}: write failed: {exc}") from None

    def _select(self, protocol: LangshawProtocol, sql: str, args: Iterable[Any]) -> list[Batch]:
        db = self._reader
        assert db is not None, "store is not open"
        return batches_of(protocol, db.execute(sql, tuple(args)))

    async def _query(
        self, protocol: LangshawProtocol, where: str, args: tuple[Any, ...]
    ) -> list[Batch]:
        sql = (
            f"SELECT {_COLUMNS} FROM instances WHERE mas = ? AND protocol = ? {where} "
            "ORDER BY seq, idx"
        )
        batches: list[Batch] = await self._run(self._select, protocol, sql, args)
        return batches

    async def load(self, mas: str, protocol: LangshawProtocol) -> list[Batch]:
        return await self._query(protocol, "", (mas, protocol.name))

    async def read(
        self, mas: str, protocol: LangshawProtocol, after: int, until: int
    ) -> list[Batch]:
        return await self._query(
            protocol, "AND seq > ? AND seq <= ?", (mas, protocol.name, after, until)
        )

    async def by_root(
        self, mas: str, protocol: LangshawProtocol, root: tuple[Any, ...]
    ) -> list[Batch]:
        return await self._query(protocol, "AND root = ?", (mas, protocol.name, root_text(root)))

    async def find_attempt(
        self,
        mas: str,
        protocol: LangshawProtocol,
        attempt_id: str,
        performer: str,
        root: tuple[Any, ...],
    ) -> Batch | None:
        # Through the root index: an enactment has few rows, so no index on ids.
        batches = await self._query(
            protocol,
            "AND root = ? AND attempt_id = ? AND performer = ?",
            (mas, protocol.name, root_text(root), attempt_id, performer),
        )
        return batches[0] if batches else None

    async def record_protocol(
        self, mas: str, protocol: str, fingerprint: str, meaning: str
    ) -> tuple[str, str]:
        recorded: tuple[str, str] = await self._run(
            self._record_protocol, mas, protocol, fingerprint, meaning
        )
        return recorded

    def _record_protocol(
        self, mas: str, protocol: str, fingerprint: str, meaning: str
    ) -> tuple[str, str]:
        db = self._db
        assert db is not None, "store is not open"
        try:
            db.execute(
                "INSERT OR IGNORE INTO protocols VALUES (?, ?, ?, ?)",
                (mas, protocol, fingerprint, meaning),
            )
            row = db.execute(
                "SELECT fingerprint, meaning FROM protocols WHERE mas = ? AND protocol = ?",
                (mas, protocol),
            ).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot record the protocol: {exc}") from None
        return row[0], row[1]


def rows_of(protocol: LangshawProtocol, batches: Sequence[Batch]) -> list[tuple[Any, ...]]:
    """The log's rows for ``batches``: (seq, idx, root, action, performer, bindings,
    attempt_id), the bindings and the root as canonical JSON text (both stores
    keep the text, so a value reads back exactly as it was written)."""
    roots = protocol.root_keys
    return [
        (
            batch.seq,
            index,
            root_text(tuple(entry.instance.bindings[k] for k in roots)),
            entry.instance.action.name,
            entry.performer,
            entry.bindings_json,
            entry.attempt_id,
        )
        for batch in batches
        for index, entry in enumerate(batch.entries)
    ]


def batches_of(protocol: LangshawProtocol, rows: Iterable[Sequence[Any]]) -> list[Batch]:
    """Batches from rows ``(seq, idx, action, performer, bindings, attempt_id)``
    ordered by seq and idx."""
    batches: list[Batch] = []
    entries: list[Entry] = []
    seq = None
    for row_seq, _idx, action, performer, bindings, attempt in rows:
        if row_seq != seq and entries:
            batches.append(Batch(protocol.name, seq, tuple(entries)))  # type: ignore[arg-type]
            entries = []
        seq = row_seq
        entries.append(
            Entry(_decode(protocol, action, json.loads(bindings), row_seq), performer, attempt)
        )
    if entries:
        batches.append(Batch(protocol.name, seq, tuple(entries)))  # type: ignore[arg-type]
    return batches


def _decode(
    protocol: LangshawProtocol, name: str, bindings: dict[str, Any], seq: int
) -> ActionInstance:
    action = protocol.actions.get(name)
    if action is None or not (
        set(action.attributes) - protocol.optional <= set(bindings) <= set(action.attributes)
    ):
        raise StoreError(
            f"the stored log holds {name!r} (batch {seq}) that does not fit "
            f"{protocol.source}: the protocol changed since this log was written; use a new --db"
        )
    return ActionInstance(action, bindings)


def redact(url: str) -> str:
    """``url`` without its password, to print or log (a path is returned as it is).

    Done on the text rather than through ``urlsplit``, which raises on a
    malformed URL (an unclosed ``[``; ``.port`` on a port that is no number):
    the message saying the URL is wrong must neither crash nor show the password.
    The credentials end at the last ``@`` before the query (or, if there is
    none, the last at all), so a password with an unencoded ``/``, ``?`` or
    ``#`` is hidden whole; a ``password=`` query parameter, which libpq also
    reads, is hidden too."""
    if not is_url(url):
        return url
    scheme, _, rest = url.partition("://")
    userinfo, password = _credentials(rest)
    if password is not None:
        user = userinfo.partition(":")[0]
        rest = f"{user}:***" + rest[len(userinfo) :]
    return f"{scheme}://{_QUERY_PASSWORD.sub(_hidden, rest)}"


def password_of(url: str) -> str | None:
    """The password in a PostgreSQL URL's credentials (as written), if any."""
    if not is_url(url):
        return None
    return _credentials(url.partition("://")[2])[1]


def scrub(text: str, url: str) -> str:
    """``text`` (an error about ``url``) with the URL's passwords hidden: the
    driver's complaint about a malformed URL may quote a piece of it."""
    password = password_of(url)
    secrets = {m.group(2) for m in _QUERY_PASSWORD.finditer(url)} if is_url(url) else set()
    if password:
        secrets |= {password, unquote(password)}
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        # Whole words only: "p" is not to be hidden in "port" (what a password
        # matches inside other words of the URL, the redacted URL shows anyway).
        text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "***", text)
    return text


def _credentials(rest: str) -> tuple[str, str | None]:
    """The user information of a URL's part after ``://``, and its password."""
    query = min((i for i in map(rest.find, "?#") if i >= 0), default=len(rest))
    userinfo, at, _ = rest[:query].rpartition("@")
    if not at:  # none before the query: a "?" or "#" in the password, unencoded?
        userinfo, at, _ = rest.rpartition("@")
    _user, colon, password = userinfo.partition(":")
    return userinfo, password if at and colon else None


_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)


def _hidden(match: re.Match[str]) -> str:
    return match.group(1) + "***"


def is_url(spec: str | Path) -> bool:
    """Whether ``spec`` names a PostgreSQL database rather than a file."""
    return str(spec).startswith(("postgresql://", "postgres://"))
