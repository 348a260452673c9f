"""The store interface, one suite for every backend: memory, SQLite, PostgreSQL.

What goes in comes out whole and exact (batches, positions, performers, attempt
ids, values of every JSON kind, optional attributes left absent); reads by range,
by enactment and by attempt id; each ledger (MAS and protocol) numbered on its
own, and read in pages; a reopened durable store keeps its log, its attempt ids
(a server restarted on it answers a resend with the first answer) and goes on
numbering; a log that no longer fits the protocol is refused. Then what only a
shared store (PostgreSQL) does: turns that serialize a ledger's writers across
servers, density, rollback, notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from langshaw import ActionInstance, LangshawProtocol
from syncserver import Batch, Entry, Rejected, StoreError, SyncServer, open_store
from syncserver._pgsql import APPEND as _APPEND
from syncserver._pgstore import PostgresStore, _ledger_key
from syncserver.store import Carried, Store, Turn
from tests.conftest import PROTOCOLS, SIMPLE_CREATE, SIMPLE_CREATED, load

SIMPLE = load("atomic-ucp.lsh")
PURCHASE = load("purchase.lsh")
MAS = "m"


def create(cid: Any, **extra: Any) -> ActionInstance:
    return ActionInstance(SIMPLE.action("Create"), {"cid": cid, **SIMPLE_CREATE, **extra})


def created(cid: Any) -> ActionInstance:
    return ActionInstance(
        SIMPLE.action("Created"), {"cid": cid, "Create": True, "id": f"k-{cid}", **SIMPLE_CREATED}
    )


def batches() -> list[Batch]:
    """Three batches: values of every JSON kind, two performers, optional
    attributes absent and present, an entry without attempt id."""
    odd = {"full_name": "Zoë «Ω» \u2028 \\ \"q\"", "email": "z@example.com"}
    return [
        Batch("SimpleUCP", 1, (Entry(create("c1", buyer=odd), "platform", "a1"),)),
        Batch(
            "SimpleUCP",
            2,
            (
                Entry(create(2**62, discount_codes={"codes": ["X", "Y"]}), "platform", "a2"),
                Entry(create("c3"), "other", "a2"),  # the same id, another agent
                Entry(created("c1"), "business", None),
            ),
        ),
        Batch("SimpleUCP", 3, (Entry(created(2**62), "business", "a3"),)),
    ]


def shape(found: list[Batch]) -> list[tuple[int, list[tuple[str, dict[str, Any], str, Any]]]]:
    return [
        (
            b.seq,
            [(e.instance.action.name, dict(e.instance.bindings), e.performer, e.attempt_id)
             for e in b.entries],
        )
        for b in found
    ]


def _spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return ":memory:"
    if request.param == "sqlite":
        return str(tmp_path / "log.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _spec(request, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The stores that keep their log when closed (not memory)."""
    return _spec(request, tmp_path)


@contextlib.asynccontextmanager
async def opened(spec: str) -> AsyncIterator[Store]:
    store = open_store(spec)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_batches_read_back_exactly(spec: str) -> None:
    written = batches()
    async with opened(spec) as store:
        await store.append(MAS, SIMPLE, written[:1])
        await store.append(MAS, SIMPLE, written[1:])
        assert shape(await store.load(MAS, SIMPLE)) == shape(written)
        assert shape(await store.read(MAS, SIMPLE, 1, 2)) == shape(written[1:2])
        assert shape(await store.read(MAS, SIMPLE, 0, 99)) == shape(written)
        assert await store.read(MAS, SIMPLE, 3, 10) == []
        assert await store.load("another", SIMPLE) == []
        # One enactment: only its entries, in their batches.
        by_root = await store.by_root(MAS, SIMPLE, (2**62,))
        assert [(b.seq, [e.instance.action.name for e in b.entries]) for b in by_root] == [
            (2, ["Create"]),
            (3, ["Created"]),
        ]
        assert [b.seq for b in await store.by_root(MAS, SIMPLE, ("c1",))] == [1, 2]
        # An attempt by its id and performer: attempt ids are each agent's own.
        found = await store.find_attempt(MAS, SIMPLE, "a2", "platform", (2**62,))
        assert found is not None and found.seq == 2
        assert [e.performer for e in found.entries] == ["platform"]
        other = await store.find_attempt(MAS, SIMPLE, "a2", "other", ("c3",))
        assert other is not None and other.entries[0].instance["cid"] == "c3"
        assert await store.find_attempt(MAS, SIMPLE, "a2", "business", ("c1",)) is None
        # Absent stays absent; null would be a value.
        first = (await store.read(MAS, SIMPLE, 0, 1))[0].entries[0].instance
        assert "fulfillment_pref" not in first.bindings


