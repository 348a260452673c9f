"""A hostile review of the rows a commit's notification carries
(syncserver/_pgsql.py ``strabo_append_2``, syncserver/_pgstore.py ``_note`` and
``CarriedRows``, ``SharedFinalizer.heard`` in syncserver/_shared.py).

The tests under "Bugs" are what the review found, fixed since: forged rows, two
schemas hearing each other, a seq from the future believed for good, garbage
raising out of the listener, a rebuild holding batches back. The others pin
what holds: the payload round-trips
whatever the names and values hold, either side of the size limit; batches a
turn writes several at a time are applied whole; garbage on the channel
changes nothing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from syncserver import SyncServer
from syncserver._pgsql import NOTE_BYTES
from syncserver._pgstore import PostgresStore, _note, channel
from syncserver.store import root_text
from tests.syncserver.postgres.test_carried import KEY, Heard, Reads
from tests.syncserver.postgres.test_servers import (
    AGENTS,
    PURCHASE,
    SIMPLE,
    FailingOnce,
    Follower,
    attempt,
    create,
    servers,
)


async def settled(server: SyncServer) -> None:
    """Wait for the server's catch-up task, if one runs (no sleep)."""
    finalizer = server.ledgers[KEY]._shared
    assert finalizer is not None
    while finalizer._following is not None:
        await asyncio.gather(finalizer._following, return_exceptions=True)


