"""An agent's own log when it enacts peer to peer: SQLite on disk, or memory.

The log holds, per protocol and in the order this agent accepted them, the
messages it performed or received; the outbox holds, for each message it
performed, the peers that have not acknowledged it yet. A message and its
outbox rows are written in one transaction before anyone hears of it, so a
restarted agent rebuilds its state from the log and re-sends what no peer
acknowledged: nothing acknowledged is lost, nothing is sent that was not kept.
Refusals are kept too, and with each refusal of a peer's message the verdict
(the answer given, and the refused instances' identities) in the same
transaction, before the peer hears of it: a restarted agent answers that
message the same way and refuses what follows it (the memory store keeps
them as long as the store object lives).

Writes are short (WAL, ``synchronous=NORMAL``: durable against the process
dying) and run on the event loop, as the SyncServer's do. The one connection
holds the file's lock while the store is open (``locking_mode=EXCLUSIVE``): an
agent's log has one writer. A transaction costs
more than the rows in it (on the benchmark machine about 55 to 60 us for an
attempt's, received message included, in a process that was idle before it,
against 5 to 10 us per row more), so they are grouped where no guarantee needs
them apart:

* an attempt is one transaction, committed before ``attempt()`` returns;
* what one request from a peer brings (its accepted messages, the verdicts on
  those it refused) is one transaction, committed before the answer is sent:
  the receiver queues each write (``now=False``) and :meth:`commit` writes them
  all at the end of the request. A commit that fails (a full disk) leaves them
  queued, for the next commit to write first, and the answer says "busy" for
  every message: nothing is acknowledged that is not written;
* acknowledgements are written with the next request's transaction (or when
  the store closes), or with an attempt's once ``ACKS_AT_ONCE`` wait (an
  attempt's is on its way to the peers: it carries no more than it must): one
  that is lost (the process dies first) only has the message sent again, and
  its receiver answers it as a duplicate.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import sqlite3
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

log = logging.getLogger("strabo.peach.peer")

#: Acknowledgements an attempt's transaction leaves for a later one, at most
#: (each costs that transaction a DELETE; lost to a crash, a message is sent
#: again and answered as a duplicate).
ACKS_AT_ONCE = 64


@dataclass(frozen=True, slots=True)
class Record:
    """One message of the log: instances accepted together under a local seq."""

    protocol: str
    seq: int
    performer: str
    instances: list[dict[str, Any]]  # [{"action": ..., "bindings": {...}}]
    context: list[list[Any]]  # identities the performer knew, as JSON
    # ``instances`` and ``context`` as JSON text once encoded (:meth:`as_json`).
    encoded: list[str] = field(default_factory=list, compare=False, repr=False)

    def as_json(self) -> tuple[str, str]:
        """The instances and the context as JSON text, encoded once: an agent's
        own message goes to its log and to each peer (and again if resent)."""
        if not self.encoded:
            self.encoded.extend((_dump(self.instances), _dump(self.context)))
        return self.encoded[0], self.encoded[1]

    def describe(self) -> str:
        """The instances, short enough for a log line."""
        parts = []
        for item in self.instances:
            bindings = json.dumps(item["bindings"], sort_keys=True)
            shown = bindings if len(bindings) < 80 else bindings[:77] + "..."
            parts.append(f"{item['action']} {shown}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A peer refused a message this agent performed (or this agent refused one)."""

    protocol: str
    seq: int
    peer: str
    rule: str
    message: str
    incoming: bool  # True when this agent refused a peer's message


@dataclass(frozen=True, slots=True)
class Verdict:
    """This agent refused the message ``seq`` of ``sender``: the ``answer`` it
    gave (given again if the message comes again) and the ``identities`` of
    its instances (``[action, [key values]]``; what follows them is refused)."""

    protocol: str
    sender: str
    seq: int
    answer: dict[str, Any]
    identities: list[list[Any]]


class PeerStoreError(Exception):
    """The store cannot be opened, or holds a log of another agent."""