def numbered(first: int, count: int, tag: str) -> list[Batch]:
    """``count`` batches from seq ``first``, one or two entries each."""
    return [
        Batch(
            "SimpleUCP",
            seq,
            tuple(
                Entry(create(f"{tag}{seq}-{i}"), "platform", f"{tag}{seq}")
                for i in range(1 + seq % 2)
            ),
        )
        for seq in range(first, first + count)
    ]


def rfq(seq: int) -> Batch:
    instance = ActionInstance(PURCHASE.action("RFQ"), {"ID": f"r{seq}", "item": "x", "budget": 9})
    return Batch("Purchase", seq, (Entry(instance, "buyer", f"q{seq}"),))


async def test_each_ledger_is_numbered_apart_and_read_in_pages(spec: str) -> None:
    """Ledgers (MAS, protocol) share the store, not their numbers; a reader
    paging through one (as a server following the log, or /log) gets every
    batch once, in order, and nothing past the end."""
    async with opened(spec) as store:
        # Several appends of several batches each, interleaved with other ledgers'.
        for n, (first, count) in enumerate([(1, 7), (8, 12), (20, 6)], 1):
            await store.append(MAS, SIMPLE, numbered(first, count, "m"))
            await store.append("other", SIMPLE, numbered(n, 1, "o"))
            await store.append(MAS, PURCHASE, [rfq(n)])
        assert [b.seq for b in await store.load(MAS, SIMPLE)] == list(range(1, 26))
        assert shape(await store.load("other", SIMPLE)) == shape(numbered(1, 3, "o"))
        assert shape(await store.load(MAS, PURCHASE)) == shape([rfq(1), rfq(2), rfq(3)])
        pages: list[Batch] = []
        for after in range(0, 30, 10):
            page = await store.read(MAS, SIMPLE, after, after + 10)
            assert [b.seq for b in page] == list(range(after + 1, min(after + 10, 25) + 1))
            pages += page
        assert shape(pages) == shape(numbered(1, 25, "m"))
        assert await store.read(MAS, SIMPLE, 25, 99) == []
        assert await store.read(MAS, SIMPLE, 5, 5) == []
        assert await store.read("nobody", SIMPLE, 0, 99) == []
        assert await store.by_root(MAS, SIMPLE, ("no such",)) == []
        # Entries of one batch stay in their order; attempt ids are found per ledger.
        [two] = await store.read(MAS, SIMPLE, 8, 9)
        assert [e.instance["cid"] for e in two.entries] == ["m9-0", "m9-1"]
        found = await store.find_attempt(MAS, SIMPLE, "m9", "platform", ("m9-0",))
        assert found is not None and found.seq == 9
        assert await store.find_attempt("other", SIMPLE, "m9", "platform", ("m9-0",)) is None