async def notify(url: str, payload: str, mas: str = "default") -> None:
    """What any role that can connect to the database may send."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SELECT pg_notify($1, $2)", channel("public", mas), payload)
    finally:
        await conn.close()


def forged(seq: int, cid: str) -> str:
    """A well-formed notification of a Create that is in no log."""
    text = json.dumps(create(cid).bindings, separators=(",", ":"))
    return json.dumps(["default", "SimpleUCP", seq, seq - 1, [[1, 0, "Create", "platform", text,
                                                            None]]])


# Bugs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("signed", ["", "0" * 64 + " "], ids=["unsigned", "badly-signed"])
async def test_a_forged_notification_does_not_enter_the_replica(pg_url: str, signed: str) -> None:
    async with servers(pg_url, 1) as (b,):
        heard = Heard(b)
        follower = Follower(b)
        await notify(pg_url, signed + forged(1, "ghost"))
        # A marker after it (a channel delivers in commit order): once heard,
        # so was the forgery (the unsigned one as a hint of seq 1, which the
        # log then denies; the badly signed one not at all).
        await notify(pg_url, json.dumps(["default", "SimpleUCP", 0]))
        await heard.until(1 if signed else 2)
        await settled(b)
        ledger = b.ledgers[KEY]
        seen = (ledger.committed_seq, follower.seqs)
        follower.stop()
        # The log holds nothing, and a Create of "ghost" is new to it.
        assert await b.store.read("default", SIMPLE, 0, 10) == []
        receipt = await attempt(b, "platform", [create("ghost")], "g1")
        assert not isinstance(receipt, Exception), receipt
        assert seen == (0, [])


async def test_two_deployments_in_two_schemas_stay_apart(pg_url: str) -> None:
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("CREATE SCHEMA one; CREATE SCHEMA two")
    finally:
        await conn.close()
    async with (
        servers(f"{pg_url}?search_path=one", 1) as (a,),
        servers(f"{pg_url}?search_path=two", 1) as (b,),
    ):
        heard = Heard(b)
        assert (await attempt(a, "platform", [create("c1")], "x1")).seq == 1
        # b's own Create of c1 is new to its log: its replica must not refuse it.
        receipt = await attempt(b, "platform", [create("c1")], "y1")
        assert not isinstance(receipt, Exception), receipt
        assert receipt.seq == 1
        # b hears its own commit; on one channel a's, committed first, would
        # have come first (a channel delivers in commit order).
        await heard.until(1)
        [carried] = heard.carried
        assert [e.attempt_id for e in carried.batches(SIMPLE)[0].entries] == ["y1"]
        assert await b.store.read("default", SIMPLE, 0, 10) != []  # b's log holds its own


async def test_a_notification_from_the_future_does_not_cost_every_commit_a_read(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with servers(pg_url, 2) as (a, b):
        heard = Heard(b)
        await notify(pg_url, json.dumps(["default", "SimpleUCP", 10**9]))
        await heard.until(1)
        await settled(b)  # its read found nothing: logged, and believed still
        reads = Reads(monkeypatch, b)
        follower = Follower(b)
        assert (await attempt(a, "platform", [create("c1")], "x1")).seq == 1
        await follower.until(1)
        await settled(b)
        follower.stop()
        assert reads.count == 0  # the batch came with its notification


@pytest.mark.parametrize(
    "payload",
    ['["default", "SimpleUCP", "x"]', '["default", "SimpleUCP", null]',
     '["default", "SimpleUCP", NaN]', '[["default"], "SimpleUCP", 1]'],
)
async def test_a_garbage_seq_is_refused_with_a_warning(payload: str) -> None:
    store = PostgresStore("postgresql://unused")
    told: list[Any] = []
    store._watchers[KEY] = lambda seq, carried=None: told.append(seq)
    store._notified(None, 0, channel("public", "default"), payload)  # must not raise
    assert told == []


async def test_a_rebuild_from_an_empty_replica_publishes_what_it_loads(pg_url: str) -> None:
    async with servers(pg_url, 1) as (a,):
        b = SyncServer.embedded([SIMPLE, PURCHASE], AGENTS, store=FailingOnce(pg_url))
        async with b:
            ledger = b.ledgers[KEY]
            finalizer = ledger._shared
            assert finalizer is not None
            heard = Heard(b)
            follower = Follower(b)
            async with finalizer._lock:  # a turn of b's holds the replica
                assert (await attempt(a, "platform", [create("c1")], "x1")).seq == 1
                await heard.until(1)  # not applied under the turn's feet
                # Its turn runs after this one (a catch-up queued first yields to it).
                lost = asyncio.ensure_future(attempt(b, "platform", [create("x")], "y1"))
            failed = await lost  # the write fails: the replica is rebuilt from the log
            assert isinstance(failed, Exception) and failed.code == "store-failed", failed
            while ledger.rebuilding is not None:
                await asyncio.wait([ledger.rebuilding])
            assert ledger.committed_seq == 1
            # The stream gets batch 1 now, not when some later batch shows the gap
            # (the subscriber then reads it: delayed, not lost).
            try:
                await follower.until(1, seconds=1)
            finally:
                follower.stop()
            assert follower.seqs == [1]


# What holds ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "not json",
        "[]",
        '{"a": 1, "b": 2, "c": 3}',
        '["default", "SimpleUCP", 1, 0]',
        '["default", "SimpleUCP", 1, "zero", []]',
        '["default", "SimpleUCP", 1, 0, "rows"]',
        '["default", "SimpleUCP", 1, 0, {"a": 1}]',
        '["default", "SimpleUCP", 1, 0, [[1, 0, "Nope", "platform", "{}", null]]]',
        '["default", "SimpleUCP", 1, 0, [[1, 0, "Create", "platform", "{oops", null]]]',
        '["default", "SimpleUCP", 1, 0, [[1, 0, "Create"]]]',
        '["default", "SimpleUCP", 1, 0, [["one", 0, "Create", "platform", "{}", null]]]',
    ],
)
async def test_garbage_on_the_channel_changes_nothing(pg_url: str, payload: str) -> None:
    """Then a real commit is still applied as it comes."""
    async with servers(pg_url, 2) as (a, b):
        follower = Follower(b)
        await notify(pg_url, payload)  # delivered before a's commit: one channel, in order
        assert (await attempt(a, "platform", [create("c1")], "x1")).seq == 1
        await follower.until(1)
        await settled(b)
        follower.stop()
        assert follower.seqs == [1]
        ledger = b.ledgers[KEY]
        assert ledger.committed_seq == 1 and not ledger.stale and ledger.rebuilding is None
        again = await attempt(b, "platform", [create("c1")], "x2")  # b holds a's Create
        assert isinstance(again, Exception) and again.code == "duplicate", again


ODD = 'we"ird \\ m\u00e4s \u2028 \U0001f600 \n\t'


class Listening:
    """A store opened on the test's database, watching one ledger, and a raw
    listener on its channel (the payloads as sent)."""

    def __init__(self, url: str, mas: str) -> None:
        self.url, self.mas = url, mas
        self.store = PostgresStore(url)
        self.heard: list[tuple[int, Any]] = []
        self.payloads: list[str] = []
        self.changed = asyncio.Event()

    async def __aenter__(self) -> Listening:
        await self.store.open()
        await self.store.watch(self.mas, "SimpleUCP", self._hear)
        self.raw = await asyncpg.connect(self.url)
        await self.raw.add_listener(channel("public", self.mas), self._raw)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.raw.close()
        await self.store.close()

    def _hear(self, seq: int, carried: Any = None) -> None:
        self.heard.append((seq, carried))
        self.changed.set()

    def _raw(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.payloads.append(payload)
        self.changed.set()

    async def until(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.heard) < count or len(self.payloads) < count:
                self.changed.clear()
                await self.changed.wait()


def rows_for(bindings: list[tuple[int, dict[str, Any], str | None]]) -> list[Any]:
    """The rows of ``append_apart``: (rel, idx, root, action, performer, text, id)."""
    rows: list[Any] = []
    idx: dict[int, int] = {}
    for rel, values, key in bindings:
        i = idx[rel] = idx.get(rel, -1) + 1
        text = json.dumps(values, separators=(",", ":"))
        rows.append((rel, i, root_text((values["cid"],)), "Create", "pl\u00e4tform", text, key))
    return rows


def same(carried: list[Any], stored: list[Any]) -> None:
    """Carried batches equal the log's: seqs, entries, and the bindings' text."""
    assert [b.seq for b in carried] == [b.seq for b in stored]
    for mine, theirs in zip(carried, stored, strict=True):
        assert [(e.instance.action.name, e.instance.bindings, e.performer, e.attempt_id,
                 e._json) for e in mine.entries] == [
            (e.instance.action.name, e.instance.bindings, e.performer, e.attempt_id, e._json)
            for e in theirs.entries]


@pytest.mark.parametrize("mas", ["default", ODD, "\u00e9" * 500])
async def test_odd_names_and_values_round_trip(pg_url: str, mas: str) -> None:
    """Quotes, backslashes, non-ASCII, a line separator, an astral character, in
    the MAS's name and the bindings; ids null and set; two batches, the first
    of two entries (relative seqs)."""
    odd = [create(f"c{i}{ODD}").bindings for i in range(3)]
    rows = rows_for([(1, odd[0], "id-1"), (1, odd[1], "id-1"), (2, odd[2], None)])
    async with Listening(pg_url, mas) as watching:
        found = await watching.store.append_apart(mas, SIMPLE, 0, rows, ())
        assert found.last_seq == 0 and not found.clash
        await watching.until(1)
        [(seq, carried)] = watching.heard
        assert seq == 2 and carried is not None and carried.first == 1
        same(carried.batches(SIMPLE), await watching.store.read(mas, SIMPLE, 0, 2))
        # A second commit: relative to the last seq before it.
        more = rows_for([(1, create("d").bindings, None)])
        await watching.store.append_apart(mas, SIMPLE, 2, more, ())
        await watching.until(2)
        seq, carried = watching.heard[1]
        assert seq == 3 and carried is not None and carried.first == 3
        same(carried.batches(SIMPLE), await watching.store.read(mas, SIMPLE, 2, 3))


def padded(size: int) -> list[Any]:
    """One row whose note (``_note``) is ``size`` characters long."""
    base = create("").bindings
    pad = 0
    while True:
        rows = rows_for([(1, {**base, "cid": "x" * pad}, "k")])
        note = json.dumps([(r[0], r[1], *r[3:]) for r in rows], separators=(",", ":"))
        if len(note) == size:
            return rows
        assert len(note) < size
        pad += size - len(note)


@pytest.mark.parametrize("mas", ["default", "\u00e9" * 1000])
@pytest.mark.parametrize("delta", [-2, -1, 0, 1])
async def test_the_size_limit_either_side(pg_url: str, mas: str, delta: int) -> None:
    """A note that fits is carried whole; one that does not is left out, and the
    commit still succeeds; no payload reaches PostgreSQL's 8000 bytes. The
    limit counts the names too, in bytes (a 2-byte character each)."""
    head = len(json.dumps([mas, "SimpleUCP", 1], ensure_ascii=False).encode())
    size = NOTE_BYTES - head + delta  # the SQL's test: head + note < NOTE_BYTES
    rows = padded(size)
    assert _note(rows) is not None
    async with Listening(pg_url, mas) as watching:
        await watching.store.append_apart(mas, SIMPLE, 0, rows, ())
        await watching.until(1)
        [(seq, carried)] = watching.heard
        [payload] = watching.payloads
        assert seq == 1 and len(payload.encode()) < 8000
        if delta < 0:
            assert carried is not None
            same(carried.batches(SIMPLE), await watching.store.read(mas, SIMPLE, 0, 1))
        else:
            assert carried is None
    assert _note(padded(NOTE_BYTES - 1)) is not None and _note(padded(NOTE_BYTES)) is None


async def test_a_window_of_several_batches_is_applied_from_one_notification(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batched: one turn (a transaction: PostgresStore.turn) writes a window cut
    into several batches; the other server applies them all as they come."""
    monkeypatch.setattr("syncserver._window.WINDOW_BATCH_BYTES", 1)  # a batch per attempt
    async with servers(pg_url, 2, policy="batched", batch_window_ms=20) as (a, b):
        reads = Reads(monkeypatch, b)
        heard = Heard(b)
        follower = Follower(b)
        receipts = await asyncio.gather(
            *(attempt(a, "platform", [create(f"w{i}")], f"w{i}") for i in range(3))
        )
        assert sorted(r.seq for r in receipts) == [1, 2, 3]
        await follower.until(3)
        await settled(b)
        follower.stop()
        assert follower.seqs == [1, 2, 3] and reads.count == 0
        assert [c.first for c in heard.carried if c is not None] == [1]
        assert b.ledgers[KEY].committed_seq == 3
        again = await attempt(b, "platform", [create("w2")], "again")
        assert isinstance(again, Exception) and again.code == "duplicate", again


