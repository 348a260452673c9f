"""Several SyncServers in one process, sharing one PostgreSQL log.

Each server has its own ledgers and replica of the state, and reaches the log
through its own connections, as separate processes would (tests/syncserver/postgres/
test_instances.py runs them as processes, with kill -9). Attempts are spread
over the servers; conflicting ones race; every server's subscribers must see
every batch, in order, whichever server finalized it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from langshaw import ActionInstance, SocialState
from syncserver import Batch, Rejected, ServiceError, SyncServer
from syncserver._pgstore import PostgresStore
from tests.conftest import SIMPLE_CREATE, SIMPLE_CREATED, load

SIMPLE = load("atomic-ucp.lsh")
PURCHASE = load("purchase.lsh")
AGENTS = {
    "platform": ["SimpleUCP:Platform"],
    "business": ["SimpleUCP:Business"],
    "b": ["Purchase:Buyer"],
    "s": ["Purchase:Seller"],
}
ROLES = {"platform": {"Platform"}, "business": {"Business"}, "b": {"Buyer"}, "s": {"Seller"}}


@contextlib.asynccontextmanager
async def servers(url: str, count: int, **options: Any) -> AsyncIterator[list[SyncServer]]:
    async with contextlib.AsyncExitStack() as stack:
        started = []
        for _ in range(count):
            server = SyncServer.embedded([SIMPLE, PURCHASE], AGENTS, store=url, **options)
            started.append(await stack.enter_async_context(server))
        yield started


def create(cid: str) -> ActionInstance:
    return ActionInstance(SIMPLE.action("Create"), {"cid": cid, **SIMPLE_CREATE})


def created(cid: str) -> ActionInstance:
    return ActionInstance(
        SIMPLE.action("Created"), {"cid": cid, "Create": True, "id": f"k-{cid}", **SIMPLE_CREATED}
    )


def failed(cid: str) -> ActionInstance:
    reason = {"status": 400, "code": "invalid", "message": "no"}
    return ActionInstance(SIMPLE.action("Failed"), {"cid": cid, "Create": True, "reason": reason})


async def attempt(
    server: SyncServer, agent: str, instances: Sequence[ActionInstance], attempt_id: str | None
) -> Any:
    protocol = "Purchase" if instances[0].action.name in PURCHASE.actions else "SimpleUCP"
    try:
        return await server.attempt(
            "default", protocol, server.agent("default", agent), instances, attempt_id
        )
    except (Rejected, ServiceError) as exc:
        return exc


class Follower:
    """A subscriber on one server from batch 0: records what arrives, in order."""

    def __init__(self, server: SyncServer, protocol: str = "SimpleUCP") -> None:
        self.seqs: list[int] = []
        self.changed = asyncio.Event()
        ledger = server.ledgers[("default", protocol)]
        self.task = asyncio.create_task(self._run(ledger.subscribe(0)))

    async def _run(self, batches: AsyncIterator[Batch]) -> None:
        async for batch in batches:
            self.seqs.append(batch.seq)
            self.changed.set()

    async def until(self, seq: int, seconds: float = 10) -> None:
        async with asyncio.timeout(seconds):
            while not self.seqs or self.seqs[-1] < seq:
                self.changed.clear()
                await self.changed.wait()

    def stop(self) -> None:
        self.task.cancel()


def replay(batches: list[Batch]) -> None:
    """The log, replayed through the semantics, breaks no rule (its performers'
    roles included); numbered 1, 2, 3, ... with no hole."""
    assert [b.seq for b in batches] == list(range(1, len(batches) + 1))
    states = {"SimpleUCP": SocialState(SIMPLE), "Purchase": SocialState(PURCHASE)}
    for batch in batches:
        state = states[batch.protocol]
        for entry in batch.entries:
            violation = state.attempt([entry.instance], ROLES[entry.performer])
            assert violation is None, (batch.seq, entry, violation)


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_conflicting_attempts_over_three_servers_one_wins_each(
    pg_url: str, policy: str
) -> None:
    async with servers(pg_url, 3, policy=policy, batch_window_ms=5) as (a, b, c):
        followers = [Follower(s) for s in (a, b, c)]
        cids = [f"c{i}" for i in range(30)]
        # The same Create on all three servers at once: one accepted, two duplicates.
        results = await asyncio.gather(
            *(attempt(s, "platform", [create(cid)], f"{cid}-{n}")
              for cid in cids for n, s in enumerate((a, b, c)))
        )
        for i in range(len(cids)):
            outcomes = results[3 * i : 3 * i + 3]
            # One accepted; the others refused by the rule (never a store failure).
            assert sum(not isinstance(o, Exception) for o in outcomes) == 1, outcomes
            assert [o.code for o in outcomes if isinstance(o, Exception)] == ["duplicate"] * 2
        # Created and Failed exclude each other (nono): one of the two, on two servers.
        results = await asyncio.gather(
            *(attempt(s, "business", [make(cid)], None)
              for cid in cids for s, make in ((b, created), (c, failed)))
        )
        for i in range(len(cids)):
            outcomes = results[2 * i : 2 * i + 2]
            assert sum(not isinstance(o, Exception) for o in outcomes) == 1, outcomes
            assert [o.code for o in outcomes if isinstance(o, Exception)] in (["nono"], ["bound"])
        last = max(s.ledgers[("default", "SimpleUCP")].committed_seq for s in (a, b, c))
        for follower in followers:
            await follower.until(last)
            follower.stop()
            assert follower.seqs == list(range(1, last + 1))  # every batch, once, in order
        log = await a.read("default", "SimpleUCP", a.agent("default", "platform"), 0, 5000)
        assert log[-1].seq == last
        replay(log)
        assert sum(len(batch.entries) for batch in log) == 2 * len(cids)


async def test_a_resent_attempt_gets_its_first_answer_from_any_server(pg_url: str) -> None:
    async with servers(pg_url, 2) as (a, b):
        first = await attempt(a, "platform", [create("r1")], "same-id")
        again = await attempt(b, "platform", [create("r1")], "same-id")
        assert (again.seq, again.positions) == (first.seq, first.positions)
        # The id resent with other values (which the state refuses): not a resend.
        changed = ActionInstance(create("r1").action, {**create("r1").bindings, "currency": "EUR"})
        other = await attempt(b, "platform", [changed], "same-id")
        assert isinstance(other, ServiceError) and other.code == "id-reused"
        # Resent at once to both while the first is being finalized: one batch.
        racing = await asyncio.gather(
            attempt(a, "platform", [create("r3")], "racing"),
            attempt(b, "platform", [create("r3")], "racing"),
        )
        assert racing[0].seq == racing[1].seq
        log = await a.read("default", "SimpleUCP", a.agent("default", "platform"), 0, 100)
        assert [len(batch.entries) for batch in log] == [1, 1]


async def test_sayso_priority_holds_within_a_servers_window(pg_url: str) -> None:
    """Batched: a window is what arrives at one server within it. The buyer's
    PreferDate wins over the seller's Ship sent first, as on a single server;
    the other server's state then refuses a date for that purchase."""
    async with servers(pg_url, 2, policy="batched", batch_window_ms=200) as (a, b):

        def inst(name: str, **bindings: Any) -> ActionInstance:
            return ActionInstance(PURCHASE.action(name), bindings)

        await attempt(a, "b", [inst("RFQ", ID="p", item="pen", budget=9)], None)
        await attempt(b, "s", [inst("Quote", ID="p", qid="q", RFQ=True, item="pen", price=3)], None)
        accept = inst("Accept", ID="p", Quote=True, chosen="q", price=3, address="a")
        await attempt(a, "b", [accept], None)
        ship = asyncio.create_task(attempt(a, "s", [inst(
            "Ship", ID="p", Accept=True, item="pen", address="a", delivery_date="tuesday")], None))
        prefer = asyncio.create_task(attempt(a, "b", [inst(
            "PreferDate", ID="p", Accept=True, delivery_date="monday")], None))
        shipped, preferred = await asyncio.gather(ship, prefer)
        assert preferred.batch.entries[0].instance.name == "PreferDate"
        assert isinstance(shipped, Rejected) and shipped.code == "bound"
        late = await attempt(b, "s", [inst(
            "Ship", ID="p", Accept=True, item="pen", address="a", delivery_date="friday")], None)
        assert isinstance(late, Rejected) and late.code == "bound"