async def test_a_reopened_store_keeps_its_log_and_goes_on(durable: str) -> None:
    async with opened(durable) as store:
        await store.append(MAS, SIMPLE, batches())
        await store.append(MAS, PURCHASE, [rfq(1)])
    async with opened(durable) as again:
        assert shape(await again.load(MAS, SIMPLE)) == shape(batches())
        # Attempt ids survive: looked up by performer, id and enactment.
        found = await again.find_attempt(MAS, SIMPLE, "a2", "other", ("c3",))
        assert found is not None and shape([found]) == shape([batches()[1].only(
            lambda e: e.performer == "other"
        )])
        assert await again.find_attempt(MAS, SIMPLE, "a9", "platform", ("c1",)) is None
        assert [b.seq for b in await again.by_root(MAS, SIMPLE, ("c1",))] == [1, 2]
        # Numbering goes on from the last batch, each ledger on its own.
        await again.append(MAS, SIMPLE, numbered(4, 2, "n"))
        await again.append(MAS, PURCHASE, [rfq(2)])
    async with opened(durable) as third:
        assert [b.seq for b in await third.load(MAS, SIMPLE)] == [1, 2, 3, 4, 5]
        assert [b.seq for b in await third.load(MAS, PURCHASE)] == [1, 2]


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_a_restarted_server_answers_a_resend_with_its_first_answer(
    durable: str, policy: str
) -> None:
    """The attempt id, kept in the log, is what lets an agent that lost the
    answer resend after the server restarted: the same receipt, not a refusal."""
    agents = {"platform": ["SimpleUCP:Platform"]}
    options: dict[str, Any] = {"policy": policy, "batch_window_ms": 2}

    async def send(server: SyncServer, cid: str, attempt_id: str) -> Any:
        agent = server.agent("default", "platform")
        return await server.attempt("default", "SimpleUCP", agent, [create(cid)], attempt_id)

    async with SyncServer.embedded([SIMPLE], agents, store=durable, **options) as server:
        await send(server, "c0", "first")
        before = await send(server, "c1", "lost")
    async with SyncServer.embedded([SIMPLE], agents, store=durable, **options) as server:
        again = await send(server, "c1", "lost")
        assert (again.seq, again.positions) == (before.seq, before.positions) == (2, (0,))
        with pytest.raises(Rejected) as refused:  # another id: a new attempt, refused
            await send(server, "c1", "another id")
        assert refused.value.code == "duplicate"
        after = await send(server, "c2", "new")
        assert after.seq == 3


async def test_a_log_that_no_longer_fits_the_protocol_is_refused(durable: str) -> None:
    spec = durable
    text = (PROTOCOLS / "atomic-ucp.lsh").read_text()
    changed = LangshawProtocol.parse(
        text.replace("Created(cid , Create , id:", "Created(cid , Create , note: string , id:")
        .replace("Business : id ,", "Business : note , id ,"),
        str(PROTOCOLS / "atomic-ucp.lsh"),
    )
    async with opened(spec) as store:
        await store.append(MAS, SIMPLE, batches())
    async with opened(spec) as again:
        with pytest.raises(StoreError, match=r"'Created' .*batch 2.* does not fit"):
            await again.load(MAS, changed)


# What only a shared store does ---------------------------------------------------------


async def test_append_must_follow_the_last_batch(pg_url: str) -> None:
    async with opened(pg_url) as store:
        await store.append(MAS, SIMPLE, batches()[:1])
        with pytest.raises(StoreError, match="batch 3 appended after batch 1"):
            await store.append(MAS, SIMPLE, batches()[2:])
        with pytest.raises(StoreError, match="batch 1 appended after batch 1"):
            await store.append(MAS, SIMPLE, batches()[:1])
        assert [b.seq for b in await store.load(MAS, SIMPLE)] == [1]


