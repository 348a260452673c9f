"""Hostile review of fb0fc4e: a batched window finalized as consecutive
bounded batches (syncserver._window). Every attempt is answered exactly once,
receipts name their own batch, and the log stays dense and in order on every
path: a write failing at a later part, a resend or a cancelled caller while a
later part commits, a later window closing meanwhile, shutdown mid-window,
and two servers sharing a PostgreSQL log.

Windows are held open on events (tests/syncserver/test_window_split.py's
``gate``), and commits are held on events (``HeldMemory``): no sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from langshaw import ActionInstance
from syncserver import Batch, SyncServer, _window
from syncserver.errors import Rejected, ServiceError
from syncserver.ledger import Ledger
from syncserver.store import MemoryStore
from tests.conftest import SIMPLE_CREATE
from tests.syncserver.test_window_split import (
    AGENTS,
    COUNT,
    SIMPLE,
    Arrivals,
    FailingSQLite,
    attempt_of,
    bound_for,
    check_split,
    gate,
)

P = ("default", "SimpleUCP")


class HeldMemory(MemoryStore):
    """A memory log whose writes wait (a store that must wait, as SQLite with
    fsync): each write is held until ``release`` is set, and can be made to fail."""

    inline = False
    synchronous_append = False

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.fail = False
        self.writes: list[list[int]] = []

    async def append(self, mas: str, protocol: Any, batches: Any) -> None:
        self.writes.append([b.seq for b in batches])
        self.entered.set()
        await self.release.wait()
        if self.fail:
            raise OSError("disk gone (simulated)")
        self.append_now(mas, protocol, batches)


def other_of(agent: str) -> list[ActionInstance]:
    """A second attempt of ``agent``, for a later window (other enactments)."""
    create = SIMPLE.action("Create")
    items = [{"item": {"id": "tulips", "title": "T"}, "quantity": 2}]
    return [ActionInstance(create, {**SIMPLE_CREATE, "cid": f"{agent}-x", "line_items": items})]


async def attempt(
    server: SyncServer, agent: str, instances: Any = None, ident: str | None = None
) -> Any:
    """The receipt, or the error, of one attempt."""
    try:
        return await server.attempt(
            "default",
            "SimpleUCP",
            server.agent("default", agent),
            attempt_of(agent) if instances is None else instances,
            ident or f"id-{agent}",
        )
    except ServiceError as exc:
        return exc


async def log_of(server: SyncServer) -> list[Batch]:
    return await server.read("default", "SimpleUCP", server.agent("default", "p0"), 0, 999)


@contextlib.asynccontextmanager
async def windowed(
    monkeypatch: pytest.MonkeyPatch, store: Any, bound: int
) -> AsyncIterator[tuple[SyncServer, Ledger, Arrivals]]:
    """A server under the batched policy, with ``bound`` for its window's
    parts, whose window closes once all ``COUNT`` attempts have arrived."""
    monkeypatch.setattr(_window, "WINDOW_BATCH_BYTES", bound)
    options: dict[str, Any] = {"store": store, "policy": "batched", "batch_window_ms": 1}
    async with SyncServer.embedded([SIMPLE], AGENTS, **options) as server:
        ledger = server.ledgers[P]
        window = Arrivals(COUNT)
        monkeypatch.setattr(ledger, "_window", window)
        gate(monkeypatch, ledger, "_close_window", window)
        yield server, ledger, window


async def seqs_until(stream: Any, last: int, seconds: float = 2) -> list[int]:
    """The seqs a subscription yields, up to ``last`` (within ``seconds``); closes it."""
    seen: list[int] = []
    try:
        async with asyncio.timeout(seconds):
            async for batch in stream:
                seen.append(batch.seq)
                if batch.seq >= last:
                    break
    finally:
        await stream.aclose()
    return seen


def dense(batches: list[Batch]) -> None:
    assert [b.seq for b in batches] == list(range(1, len(batches) + 1))
    cids = [e.instance["cid"] for b in batches for e in b.entries]
    assert len(cids) == len(set(cids))  # each instance once


def same_receipt(a: Any, b: Any) -> None:
    assert not isinstance(a, Exception) and not isinstance(b, Exception), (a, b)
    assert (a.seq, a.positions) == (b.seq, b.positions)


async def test_sqlite_each_part_written_at_once_and_part_two_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite writes each part at once when its previous write took longer
    than QUIET (a large part does): part 2 fails in ``_write_now``; parts 3..
    were numbered but never queued. Part 1 stands; the rest get 503, the log
    has no hole, and numbering resumes right after part 1."""
    monkeypatch.setattr(Ledger, "QUIET", -1.0)  # every part's write at once
    store = FailingSQLite(tmp_path / "log.db")
    async with windowed(monkeypatch, store, bound_for(2.5)) as (server, ledger, window):
        async with asyncio.timeout(2):
            done = await asyncio.gather(*(attempt(server, a) for a in AGENTS))
        answers = dict(zip(AGENTS, done, strict=True))
        good = [a for a in window.order if not isinstance(answers[a], Exception)]
        bad = [a for a in window.order if a not in good]
        assert good == window.order[: len(good)] and {answers[a].seq for a in good} == {1}
        assert bad and {answers[a].code for a in bad} == {"store-failed"}
        assert [[e.performer for e in b.entries][::2] for b in await log_of(server)] == [good]
        again = await attempt(server, bad[-1])
        assert again.seq == 2 and not ledger._uncommitted and not ledger._in_flight


