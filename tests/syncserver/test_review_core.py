"""Review of the session's core changes (6236d54..): each test here failed
before the fix it pins."""

from __future__ import annotations

from langshaw import ActionInstance
from syncserver import SQLiteStore
from syncserver.batch import Batch, Entry
from tests.conftest import SIMPLE_CREATE, load

SIMPLE = load("atomic-ucp.lsh")


def _large_root(seq: int, size: int) -> Batch:
    """A Create whose root key (cid) holds most of its bytes: the log writes it
    twice (the row, and the root index) besides the bindings that hold it too."""
    cid = f"c{seq}-" + "x" * size
    instance = ActionInstance(SIMPLE.actions["Create"], {"cid": cid, **SIMPLE_CREATE})
    return Batch(SIMPLE.name, seq, (Entry(instance, "platform"),))


async def test_the_wal_bound_holds_when_the_root_key_is_most_of_a_row(tmp_path) -> None:
    """The store looks at the WAL's file only when the commits since could pass
    the bound; its estimate of a commit left out the root key, which a row holds
    beside the bindings and the root index holds again: the WAL passed its
    bound by several commits before the store looked."""
    limit = 4 << 20
    # No checkpoint beside the writer: the bound alone keeps the WAL.
    store = SQLiteStore(tmp_path / "log.db", checkpoint_rows=10**9, wal_limit=limit)
    await store.open()
    wal = tmp_path / "log.db-wal"
    try:
        store.append_now("m", SIMPLE, [_large_root(1, 200_000)])
        one = wal.stat().st_size  # one commit's frames (the WAL was empty)
        largest = 0
        for seq in range(2, 60):
            store.append_now("m", SIMPLE, [_large_root(seq, 200_000)])
            largest = max(largest, wal.stat().st_size)
        # As docs/syncserver.md says: past its bound, the WAL is truncated at
        # once (here after each commit; no reader holds a checkpoint back).
        assert largest <= limit, (largest, limit, one)
    finally:
        await store.close()
