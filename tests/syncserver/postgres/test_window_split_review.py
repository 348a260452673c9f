"""The review of the window split (tests/hostile/test_review_window_split.py,
whose helpers these use), over the shared PostgreSQL log: two servers'
windows stay whole and the log dense; a turn that numbers its parts after
batches it missed; a resend to the other server gets its part's receipt.
Here, beside this folder's cluster fixture."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from syncserver import SyncServer, _window
from syncserver.store import rows_of
from tests.hostile.test_review_window_split import (
    P,
    attempt,
    dense,
    log_of,
    other_of,
    same_receipt,
    seqs_until,
)
from tests.syncserver.test_window_split import AGENTS, COUNT, SIMPLE, Arrivals, bound_for, gate


async def test_two_servers_windows_over_postgres_stay_whole_and_dense(
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two servers each finalize a split window at once over one PostgreSQL
    log: each window's parts are consecutive in the log (a turn appends them
    all), the log is dense, and each server streams every batch once, in order."""
    bound = bound_for(1.5)
    monkeypatch.setattr(_window, "WINDOW_BATCH_BYTES", bound)
    options: dict[str, Any] = {"store": pg_url, "policy": "batched", "batch_window_ms": 1}
    half = COUNT // 2
    mine = {"a": list(AGENTS)[:half], "b": list(AGENTS)[half:]}
    async with (
        SyncServer.embedded([SIMPLE], AGENTS, **options) as a,
        SyncServer.embedded([SIMPLE], AGENTS, **options) as b,
    ):
        servers = {"a": a, "b": b}
        for server in servers.values():
            finalizer = server.ledgers[P]._shared
            assert finalizer is not None
            window = Arrivals(half)
            monkeypatch.setattr(finalizer, "_queue", window)
            gate(monkeypatch, finalizer, "_turn", window)
        streams = {n: s.ledgers[P].subscribe(0) for n, s in servers.items()}
        async with asyncio.timeout(2):
            receipts = await asyncio.gather(
                *(attempt(servers[n], p) for n, agents in mine.items() for p in agents)
            )
        assert not any(isinstance(r, Exception) for r in receipts), receipts
        log = await log_of(a)
        dense(log)
        for agents in mine.values():
            seqs = sorted({b.seq for b in log for e in b.entries if e.performer in agents})
            assert seqs == list(range(seqs[0], seqs[-1] + 1))  # consecutive parts
            for batch in log:
                performers = {e.performer for e in batch.entries}
                assert performers <= set(agents) or not performers & set(agents)
        for p, receipt in zip([p for v in mine.values() for p in v], receipts, strict=True):
            batch = log[receipt.seq - 1]
            assert [batch.entries[i].instance["cid"] for i in receipt.positions] == [
                f"{p}-a",
                f"{p}-b",
            ]
        for stream in streams.values():
            assert await seqs_until(stream, len(log)) == list(range(1, len(log) + 1))


def follows_nothing(monkeypatch: pytest.MonkeyPatch, finalizer: Any) -> None:
    """A server that lags: it does not catch up, and notifications carry no
    rows it could apply as they come (as when they do not fit)."""
    monkeypatch.setattr(finalizer, "_catch_up", lambda: None)
    monkeypatch.setattr("syncserver._pgstore._note", lambda rows: None)