async def test_resends_and_cancelled_callers_while_later_parts_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the window's parts are being written, a resend of every attempt
    id (of the first part and of later ones) waits for the commit and gets
    the original receipt; a caller that stopped waiting has its attempt
    finalized all the same, and its resend gets its receipt."""
    store = HeldMemory()
    async with windowed(monkeypatch, store, bound_for(2.5)) as (server, ledger, window):
        first = {a: asyncio.ensure_future(attempt(server, a)) for a in AGENTS}
        async with asyncio.timeout(2):
            await store.entered.wait()  # every part numbered, their write held
        parts = ledger.next_seq - 1
        assert parts >= 3
        first["p3"].cancel()
        resent = {a: asyncio.ensure_future(attempt(server, a)) for a in AGENTS}
        store.release.set()
        async with asyncio.timeout(2):
            await asyncio.gather(*first.values(), return_exceptions=True)
            again = {a: await task for a, task in resent.items()}
        log = await log_of(server)
        dense(log)
        split = check_split(log, window.order, bound_for(2.5))
        assert len(split) == parts
        for agent in AGENTS:
            if agent != "p3":
                same_receipt(first[agent].result(), again[agent])
            receipt = again[agent]
            assert [receipt.batch.entries[i].instance["cid"] for i in receipt.positions] == [
                f"{agent}-a",
                f"{agent}-b",
            ]
            assert agent in split[receipt.seq - 1]
        assert not ledger._in_flight and not ledger._uncommitted


async def test_a_later_window_is_numbered_after_every_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window that closes while the previous window's parts are still being
    written is numbered after all of them, and the log stays dense."""
    store = HeldMemory()
    async with windowed(monkeypatch, store, bound_for(2.5)) as (server, ledger, _):
        numbered = asyncio.Event()
        calls = 0
        number_window = ledger.number_window

        def counting(attempts: Any) -> Any:
            nonlocal calls
            calls += 1
            parts = number_window(attempts)
            if calls == 2:
                numbered.set()
            return parts

        monkeypatch.setattr(ledger, "number_window", counting)
        first = [asyncio.ensure_future(attempt(server, a)) for a in AGENTS]
        async with asyncio.timeout(2):
            await store.entered.wait()
        parts = ledger.next_seq - 1
        later = [
            asyncio.ensure_future(attempt(server, a, other_of(a), f"later-{a}"))
            for a in ("p0", "p5")
        ]
        async with asyncio.timeout(2):
            await numbered.wait()  # the later window checked and numbered, its write queued
        store.release.set()
        async with asyncio.timeout(2):
            early = await asyncio.gather(*first)
            late = await asyncio.gather(*later)
        log = await log_of(server)
        dense(log)
        assert max(r.seq for r in early) == parts
        assert {r.seq for r in late} == {parts + 1} and len(log) == parts + 1
        assert store.writes[0] == list(range(1, parts + 1))


