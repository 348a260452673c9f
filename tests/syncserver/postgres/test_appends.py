"""Turns that hold the ledger for one statement (``PostgresStore.append_apart``).

A server checks its attempts against its replica first, then one statement
takes the ledger, reads what the replica missed and writes, unless a missed
batch touches an enactment of the attempts (a clash): then nothing is written,
the server catches up and checks again. Missed batches that touch other
enactments are applied after the commit, and published before the server's
own. What the tests pin: the store writes or refuses as said, excludes a turn
that holds the ledger, and a server whose replica is behind (it hears of no
commit) answers as one that is not: accepted where the log allows it, in the
log's order on its streams.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from syncserver import Batch, Entry, Rejected, SyncServer
from syncserver._pgsql import APPEND as _APPEND
from syncserver._pgstore import MissedRows, PostgresStore, _ledger_key
from syncserver.store import root_text
from tests.syncserver.postgres.test_servers import (
    Follower,
    attempt,
    created,
    replay,
    servers,
)
from tests.syncserver.postgres.test_store import MAS, SIMPLE, create, opened, shape

Rows = list[tuple[int, int, str, str, str, str, str | None]]


def rows(*cids: str) -> tuple[Rows, set[str]]:
    """One Create per cid, a batch each (relative seqs 1, 2, ...), and their roots."""
    found: Rows = []
    for n, cid in enumerate(cids, 1):
        bindings = json.dumps(create(cid).bindings, separators=(",", ":"))
        found.append((n, 0, root_text((cid,)), "Create", "platform", bindings, f"id-{cid}"))
    return found, {root_text((cid,)) for cid in cids}


def created_by(store: Any) -> list[str]:
    return [b.entries[0].instance["cid"] for b in store]


async def test_an_append_writes_unless_a_missed_batch_touches_its_enactments(
    pg_url: str,
) -> None:
    async with opened(pg_url) as first, opened(pg_url) as second:
        assert isinstance(first, PostgresStore) and isinstance(second, PostgresStore)
        await first.append(MAS, SIMPLE, [Batch("SimpleUCP", 1, (Entry(create("c1"), "p", "a"),))])
        # The second store's replica is at 0: batch 1 touches c1, not c2 or c3.
        written, roots = rows("c2", "c3")
        done = await second.append_apart(MAS, SIMPLE, 0, written, roots)
        assert isinstance(done, MissedRows) and not done.clash
        assert done.last_seq == 1 and done.missed_roots == {root_text(("c1",))}
        assert created_by(done.missed) == ["c1"]  # decoded when read
        log = await first.load(MAS, SIMPLE)
        assert [b.seq for b in log] == [1, 2, 3] and created_by(log) == ["c1", "c2", "c3"]
        assert shape(log[1:]) == shape(
            [Batch("SimpleUCP", 2, (Entry(create("c2"), "platform", "id-c2"),)),
             Batch("SimpleUCP", 3, (Entry(create("c3"), "platform", "id-c3"),))]
        )
        # From 1, batches 2 and 3 are missed; 3 touches c3: refused, nothing written.
        written, roots = rows("c4", "c3")
        refused = await first.append_apart(MAS, SIMPLE, 1, written, roots)
        assert refused.clash and refused.last_seq == 3
        assert created_by(refused.missed) == ["c2", "c3"]
        assert len(await first.load(MAS, SIMPLE)) == 3
        # Nothing to write: what was missed, and the last seq.
        nothing = await first.append_apart(MAS, SIMPLE, 2, [], {root_text(("c9",))})
        assert (nothing.clash, nothing.last_seq, created_by(nothing.missed)) == (False, 3, ["c3"])
        assert await first.last_seq(MAS, "SimpleUCP") == 3


async def test_an_append_waits_while_a_turn_holds_the_ledger(pg_url: str) -> None:
    async with opened(pg_url) as first, opened(pg_url) as second:
        assert isinstance(first, PostgresStore) and isinstance(second, PostgresStore)
        written, roots = rows("w1")
        columns = [list(column) for column in zip(*written, strict=True)]
        key = _ledger_key(MAS, "SimpleUCP")
        async with first.turn(MAS, SIMPLE, 0) as turn:
            # Given 200 ms, an append gives up: the turn holds the ledger.
            async with second.pool.acquire() as conn, conn.transaction():
                await conn.execute("SET LOCAL lock_timeout = '200ms'")
                with pytest.raises(asyncpg.LockNotAvailableError):
                    await conn.fetch(_APPEND, MAS, "SimpleUCP", 0, key, list(roots), 1,
                                     *columns, "", None, None)
            turn.append([Batch("SimpleUCP", 1, (Entry(create("t1"), "p", "a"),))])
        # Once it committed, the append follows it.
        done = await second.append_apart(MAS, SIMPLE, 0, written, roots)
        assert not done.clash and done.last_seq == 1
        assert created_by(await second.load(MAS, SIMPLE)) == ["t1", "w1"]


@contextlib.asynccontextmanager
async def deaf(server: SyncServer) -> AsyncIterator[None]:
    """The server hears of no other server's commit (no notification, no poll
    reaches its ledger): its replica stays behind until its own turns read."""
    store = server.store
    assert isinstance(store, PostgresStore)
    key = ("default", "SimpleUCP")
    heard = store._watchers[key]
    store._watchers[key] = lambda seq: None
    try:
        yield
    finally:
        store._watchers[key] = heard


class Counting(PostgresStore):
    """Counts the turns that hold the ledger for a transaction (``turn``), and
    records each append's outcome: (clash, seqs of the batches it missed)."""

    held = 0

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.appends: list[tuple[bool, list[int]]] = []

    def turn(self, *args: Any) -> Any:
        self.held += 1
        return super().turn(*args)

    async def append_apart(self, *args: Any) -> MissedRows:
        done = await super().append_apart(*args)
        self.appends.append((done.clash, [b.seq for b in done.missed]))
        return done