async def test_turns_of_one_ledger_run_one_at_a_time_across_servers(pg_url: str) -> None:
    """Two stores on one database stand for two servers: the second turn waits
    for the first to commit, then gets its batches as missed, and numbers after."""
    async with opened(pg_url) as first, opened(pg_url) as second:
        assert isinstance(first, PostgresStore) and isinstance(second, PostgresStore)
        seen: list[Turn] = []

        async def later() -> None:
            async with second.turn(MAS, SIMPLE, 0) as turn:
                seen.append(turn)
                turn.append([Batch("SimpleUCP", turn.last_seq + 1,
                                   (Entry(create("late"), "platform", "b"),))])

        async with first.turn(MAS, SIMPLE, 0):
            pass  # the ledger's first turn anywhere makes its row; this one locks it
        async with first.turn(MAS, SIMPLE, 0) as turn:
            assert (turn.last_seq, turn.missed) == (0, [])
            # Any other session that wants the ledger waits: given 200 ms, it gives up.
            async with second.pool.acquire() as conn, conn.transaction():
                await conn.execute("SET LOCAL lock_timeout = '200ms'")
                with pytest.raises(asyncpg.LockNotAvailableError):
                    key = _ledger_key(MAS, "SimpleUCP")
                    nothing = [[] for _ in range(7)]  # no rows to write
                    await conn.fetch(
                        _APPEND, MAS, "SimpleUCP", 0, key, [], 0, *nothing, "", None, None
                    )
            task = asyncio.create_task(later())
            turn.append(batches()[:2])
        await asyncio.wait_for(task, 10)
        [turn] = seen
        assert turn.last_seq == 2 and shape(turn.missed) == shape(batches()[:2])
        assert [b.seq for b in await first.load(MAS, SIMPLE)] == [1, 2, 3]
        # Another ledger (another MAS) is not held up by this one's turns.
        async with first.turn(MAS, SIMPLE, 3), second.turn("other", SIMPLE, 0) as other:
            assert other.last_seq == 0


async def test_a_failed_turn_writes_nothing_and_releases_the_ledger(pg_url: str) -> None:
    async with opened(pg_url) as store:
        assert isinstance(store, PostgresStore)
        with pytest.raises(RuntimeError, match="checks failed"):
            async with store.turn(MAS, SIMPLE, 0) as turn:
                turn.append(batches()[:1])
                raise RuntimeError("checks failed")
        assert await store.load(MAS, SIMPLE) == []
        async with asyncio.timeout(10), store.turn(MAS, SIMPLE, 0) as turn:
            assert turn.last_seq == 0
        with pytest.raises(StoreError, match="batch 3 appended where batch 1 belongs"):
            async with store.turn(MAS, SIMPLE, 0) as turn:
                turn.append(batches()[2:])


async def test_other_servers_hear_of_each_commit(pg_url: str) -> None:
    async with opened(pg_url) as writer, opened(pg_url) as listener:
        assert isinstance(listener, PostgresStore)
        heard: list[int] = []
        carried: list[Batch] = []
        changed = asyncio.Event()

        def hear(seq: int, rows: Carried | None = None) -> None:
            heard.append(seq)
            if rows is not None:  # what the commit wrote rides along: no read needed
                assert rows.first == len(carried) + 1
                carried.extend(rows.batches(SIMPLE))
            changed.set()

        await listener.watch(MAS, "SimpleUCP", hear)
        await writer.append(MAS, SIMPLE, batches()[:1])
        await writer.append(MAS, SIMPLE, batches()[1:])
        async with asyncio.timeout(10):
            while 3 not in heard:
                changed.clear()
                await changed.wait()
        # A notification per commit, with its last seq (a poll may repeat one).
        assert 1 in heard and set(heard) == {1, 3}
        assert await listener.last_seq(MAS, "SimpleUCP") == 3
        # Each notification carried its commit's batches, as written.
        assert shape(carried) == shape(batches())
        assert [e._json for b in carried for e in b.entries] == [
            e.bindings_json for b in batches() for e in b.entries
        ]


async def test_a_database_of_another_schema_or_unreachable_is_refused(pg_url: str) -> None:
    async with opened(pg_url) as store:
        assert isinstance(store, PostgresStore)
        await store.pool.execute("UPDATE strabo_meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(StoreError, match="schema version 99, this strabo reads 1"):
        async with opened(pg_url):
            pass
    from strabo.serving import free_port

    url = f"postgresql://someone:secret@127.0.0.1:{free_port()}/nothing"
    with pytest.raises(StoreError, match="cannot open the database") as raised:
        async with opened(url):
            pass
    assert "secret" not in str(raised.value) and "someone:***@" in str(raised.value)