async def test_a_window_of_rejected_attempts_numbers_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window whose attempts are all refused (their enactments exist) adds
    no batch: numbering goes on from the last one."""
    monkeypatch.setattr(_window, "WINDOW_BATCH_BYTES", bound_for(0))
    options: dict[str, Any] = {"store": ":memory:", "policy": "batched", "batch_window_ms": 1}
    async with SyncServer.embedded([SIMPLE], AGENTS, **options) as server:
        ledger = server.ledgers[P]
        ok = await attempt(server, "p1")
        assert ok.seq == 1
        async with asyncio.timeout(2):
            refused = await asyncio.gather(
                attempt(server, "p1", ident="fresh-1"), attempt(server, "p2", attempt_of("p1"))
            )
        assert all(isinstance(r, Rejected) for r in refused), refused
        assert ledger.next_seq == 2 and not ledger._uncommitted
        assert (await attempt(server, "p4")).seq == 2


async def test_shutdown_mid_window_answers_every_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server stops while a split window's write is held: every attempt
    is answered (its receipt, as its part committed), none left waiting."""
    store = HeldMemory()
    async with windowed(monkeypatch, store, bound_for(2.5)) as (server, ledger, _):
        tasks = [asyncio.ensure_future(attempt(server, a)) for a in AGENTS]
        async with asyncio.timeout(2):
            await store.entered.wait()
        asyncio.get_running_loop().call_soon(store.release.set)  # during the shutdown
    async with asyncio.timeout(2):
        answers = await asyncio.gather(*tasks)
    assert all(not isinstance(a, Exception) for a in answers), answers
    assert sorted({a.seq for a in answers}) == list(range(1, ledger.committed_seq + 1))


async def test_a_held_write_that_fails_answers_the_whole_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One transaction holds every part (a store that waits): it fails, so
    every attempt is answered 503, once; the state is rebuilt and numbering
    starts again at 1."""
    store = HeldMemory()
    store.fail = True
    async with windowed(monkeypatch, store, bound_for(2.5)) as (server, _, _):
        store.release.set()
        async with asyncio.timeout(2):
            answers = await asyncio.gather(*(attempt(server, a) for a in AGENTS))
        assert {getattr(a, "code", None) for a in answers} == {"store-failed"}
        store.fail = False
        assert (await attempt(server, "p2")).seq == 1
        dense(await log_of(server))


def test_split_keeps_attempts_whole_around_one_past_the_bound() -> None:
    """Small, one larger than the bound, small, small: the large one is a
    batch of its own, no attempt is cut, and the smalls after it share one."""
    from syncserver.attempt import Attempt

    bound = _size("p1") + _size("p2") + _size("p3")
    items = [{"item": {"id": "x", "title": "B" * bound}, "quantity": 1}]
    big = [
        ActionInstance(
            SIMPLE.action("Create"), {**SIMPLE_CREATE, "cid": "big", "line_items": items}
        )
    ]
    roles = frozenset({"Platform"})
    attempts = [
        Attempt(attempt_of("p1"), "p1", roles),
        Attempt(big, "p7", roles),
        Attempt(attempt_of("p2"), "p2", roles),
        Attempt(attempt_of("p3"), "p3", roles),
    ]
    parts = _window.split_window(attempts, bound)
    assert [[e.performer for e in entries] for entries, _ in parts] == [
        ["p1", "p1"],
        ["p7"],
        ["p2", "p2", "p3", "p3"],
    ]
    assert [spans for _, spans in parts] == [[(0, 1)], [(0,)], [(0, 1), (2, 3)]]


def _size(agent: str) -> int:
    from syncserver.batch import Entry

    return sum(Entry(i, agent, None).frame_size() for i in attempt_of(agent))


async def test_instant_policy_is_neither_split_nor_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the instant policy each attempt is a batch of its own, whatever
    the window bound, and a batch's estimated frame is what it was (the sum
    moved to Entry.frame_size) and within a few bytes of the frame."""
    monkeypatch.setattr(_window, "WINDOW_BATCH_BYTES", 1)
    options: dict[str, Any] = {"store": ":memory:", "policy": "instant"}
    async with SyncServer.embedded([SIMPLE], AGENTS, **options) as server:
        async with asyncio.timeout(2):
            receipts = await asyncio.gather(*(attempt(server, a) for a in ("p1", "p2", "p3")))
        assert sorted(r.seq for r in receipts) == [1, 2, 3]
        for receipt in receipts:
            batch = receipt.batch
            assert receipt.positions == (0, 1) and len(batch.entries) == 2
            old = (
                64
                + len(str(batch.seq)) * 2
                + len(batch.protocol)
                + 2
                + sum(
                    len(e.bindings_json) + len(e.instance.action.name) + len(e.performer) + 52
                    for e in batch.entries
                )
            )
            assert batch.frame_size() == old
            assert abs(len(batch.sse_frame) - old) < 64