async def test_a_server_behind_answers_as_one_that_is_not(pg_url: str) -> None:
    """b does not hear a's commits. Its attempt on an enactment a wrote to
    clashes, so it catches up and checks again: accepted, not refused. Its
    attempt on another enactment is written at once, after a's batches, which
    b applies after its commit and streams before its own."""
    store = Counting(pg_url)
    async with servers(pg_url, 1) as (a,), SyncServer.embedded(
        [SIMPLE], {"platform": ["SimpleUCP:Platform"], "business": ["SimpleUCP:Business"]},
        store=store,
    ) as b, deaf(b):
        follower = Follower(b)
        await attempt(a, "platform", [create("x")], "a1")
        done = await attempt(b, "business", [created("x")], "b1")  # b lacks batch 1
        assert not isinstance(done, Exception) and done.seq == 2, done
        await attempt(a, "platform", [create("y")], "a2")  # 3: b does not know y
        done = await attempt(b, "platform", [create("z")], "b2")
        assert not isinstance(done, Exception) and done.seq == 4
        done = await attempt(b, "business", [created("y")], "b3")  # b applied 3 meanwhile
        assert not isinstance(done, Exception) and done.seq == 5
        again = await attempt(b, "platform", [create("y")], "b4")
        assert isinstance(again, Rejected) and again.code == "duplicate"
        await follower.until(5)
        follower.stop()
        assert follower.seqs == [1, 2, 3, 4, 5]  # every batch, once, in the log's order
        assert store.held == 0  # no turn had to hold the ledger while checking
        # Created x clashed with batch 1, then went; Create z went past batch 3.
        assert store.appends == [(True, [1]), (False, []), (False, [3]), (False, []), (False, [])]
        log = await a.read("default", "SimpleUCP", a.agent("default", "platform"), 0, 99)
        replay(log)


class Clashing(Counting):
    """Says its first two appends clash (as if another server kept writing to
    the attempts' enactments): the turn then holds the ledger while checking."""

    clashes = 2

    async def append_apart(self, mas: str, protocol: Any, after: int, *args: Any) -> MissedRows:
        if self.clashes:
            self.clashes -= 1
            refused = MissedRows(after, [], protocol)
            refused.clash = True
            return refused
        return await super().append_apart(mas, protocol, after, *args)


async def test_after_two_clashes_a_turn_holds_the_ledger_while_it_checks(pg_url: str) -> None:
    store = Clashing(pg_url)
    agents = {"platform": ["SimpleUCP:Platform"]}
    async with SyncServer.embedded([SIMPLE], agents, store=store) as server:
        done = await attempt(server, "platform", [create("h1")], "h1")
        assert not isinstance(done, Exception) and done.seq == 1
        assert (store.clashes, store.held) == (0, 1)
        done = await attempt(server, "platform", [create("h2")], "h2")  # one statement again
        assert not isinstance(done, Exception) and done.seq == 2 and store.held == 1
        log = await server.read("default", "SimpleUCP", server.agent("default", "platform"), 0, 9)
        assert created_by(log) == ["h1", "h2"]