class FailingOnce(PostgresStore):
    """Fails the write of its first non-empty turn, after the checks ran."""

    failures = 1

    async def _write(self, conn: Any, query: str, *args: Any) -> list[Any]:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full (simulated)")
        return await super()._write(conn, query, *args)


async def test_a_failed_turn_is_answered_503_and_rebuilt_from_the_log(pg_url: str) -> None:
    async with servers(pg_url, 1) as (other,):
        await attempt(other, "platform", [create("before")], "b1")
        failing = SyncServer.embedded([SIMPLE, PURCHASE], AGENTS, store=FailingOnce(pg_url))
        async with failing:
            lost = await attempt(failing, "platform", [create("x")], "x1")
            assert isinstance(lost, ServiceError) and lost.code == "store-failed"
            # The state no longer holds 'x'; the same attempt, resent, is finalized.
            done = await attempt(failing, "platform", [create("x")], "x1")
            assert not isinstance(done, Exception) and done.seq == 2
            twice = await attempt(other, "platform", [create("x")], "x2")
            assert isinstance(twice, Rejected) and twice.code == "duplicate"
        log = await other.read("default", "SimpleUCP", other.agent("default", "platform"), 0, 99)
        replay(log)
        assert [b.entries[0].instance["cid"] for b in log] == ["before", "x"]