class Registering(set[Any]):
    """A ledger's subscribers, saying when one registers."""

    def __init__(self) -> None:
        super().__init__()
        self.added = asyncio.Event()

    def add(self, item: Any) -> None:
        super().add(item)
        self.added.set()


@pytest.mark.parametrize("split", [False, True], ids=["one-batch", "split"])
async def test_a_window_larger_than_a_streams_backlog_reaches_it_whole(
    monkeypatch: pytest.MonkeyPatch, split: bool
) -> None:
    """A stream caught up and waiting, with the byte backlog the event streams
    have (twice the bound, as 8 MiB is to 4 MiB: app.py subscribes with
    ``max_bytes=Limits.stream_backlog_bytes``), and a window whose frames pass
    that backlog. As one batch (the bound out of reach) it is taken: a batch
    into an empty queue always is. Cut into parts, all published in one step
    of the loop (the memory store writes each at once), the reader can take
    none before the third arrives, and the stream is dropped as lagging (found
    in review): a stream's memory stays bounded, and its reader resumes from
    the log, whose pages hold the parts (one batch of the whole window could
    not be read back past an agent's bound). Either way every batch reaches
    the reader once, in order."""
    from syncserver.feed import Lagging

    bound = bound_for(2.5)
    async with windowed(
        monkeypatch, ":memory:", bound if split else 1 << 40
    ) as (server, ledger, _):
        subscribers = Registering()
        monkeypatch.setattr(ledger, "subscribers", subscribers)
        stream = ledger.subscribe(0, max_bytes=2 * bound)
        waiting = asyncio.ensure_future(anext(stream))  # caught up: waits for the next
        async with asyncio.timeout(2):
            await subscribers.added.wait()
            receipts = await asyncio.gather(*(attempt(server, a) for a in AGENTS))
        assert not any(isinstance(r, Exception) for r in receipts)
        last = max(r.seq for r in receipts)
        assert (last >= 3) if split else (last == 1)
        seen: list[int] = []
        lagged = False
        try:
            async with asyncio.timeout(2):
                seen.append((await waiting).seq)
                while seen[-1] < last:
                    seen.append((await anext(stream)).seq)
        except Lagging:
            lagged = True
        finally:
            await stream.aclose()
        assert lagged == split
        reader = server.agent("default", "p0")
        after = seen[-1] if seen else 0
        rest = await server.read("default", "SimpleUCP", reader, after, 99)
        seen += [b.seq for b in rest]
        assert seen == list(range(1, last + 1))