async def test_a_follow_read_in_flight_yields_to_carried_batches(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b reads the log (a catch-up) while the next commits' batches come with
    their notifications and are applied: what the read brings is dropped, and
    the stream gets each batch once, in order."""
    async with servers(pg_url, 2) as (a, b):
        store = b.store
        assert isinstance(store, PostgresStore)
        real = store.read
        reading, release = asyncio.Event(), asyncio.Event()

        async def read(*args: Any) -> Any:
            found = await real(*args)
            reading.set()
            await release.wait()  # held while the carried batches come
            return found

        monkeypatch.setattr(store, "read", read)
        heard = Heard(b)
        follower = Follower(b)
        assert (await attempt(a, "platform", [create("c1")], "x1")).seq == 1
        await heard.until(1)
        ledger, finalizer = b.ledgers[KEY], b.ledgers[KEY]._shared
        assert finalizer is not None and ledger.committed_seq == 1  # carried: applied
        assert (await attempt(a, "platform", [create("c2")], "x2")).seq == 2
        await heard.until(2)
        assert ledger.committed_seq == 2
        # A hint of a batch b has not got (as a poll gives): b reads, held in the read.
        finalizer._known = 3
        finalizer._catch_up()
        async with asyncio.timeout(10):
            await reading.wait()
        assert (await attempt(a, "platform", [create("c3")], "x3")).seq == 3
        await heard.until(3)
        assert ledger.committed_seq == 3  # applied while the read is in flight
        release.set()
        await settled(b)
        await follower.until(3)
        follower.stop()
        assert follower.seqs == [1, 2, 3] and ledger.committed_seq == 3