class PeerStore:
    """The memory store (and the interface the SQLite one implements)."""

    def __init__(self) -> None:
        self.agent: str | None = None
        self._log: list[Record] = []
        self._outbox: set[tuple[str, int, str]] = set()
        self._refusals: list[Refusal] = []
        self._verdicts: list[Verdict] = []

    def open(self, agent: str) -> None:
        if self.agent is not None and self.agent != agent:
            raise PeerStoreError(
                f"this store holds the log of agent {self.agent!r}, not {agent!r}: "
                "give each agent a store of its own"
            )
        self.agent = agent

    def close(self) -> None:
        """Nothing to release (a memory store outlives its executor, for tests)."""

    def load(self) -> list[Record]:
        return list(self._log)

    def outbox(self) -> list[tuple[str, int, str]]:
        return sorted(self._outbox)

    def refusals(self) -> list[Refusal]:
        return list(self._refusals)

    def verdicts(self) -> list[Verdict]:
        """The verdicts on peers' messages this agent refused, oldest first."""
        return list(self._verdicts)

    def append(self, record: Record, recipients: list[str], *, now: bool = True) -> None:
        """Keep a message and its outbox rows: written at once, or with ``now``
        False at the next :meth:`commit` (a memory store has nothing to wait for)."""
        self._log.append(record)
        self._outbox.update((record.protocol, record.seq, r) for r in recipients)

    def acknowledged(self, protocol: str, seq: int, peer: str) -> None:
        self._outbox.discard((protocol, seq, peer))

    def commit(self, acks: bool = True) -> None:
        """Write what was kept with ``now=False`` (raises if it cannot: it stays
        queued for the next commit), and the acknowledgements unless ``acks``
        is False."""

    def refused(
        self, refusal: Refusal, verdict: Verdict | None = None, *, now: bool = True
    ) -> None:
        """Keep a refusal (and, for a peer's message, this agent's verdict)."""
        self._refusals.append(refusal)
        if verdict is not None:
            self._verdicts.append(verdict)
        if not refusal.incoming:
            self._outbox.discard((refusal.protocol, refusal.seq, refusal.peer))


_SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
    protocol TEXT NOT NULL,
    seq INTEGER NOT NULL,
    performer TEXT NOT NULL,
    instances TEXT NOT NULL,
    context TEXT NOT NULL,
    PRIMARY KEY (protocol, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (
    protocol TEXT NOT NULL,
    seq INTEGER NOT NULL,
    peer TEXT NOT NULL,
    PRIMARY KEY (protocol, seq, peer)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refusals (
    protocol TEXT NOT NULL,
    seq INTEGER NOT NULL,
    peer TEXT NOT NULL,
    rule TEXT NOT NULL,
    message TEXT NOT NULL,
    incoming INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS verdicts (
    protocol TEXT NOT NULL,
    sender TEXT NOT NULL,
    seq INTEGER NOT NULL,
    answer TEXT NOT NULL,
    identities TEXT NOT NULL,
    PRIMARY KEY (protocol, sender, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


# One encoder for every write (json.dumps with options builds one per call).
_dump = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class SQLitePeerStore(PeerStore):
    """The durable store: one SQLite file per agent."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._queued: list[tuple[str, tuple[Any, ...]]] = []  # statements not yet committed
        self._acks: list[tuple[str, int, str]] = []  # outbox rows to delete, next commit

    def open(self, agent: str) -> None:
        # Opened again (an executor whose start failed after it opened its log,
        # started anew): this store's own connection holds the file's lock, and
        # a second one would be refused as if another process held it.
        self.close()
        if not self.path.parent.exists():
            raise PeerStoreError(f"{self.path}: directory {self.path.parent} does not exist")
        db: sqlite3.Connection | None = None
        try:
            # No wait for a lock: this store keeps its file's for as long as it is open.
            db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=0
            )
            # One connection writes an agent's log, for good: it holds the file's
            # lock from the start (a second process would interleave its messages
            # with this one's; it is refused instead), and its transactions skip
            # the shared WAL index's locks (kept in memory: no -shm file), about
            # 6 us of the 45 a one-message commit costs (docs/performance.md).
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("BEGIN EXCLUSIVE")
            db.executescript(_SCHEMA)  # commits the transaction: the lock stays
            row = db.execute("SELECT value FROM meta WHERE key = 'agent'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('agent', ?)", (agent,))
            elif row[0] != agent:
                db.close()
                raise PeerStoreError(
                    f"{self.path} holds the log of agent {row[0]!r}, not {agent!r}: "
                    "give each agent a file of its own"
                )
        except sqlite3.Error as exc:
            if db is not None:
                db.close()
            if "locked" in str(exc):
                raise PeerStoreError(
                    f"{self.path} is open in another agent process (or another store "
                    "of this one): an agent's log has one writer; stop the other first"
                ) from None
            raise PeerStoreError(f"{self.path}: cannot open the database: {exc}") from None
        self._db = db
        self.agent = agent
        rows = db.execute(
            "SELECT protocol, seq, peer, rule, message, incoming FROM refusals ORDER BY rowid"
        ).fetchall()
        # Kept in memory too, so that they can be read after the agent stopped.
        self._refusals = [Refusal(p, s, peer, rule, m, bool(i)) for p, s, peer, rule, m, i in rows]

    def close(self) -> None:
        """Write what is queued (acknowledgements, mostly), then close."""
        if self._db is not None:
            try:
                self.commit()
            except sqlite3.Error as exc:  # lost: resent, answered as duplicates
                log.warning("%s: could not write before closing: %s", self.path, exc)
            self._db.close()
            self._db = None
        self._queued, self._acks = [], []

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise PeerStoreError(f"{self.path} is not open")
        return self._db

    def load(self) -> list[Record]:
        rows = self.db.execute(
            "SELECT protocol, seq, performer, instances, context FROM log ORDER BY protocol, seq"
        ).fetchall()
        return [
            Record(p, seq, performer, json.loads(i), json.loads(c), [i, c])
            for p, seq, performer, i, c in rows
        ]

    def outbox(self) -> list[tuple[str, int, str]]:
        rows = self.db.execute("SELECT protocol, seq, peer FROM outbox ORDER BY 1, 2, 3")
        return [(p, s, r) for p, s, r in rows.fetchall()]

    def verdicts(self) -> list[Verdict]:
        rows = self.db.execute(
            "SELECT protocol, sender, seq, answer, identities FROM verdicts ORDER BY 1, 2, 3"
        )
        return [
            Verdict(p, sender, seq, json.loads(a), json.loads(i))
            for p, sender, seq, a, i in rows.fetchall()
        ]

    def append(self, record: Record, recipients: list[str], *, now: bool = True) -> None:
        rows = [
            (
                "INSERT INTO log VALUES (?, ?, ?, ?, ?)",
                (record.protocol, record.seq, record.performer, *record.as_json()),
            ),
            *(
                ("INSERT INTO outbox VALUES (?, ?, ?)", (record.protocol, record.seq, r))
                for r in recipients
            ),
        ]
        self._write(rows, now)

    def acknowledged(self, protocol: str, seq: int, peer: str) -> None:
        self._acks.append((protocol, seq, peer))

    def refused(
        self, refusal: Refusal, verdict: Verdict | None = None, *, now: bool = True
    ) -> None:
        rows: list[tuple[str, tuple[Any, ...]]] = [
            (
                "INSERT INTO refusals VALUES (?, ?, ?, ?, ?, ?)",
                (
                    refusal.protocol,
                    refusal.seq,
                    refusal.peer,
                    refusal.rule,
                    refusal.message,
                    int(refusal.incoming),
                ),
            )
        ]
        if verdict is not None:  # encoded first: a failure writes nothing
            rows.append(
                (
                    "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?)",
                    (
                        verdict.protocol,
                        verdict.sender,
                        verdict.seq,
                        _dump(verdict.answer),
                        _dump(verdict.identities),
                    ),
                )
            )
        if not refusal.incoming:
            rows.append(
                (
                    "DELETE FROM outbox WHERE protocol = ? AND seq = ? AND peer = ?",
                    (refusal.protocol, refusal.seq, refusal.peer),
                )
            )
        self._write(rows, now)
        self._refusals.append(refusal)  # once written, or queued to be

    def _write(self, rows: list[tuple[str, tuple[Any, ...]]], now: bool) -> None:
        """Queue ``rows``; with ``now``, commit, and if that fails take them back
        out of the queue (what was queued before stays) and raise."""
        if self._db is None:  # before anything is queued
            raise PeerStoreError(f"{self.path} is not open")
        self._queued.extend(rows)
        if not now:
            return
        try:
            # An attempt's own transaction is on its way to the peers: the
            # acknowledgements wait for the next request's (or for a few).
            self.commit(acks=len(self._acks) >= ACKS_AT_ONCE)
        except BaseException:
            del self._queued[len(self._queued) - len(rows) :]
            raise

    def commit(self, acks: bool = True) -> None:
        """Write what is queued in one transaction, with the acknowledgements
        unless ``acks`` is False (they wait for a later one)."""
        written = self._acks if acks else []
        if not self._queued and not written:
            return
        db = self.db
        try:
            if len(self._queued) == 1 and not written:  # its own transaction: no BEGIN
                db.execute(*self._queued[0])
            else:
                db.execute("BEGIN")
                for statement, group in itertools.groupby(self._queued, key=itemgetter(0)):
                    db.executemany(statement, [parameters for _, parameters in group])
                if written:
                    db.executemany(
                        "DELETE FROM outbox WHERE protocol = ? AND seq = ? AND peer = ?",
                        written,
                    )
                db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
        self._queued = []
        if acks:
            self._acks = []


def open_peer_store(spec: str | Path | PeerStore | None) -> PeerStore:
    """A store from a path (SQLite), ``":memory:"`` or None (memory), or as given."""
    if isinstance(spec, PeerStore):
        return spec
    if spec is None or str(spec) == ":memory:":
        return PeerStore()
    return SQLitePeerStore(spec)
