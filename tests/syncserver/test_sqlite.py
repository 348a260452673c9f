"""The SQLite store at any history length: its lookups go through indexes (the
plans are pinned here, read from the statements the store really runs), and its
write-ahead log stays within its bound."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from langshaw import ActionInstance
from syncserver import SQLiteStore
from syncserver.batch import Batch, Entry
from tests.conftest import SIMPLE_CREATE, load

SIMPLE = load("atomic-ucp.lsh")


def create(seq: int, attempt_id: str | None = None) -> Batch:
    instance = ActionInstance(SIMPLE.actions["Create"], {"cid": f"c{seq}", **SIMPLE_CREATE})
    return Batch(SIMPLE.name, seq, (Entry(instance, "platform", attempt_id),))


async def test_lookups_use_their_indexes(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "log.db")
    await store.open()
    try:
        store.append_now("m", SIMPLE, [create(seq, f"a{seq}") for seq in range(1, 50)])
        statements: list[str] = []
        assert store._reader is not None
        store._reader.set_trace_callback(statements.append)
        [by_root] = await store.by_root("m", SIMPLE, ("c7",))
        found = await store.find_attempt("m", SIMPLE, "a9", "platform", ("c9",))
        assert by_root.seq == 7 and found is not None and found.seq == 9
        store._reader.set_trace_callback(None)
        selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        assert len(selects) == 2
        plans = []
        with sqlite3.connect(tmp_path / "log.db") as db:
            for sql in selects:
                plan = " / ".join(row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql))
                plans.append(plan)
        # An equality search on each index, and no sort: nothing scans the ledger.
        assert plans == [
            "SEARCH instances USING INDEX instances_by_root (mas=? AND protocol=? AND root=?)",
            "SEARCH instances USING INDEX instances_by_root (mas=? AND protocol=? AND root=?)",
        ]
    finally:
        await store.close()


@pytest.mark.parametrize("yields", [False, True], ids=["busy-loop", "yielding"])
async def test_the_wal_stays_within_its_bound(tmp_path, yields: bool) -> None:
    """Without the bound, each one-row commit adds about 12 KB to the WAL for
    good (the checkpoints beside the writer never complete under steady writes):
    3000 commits would leave more than 30 MB. A writer that never yields never
    sees the checkpoints beside it end; one that does runs beside them."""
    limit = 1 << 20
    store = SQLiteStore(tmp_path / "log.db", checkpoint_rows=64, wal_limit=limit)
    await store.open()
    wal = tmp_path / "log.db-wal"
    largest = 0
    try:
        for seq in range(1, 3001):
            store.append_now("m", SIMPLE, [create(seq)])
            largest = max(largest, wal.stat().st_size)
            if yields:
                await asyncio.sleep(0)
        # At most one commit's pages past the bound, never more.
        assert largest <= limit + 64 * 1024, largest
        assert [b.seq for b in await store.read("m", SIMPLE, 2990, 3000)] == list(
            range(2991, 3001)
        )
    finally:
        await store.close()


async def test_a_durable_store_bounds_its_wal_too(tmp_path) -> None:
    limit = 1 << 20
    store = SQLiteStore(tmp_path / "log.db", "full", checkpoint_rows=64, wal_limit=limit)
    await store.open()
    wal = tmp_path / "log.db-wal"
    largest = 0
    try:
        for seq in range(1, 1001):
            await store.append("m", SIMPLE, [create(seq)])
            largest = max(largest, wal.stat().st_size)
        assert largest <= limit + 64 * 1024, largest
        assert len(await store.load("m", SIMPLE)) == 1000
    finally:
        await store.close()


async def test_enactment_pages_are_whole_batches_as_the_plain_slicing_gives(tmp_path) -> None:
    """SQLite pages with SQL (LIMIT); the answer must be what slicing every batch
    of the enactment gives (``page_of``), for every page size and start."""
    import random

    from syncserver.store import page_of

    rng = random.Random(3)
    store = SQLiteStore(tmp_path / "log.db")
    await store.open()
    create = SIMPLE.actions["Create"]
    try:
        batches = []
        for seq in range(1, 60):
            # Batches of 1 to 3 entries, of c1 or of c2 (c2's are left out of c1's pages).
            cids = [rng.choice(["c1", "c2"]) for _ in range(rng.randint(1, 3))]
            entries = tuple(
                Entry(ActionInstance(create, {"cid": cid, **SIMPLE_CREATE}), "p") for cid in cids
            )
            batches.append(Batch(SIMPLE.name, seq, entries))
        store.append_now("m", SIMPLE, batches)
        whole = await store.by_root("m", SIMPLE, ("c1",))
        for limit in (1, 2, 3, 5, 50, 500):
            after = 0
            while True:
                got, more = await store.enactment_page("m", SIMPLE, ("c1",), after, limit)
                want, more_wanted = page_of(whole, after, limit)
                assert [(b.seq, len(b.entries)) for b in got] == [
                    (b.seq, len(b.entries)) for b in want
                ], (limit, after)
                assert more == more_wanted, (limit, after)
                if not more:
                    break
                after = got[-1].seq
    finally:
        await store.close()
