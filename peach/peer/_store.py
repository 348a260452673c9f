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
dying) and run on the event loop, as the SyncServer's do.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Record:
    """One message of the log: instances accepted together under a local seq."""

    protocol: str
    seq: int
    performer: str
    instances: list[dict[str, Any]]  # [{"action": ..., "bindings": {...}}]
    context: list[list[Any]]  # identities the performer knew, as JSON

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

    def append(self, record: Record, recipients: list[str]) -> None:
        self._log.append(record)
        self._outbox.update((record.protocol, record.seq, r) for r in recipients)

    def acknowledged(self, protocol: str, seq: int, peer: str) -> None:
        self._outbox.discard((protocol, seq, peer))

    def refused(self, refusal: Refusal, verdict: Verdict | None = None) -> None:
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


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


class SQLitePeerStore(PeerStore):
    """The durable store: one SQLite file per agent."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None

    def open(self, agent: str) -> None:
        if not self.path.parent.exists():
            raise PeerStoreError(f"{self.path}: directory {self.path.parent} does not exist")
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
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
            raise PeerStoreError(f"{self.path}: cannot open the database: {exc}") from None
        self._db = db
        self.agent = agent
        rows = db.execute(
            "SELECT protocol, seq, peer, rule, message, incoming FROM refusals ORDER BY rowid"
        ).fetchall()
        # Kept in memory too, so that they can be read after the agent stopped.
        self._refusals = [Refusal(p, s, peer, rule, m, bool(i)) for p, s, peer, rule, m, i in rows]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

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
            Record(p, seq, performer, json.loads(i), json.loads(c))
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

    def append(self, record: Record, recipients: list[str]) -> None:
        db = self.db
        with db:
            db.execute("BEGIN")
            db.execute(
                "INSERT INTO log VALUES (?, ?, ?, ?, ?)",
                (
                    record.protocol,
                    record.seq,
                    record.performer,
                    _dump(record.instances),
                    _dump(record.context),
                ),
            )
            db.executemany(
                "INSERT INTO outbox VALUES (?, ?, ?)",
                [(record.protocol, record.seq, r) for r in recipients],
            )

    def acknowledged(self, protocol: str, seq: int, peer: str) -> None:
        self.db.execute(
            "DELETE FROM outbox WHERE protocol = ? AND seq = ? AND peer = ?", (protocol, seq, peer)
        )

    def refused(self, refusal: Refusal, verdict: Verdict | None = None) -> None:
        db = self.db
        answer = identities = ""
        if verdict is not None:  # encoded first: a failure writes nothing
            answer, identities = _dump(verdict.answer), _dump(verdict.identities)
        with db:
            db.execute("BEGIN")
            db.execute(
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
            if verdict is not None:
                db.execute(
                    "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?)",
                    (verdict.protocol, verdict.sender, verdict.seq, answer, identities),
                )
            if not refusal.incoming:
                db.execute(
                    "DELETE FROM outbox WHERE protocol = ? AND seq = ? AND peer = ?",
                    (refusal.protocol, refusal.seq, refusal.peer),
                )
        self._refusals.append(refusal)  # once written


def open_peer_store(spec: str | Path | PeerStore | None) -> PeerStore:
    """A store from a path (SQLite), ``":memory:"`` or None (memory), or as given."""
    if isinstance(spec, PeerStore):
        return spec
    if spec is None or str(spec) == ":memory:":
        return PeerStore()
    return SQLitePeerStore(spec)
