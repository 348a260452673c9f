"""The durable store: the log in one SQLite file, in WAL mode.

A commit appends to the write-ahead log; checkpoints copy the log into the
database file so that the log can start over. SQLite leaves the WAL as long as
its longest run without a complete checkpoint, and under steady writes a
checkpoint running beside the writer never completes: so this store bounds the
WAL itself (``wal_limit``, checked by ``tests/syncserver/test_sqlite.py`` and
measured by ``bench/syncserver.py --history``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langshaw import LangshawProtocol
from syncserver.batch import Batch
from syncserver.store import Store, StoreError, batches_of, root_text, rows_of

log = logging.getLogger("strabo.syncserver")

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
# Without statistics SQLite's planner prefers the primary key's (mas, protocol)
# prefix to the indexes, scanning the whole ledger: each lookup names its index
# (and fails loudly, rather than scanning, should the index be missing).
_BY_ROOT = "INDEXED BY instances_by_root"
# Each index costs every commit a page write (about 10 us of the 55): attempt
# ids, looked up only when an attempt is refused or resent, are found through
# their enactment's rows rather than an index of their own.


#: The WAL's bound by default, in bytes.
WAL_LIMIT = 8 * 2**20


def _most_written(rows: list[tuple[Any, ...]], frame: int) -> int:
    """The most bytes a commit of ``rows`` adds to the WAL: a few pages a row
    (the table's leaf, the index's, a split), and its text twice over (the row
    holds it all, the root index its names and root key again), in whole
    frames (a page's header on top of its payload). The bindings and the root
    are ASCII JSON; the other texts are measured in UTF-8."""
    text = 0
    for mas, protocol, _seq, _idx, root, action, performer, bindings, attempt in rows:
        text += len(root) + len(bindings) + len(
            f"{mas}{protocol}{action}{performer}{attempt or ''}".encode()
        )
    return len(rows) * 8 * frame + 2 * text * frame // (frame - 64)


class SQLiteStore(Store):
    """The durable store: one SQLite file in WAL mode.

    ``synchronous='normal'`` (the default) makes a commit durable against the
    process dying (``kill -9``), which is what an acknowledgement promises. Such a
    commit is a write to the WAL without fsync, so it is done right away on the
    event loop, and checkpoints (which do sync) run on a worker thread.
    ``'full'`` also survives power loss, at the price of an fsync per commit; its
    commits run on the worker thread. Reads always run there, on a connection of
    their own.

    The WAL stays within ``wal_limit`` bytes: every ``checkpoint_rows`` rows a
    checkpoint runs beside the writer; when one could not finish (the writer
    went on) and the WAL has reached half the limit, the writer finishes it
    itself, between two commits, so that the WAL starts over (and is cut back
    to the limit, ``journal_size_limit``).
    """

    def __init__(
        self,
        path: str | Path,
        synchronous: str = "normal",
        checkpoint_rows: int = 256,
        wal_limit: int = WAL_LIMIT,
    ) -> None:
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self.path = Path(path)
        self.synchronous = synchronous
        self.synchronous_append = synchronous == "normal"
        self.checkpoint_rows = checkpoint_rows
        self.wal_limit = wal_limit
        self._wal = self.path.with_name(self.path.name + "-wal")
        self._db: sqlite3.Connection | None = None  # the writer
        self._reader: sqlite3.Connection | None = None  # reads and checkpoints
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strabo-sqlite")
        self._rows_since_checkpoint = 0
        self._beside: Future[bool] | None = None  # a checkpoint on the worker thread
        self._finish_checkpoint = False  # the last one beside the writer fell short
        self._over_limit = False  # the WAL is past its bound, and could not be cut
        # The WAL's size when last looked at, and what commits since may have
        # added at most: its file is looked at only when that could pass the bound.
        self._wal_seen = 0
        self._wal_added = 0
        self._frame = 4096 + 24  # a WAL frame: a page and its header (set at open)

    async def _run(self, fn: Any, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, fn, *args)

    async def open(self) -> None:
        await self._run(self._open)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        db.execute(f"PRAGMA journal_size_limit={int(self.wal_limit)}")
        return db

    def _open(self) -> None:
        try:
            if self.path.parent and not self.path.parent.exists():
                raise StoreError(f"{self.path}: directory {self.path.parent} does not exist")
            db = self._connect()
            # A new file's pages: a commit writes a few (the table's, each
            # index's) to the WAL whole, and smaller ones cost less to write.
            db.execute("PRAGMA page_size=2048")
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
            self._frame = db.execute("PRAGMA page_size").fetchone()[0] + 24
            self._reader = self._connect()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the database: {exc}") from None
        self._db = db

    async def close(self) -> None:
        if self._beside is not None:
            await asyncio.gather(asyncio.wrap_future(self._beside), return_exceptions=True)
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
            await self._run(self._append_full, self._rows(mas, protocol, batches))
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
        beside = self._beside
        if beside is not None and beside.done():
            self._beside = None
            self._finish_checkpoint = beside.exception() is None and beside.result()
        if self._finish_checkpoint and self._beside is None:
            # Between two commits, nothing writes: this one completes (a reader
            # reading right now may hold it back: then the next commit tries).
            self._finish_checkpoint = self._checkpoint_now(self._db)
        self._wal_added += _most_written(rows, self._frame)
        if self._wal_seen + self._wal_added > self.wal_limit:
            self._bound()
        self._rows_since_checkpoint += len(rows)
        if self._rows_since_checkpoint >= self.checkpoint_rows and self._beside is None:
            self._rows_since_checkpoint = 0
            self._beside = self._thread.submit(self._checkpoint_now, None)

    def _append_full(self, rows: list[tuple[Any, ...]]) -> None:
        """Write and count rows on the worker thread, which also reads: its
        checkpoints run between commits and reads, so they complete."""
        self._append(rows)
        self._rows_since_checkpoint += len(rows)
        if self._rows_since_checkpoint >= self.checkpoint_rows:
            self._rows_since_checkpoint = 0
            self._checkpoint_now(self._db)
        self._bound()

    def _bound(self) -> None:
        """The last resort: the WAL passed its bound (checkpoints beside the
        writer were starved, or a reader held them back), so the writer waits for
        the checkpoint and readers in flight, and truncates the WAL. The file only
        shrinks when truncated, so its size is the most the WAL held since."""
        self._wal_added = 0
        try:
            size = self._wal_seen = os.stat(self._wal).st_size
        except OSError:
            return
        if size <= self.wal_limit:
            self._over_limit = False
            return
        assert self._db is not None, "store is not open"
        if self._beside is not None:  # one checkpoint at a time: wait for it
            with contextlib.suppress(Exception):
                self._beside.result()
        try:
            busy = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.Error:
            busy = 1
        if busy and not self._over_limit:  # said once, not at every commit
            log.warning("%s: the WAL holds %d bytes and cannot be truncated yet", self.path, size)
        self._over_limit = bool(busy)

    def _checkpoint_now(self, db: sqlite3.Connection | None) -> bool:
        """A passive checkpoint on ``db`` (the reader's connection if None);
        whether the writer should finish it: it fell short, and the WAL, which
        starts over only after a complete one, has reached half its bound."""
        db = db or self._reader
        assert db is not None, "store is not open"
        try:
            _busy, frames, done = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            log.warning("checkpoint of %s failed: %s", self.path, exc)
            return False
        return bool(done < frames and frames * self._frame >= self.wal_limit // 2)

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
        self,
        protocol: LangshawProtocol,
        where: str,
        args: tuple[Any, ...],
        index: str = "",
        limit: int | None = None,
    ) -> list[Batch]:
        sql = select_sql(where, index) + ("" if limit is None else f" LIMIT {int(limit)}")
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
        return await self._query(
            protocol, "AND root = ?", (mas, protocol.name, root_text(root)), _BY_ROOT
        )

    async def enactment_page(
        self, mas: str, protocol: LangshawProtocol, root: tuple[Any, ...], after: int, limit: int
    ) -> tuple[list[Batch], bool]:
        # One more row than asked: the last batch may be cut, or more may follow.
        batches = await self._query(
            protocol,
            "AND root = ? AND seq > ?",
            (mas, protocol.name, root_text(root), after),
            _BY_ROOT,
            limit + 1,
        )
        if sum(len(b.entries) for b in batches) <= limit:
            return batches, False
        if len(batches) == 1:  # one batch larger than a page: given whole
            [batch] = await self._query(
                protocol,
                "AND root = ? AND seq = ?",
                (mas, protocol.name, root_text(root), batches[0].seq),
                _BY_ROOT,
            )
            return [batch], await self._any_after(protocol, mas, root, batch.seq)
        return batches[:-1], True

    async def _any_after(
        self, protocol: LangshawProtocol, mas: str, root: tuple[Any, ...], seq: int
    ) -> bool:
        later = await self._query(
            protocol, "AND root = ? AND seq > ?", (mas, protocol.name, root_text(root), seq),
            _BY_ROOT, 1,
        )  # fmt: skip
        return bool(later)

    async def find_attempt(
        self,
        mas: str,
        protocol: LangshawProtocol,
        attempt_id: str,
        performer: str,
        root: tuple[Any, ...],
    ) -> Batch | None:
        batches = await self._query(
            protocol,
            "AND root = ? AND performer = ? AND attempt_id = ?",
            (mas, protocol.name, root_text(root), performer, attempt_id),
            _BY_ROOT,
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


def select_sql(where: str, index: str = "") -> str:
    """The query reading rows of one ledger, ``where`` narrowing it (tests read
    its plan: every lookup but a whole ledger's goes through an index)."""
    return (
        f"SELECT {_COLUMNS} FROM instances {index} WHERE mas = ? AND protocol = ? {where} "
        "ORDER BY seq, idx"
    )