async def test_a_server_follows_commits_when_notifications_are_lost(pg_url: str) -> None:
    async with servers(pg_url, 2) as (a, b):
        store = b.store
        assert isinstance(store, PostgresStore) and store._listener is not None
        follower = Follower(b)
        await attempt(a, "platform", [create("n1")], None)
        await follower.until(1)  # told by a notification
        # Cut b's listening connection: what a commits meanwhile, b finds by polling
        # when it reconnects, or at its next poll.
        await a.store.pool.execute(  # type: ignore[attr-defined]
            "SELECT pg_terminate_backend($1)", store._listener.get_server_pid()
        )
        for i in range(2, 6):
            await attempt(a, "platform", [create(f"n{i}")], None)
        await follower.until(5)
        follower.stop()
        assert follower.seqs == [1, 2, 3, 4, 5]
        # b's replica holds them: Created is enabled there for n5.
        done = await attempt(b, "business", [created("n5")], None)
        assert not isinstance(done, Exception) and done.seq == 6


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_an_id_reused_on_a_server_that_has_not_followed_it_yet_is_refused(
    pg_url: str, policy: str
) -> None:
    """Server a finalizes an attempt under an id; at once (b has not followed
    a's batch: its listening connection is cut, so it hears nothing) the same
    agent sends the id with other instances to b: 409 id-reused, and the log
    holds the id once. The same instances resent to b get the first answer."""
    options = {"policy": policy, "batch_window_ms": 2} if policy == "batched" else {}
    async with servers(pg_url, 2, **options) as (a, b):
        store = b.store
        assert isinstance(store, PostgresStore) and store._listener is not None
        await a.store.pool.execute(  # type: ignore[attr-defined]
            "SELECT pg_terminate_backend($1)", store._listener.get_server_pid()
        )
        for i in range(5):
            first = await attempt(a, "platform", [create(f"a{i}")], f"id-{i}")
            reused = await attempt(b, "platform", [create(f"b{i}")], f"id-{i}")
            assert isinstance(reused, ServiceError) and reused.code == "id-reused", reused
            again = await attempt(b, "platform", [create(f"a{i}")], f"id-{i}")
            assert (again.seq, again.positions) == (first.seq, first.positions), again
        log = await a.read("default", "SimpleUCP", a.agent("default", "platform"), 0, 100)
        ids = [e.attempt_id for batch in log for e in batch.entries]
        assert sorted(ids) == [f"id-{i}" for i in range(5)], ids
        replay(log)