@pytest.mark.parametrize("fail", [False, True], ids=["commits", "write-fails"])
async def test_a_turn_numbering_parts_after_missed_batches(
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
    fail: bool,
) -> None:
    """Server b commits a batch that server a has not followed (its
    following is held) on enactments a's window does not touch: a's turn
    checks its window without it, numbers its parts after it, and applies
    it first. If the turn's write fails after numbering, every attempt of
    the window is answered 503 and a's state and numbers come back from the
    log."""
    monkeypatch.setattr(_window, "WINDOW_BATCH_BYTES", bound_for(1.5))
    options: dict[str, Any] = {"store": pg_url, "policy": "batched", "batch_window_ms": 1}
    agents = ["p0", "p1", "p2", "p3"]
    async with (
        SyncServer.embedded([SIMPLE], AGENTS, **options) as a,
        SyncServer.embedded([SIMPLE], AGENTS, **options) as b,
    ):
        ledger = a.ledgers[P]
        finalizer = ledger._shared
        assert finalizer is not None
        follows_nothing(monkeypatch, finalizer)  # a
        theirs = await attempt(b, "p7", other_of("p7"), "theirs")
        assert theirs.seq == 1 and ledger.committed_seq == 0
        window = Arrivals(len(agents))
        monkeypatch.setattr(finalizer, "_queue", window)
        gate(monkeypatch, finalizer, "_turn", window)
        if fail:

            def failing(protocol: Any, batches: Any) -> Any:
                monkeypatch.setattr("syncserver._pgstore.rows_of", rows_of)
                raise OSError("connection lost (simulated)")

            monkeypatch.setattr("syncserver._pgstore.rows_of", failing)
        apart: list[bool] = []
        real_apart = finalizer._apart

        def spying(turn: Any, work: Any) -> bool:
            apart.append(real_apart(turn, work))
            return apart[-1]

        monkeypatch.setattr(finalizer, "_apart", spying)
        stream = ledger.subscribe(0)
        async with asyncio.timeout(2):
            answers = await asyncio.gather(*(attempt(a, p) for p in agents))
        assert apart[0] is True  # checked without b's batch, numbered after it
        if fail:
            assert {getattr(r, "code", None) for r in answers} == {"store-failed"}
            async with asyncio.timeout(2):
                while ledger.rebuilding is not None:
                    await asyncio.wait([ledger.rebuilding])
            assert (ledger.committed_seq, ledger.next_seq) == (1, 2)
            assert not ledger._uncommitted
            answers = [await attempt(a, p) for p in agents]  # resent: finalized now
        assert not any(isinstance(r, Exception) for r in answers), answers
        log = await log_of(b)
        dense(log)
        assert [e.performer for e in log[0].entries] == ["p7"]
        for p, receipt in zip(agents, answers, strict=True):
            assert receipt.seq > 1
            batch = log[receipt.seq - 1]
            assert [batch.entries[i].instance["cid"] for i in receipt.positions] == [
                f"{p}-a",
                f"{p}-b",
            ]
        assert await seqs_until(stream, len(log)) == list(range(1, len(log) + 1))
        assert ledger.committed_seq == len(log) and ledger.next_seq == len(log) + 1



async def test_a_resend_to_another_server_gets_its_part_s_receipt(
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window split on server a; each attempt resent to server b, which has
    not followed a's batches yet: b's turn finds the ids taken in the batches
    it missed, and answers each with the receipt of its own part (same seq,
    same positions), finalizing nothing again."""
    monkeypatch.setattr(_window, "WINDOW_BATCH_BYTES", bound_for(1.5))
    options: dict[str, Any] = {"store": pg_url, "policy": "batched", "batch_window_ms": 1}
    async with (
        SyncServer.embedded([SIMPLE], AGENTS, **options) as a,
        SyncServer.embedded([SIMPLE], AGENTS, **options) as b,
    ):
        finalizer = a.ledgers[P]._shared
        follower = b.ledgers[P]._shared
        assert finalizer is not None and follower is not None
        follows_nothing(monkeypatch, follower)  # b
        window = Arrivals(COUNT)
        monkeypatch.setattr(finalizer, "_queue", window)
        gate(monkeypatch, finalizer, "_turn", window)
        async with asyncio.timeout(2):
            first = await asyncio.gather(*(attempt(a, p) for p in AGENTS))
            assert b.ledgers[P].committed_seq == 0
            again = await asyncio.gather(*(attempt(b, p) for p in AGENTS))
        parts = {r.seq for r in first}
        assert len(parts) >= 3
        for one, other in zip(first, again, strict=True):
            same_receipt(one, other)
        log = await log_of(b)
        dense(log)
        assert len(log) == len(parts)


