"""The replicas behind ``GET .../enactment`` stay what the log says: checked
against a state rebuilt from the log after every step."""

from __future__ import annotations

import asyncio

from langshaw import ActionInstance, SocialState
from syncserver._views import Views
from syncserver.batch import Batch, Entry
from tests.conftest import SIMPLE_CREATE, SIMPLE_CREATED, load

SIMPLE = load("atomic-ucp.lsh")


def batch(seq: int, action: str, cid: str, **bindings: object) -> Batch:
    instance = ActionInstance(SIMPLE.actions[action], {"cid": cid, **bindings})
    return Batch(SIMPLE.name, seq, (Entry(instance, "agent"),))


def rebuilt(log: list[Batch], root: tuple[str]) -> SocialState:
    state = SocialState(SIMPLE)
    for b in log:
        state.apply(e.instance for e in b.entries if e.instance.bindings["cid"] == root[0])
    return state


def same(a: SocialState, b: SocialState, root: tuple[str]) -> bool:
    return all(
        [repr(e) for e in a.enabled(role, root)] == [repr(e) for e in b.enabled(role, root)]
        for role in SIMPLE.roles
    )


async def test_a_kept_replica_follows_the_commits_and_misses_none_while_built() -> None:
    views = Views(SIMPLE, kept=1)
    log = [batch(1, "Create", "c1", **SIMPLE_CREATE), batch(2, "Create", "c2", **SIMPLE_CREATE)]

    async def read_c1() -> list[Batch]:
        # While the log is read, a batch of c1 commits that the read does not hold.
        snapshot = [b for b in log if b.entries[0].instance.bindings["cid"] == "c1"]
        committed = batch(3, "Created", "c1", Create=True, id="x", **SIMPLE_CREATED)
        log.append(committed)
        views.committed(committed)
        await asyncio.sleep(0)
        return snapshot

    replica = await views.replica(("c1",), read_c1)
    assert same(replica, rebuilt(log, ("c1",)), ("c1",)) and len(views) == 1
    # Kept: the next commit of c1 reaches it, and reading it again reads no log.
    more = batch(4, "Complete", "c1", Created=True, id="x", payment_data={}, risk_signals={})
    log.append(more)
    views.committed(more)

    async def no_read() -> list[Batch]:
        raise AssertionError("a kept replica is not read again")

    again = await views.replica(("c1",), no_read)
    assert again is replica and same(again, rebuilt(log, ("c1",)), ("c1",))
    # One kept at most: reading c2 drops c1; a reload drops them all.
    async def read_c2() -> list[Batch]:
        return [b for b in log if b.entries[0].instance.bindings["cid"] == "c2"]

    await views.replica(("c2",), read_c2)
    assert len(views) == 1
    views.clear()
    assert len(views) == 0
