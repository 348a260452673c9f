"""Peer to peer with SQLite logs: one transaction per request, not per message.

What a peer's request brings is written in one transaction before the answer;
acknowledgements ride on the next transaction; an attempt a handler makes on a
received message is written with it. The guarantees stay: a message answered
accepted (or duplicate) is in the receiver's log, and a commit that fails
answers "busy" and acknowledges nothing, the rows it could not write going
first into the next commit. Transactions are counted on the store's own
connection (``set_trace_callback``); SimpleUCP, over an in-memory network.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from peach import FeasibleAction, PeachAdapter
from peach.peer import MemoryNetwork, PeerExecutor, SQLitePeerStore
from peach.peer import _store as peer_store
from peach.peer import _wire as wire
from peach.peer.directory import AGENT_HEADER, SIGNATURE_HEADER, sign
from tests.conftest import SIMPLE_CREATE, SIMPLE_CREATED, load
from tests.peach.test_peer import directory, settle

SIMPLE = load("atomic-ucp.lsh")
ROLES = {"platform": ["Platform"], "business": ["Business"]}


@contextmanager
def commits(executor: PeerExecutor) -> Iterator[list[str]]:
    """The transactions committed on ``executor``'s SQLite log meanwhile (each
    one statement: COMMIT, or a statement of its own outside BEGIN)."""
    store = executor.store
    assert isinstance(store, SQLitePeerStore)
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        store.db.set_trace_callback(None)
        depth, done = 0, []
        for statement in statements:
            if statement == "BEGIN":
                depth = 1
            elif statement == "COMMIT":
                depth = 0
                done.append(statement)
            elif not depth and statement.split()[0] in ("INSERT", "DELETE"):
                done.append(statement)
        statements[:] = done


def agents(
    tmp_path: Path, network: MemoryNetwork, stores: tuple[bool, bool] = (True, True)
) -> tuple[PeerExecutor, PeerExecutor, PeachAdapter, PeachAdapter]:
    roles = directory([SIMPLE], ROLES)
    platform_ex, business_ex = (
        PeerExecutor(name, roles, store=tmp_path / f"{name}.db" if sqlite else None,
                     transport=network)
        for name, sqlite in zip(ROLES, stores, strict=True)
    )  # fmt: skip
    platform = PeachAdapter("platform", SIMPLE, "Platform", platform_ex)
    business = PeachAdapter("business", SIMPLE, "Business", business_ex)
    return platform_ex, business_ex, platform, business


async def create(platform: PeachAdapter) -> dict[str, object]:
    [created] = await platform.attempt([platform.build_action("Create", SIMPLE_CREATE)])
    return dict(created.keys)


async def test_the_messages_of_one_request_are_written_in_one_transaction(
    tmp_path: Path,
) -> None:
    network = MemoryNetwork()
    platform_ex, business_ex, platform, business = agents(tmp_path, network, (False, True))
    async with platform, business:
        before = network.requests
        with commits(business_ex) as written:
            # attempt() gives the loop no turn: all five go in one request.
            for _ in range(5):
                await create(platform)
            await settle([platform_ex, business_ex])
        assert written == ["COMMIT"]
        assert network.requests == before + 1
        assert [r.instances[0]["action"] for r in business_ex.store.load()] == ["Create"] * 5


async def test_acknowledgements_wait_for_a_request_or_a_few(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt's transaction is on its way to the peers: it carries the
    acknowledgements only once ``ACKS_AT_ONCE`` wait; a request's carries them
    all, and so does closing the store."""
    monkeypatch.setattr(peer_store, "ACKS_AT_ONCE", 4)
    network = MemoryNetwork()
    platform_ex, business_ex, platform, business = agents(tmp_path, network, (True, False))
    async with platform, business:
        with commits(platform_ex) as written:
            for _ in range(3):
                await create(platform)
            await settle([platform_ex, business_ex])
        assert len(written) == 3  # the attempts; the acknowledgements, none of their own
        with commits(platform_ex) as written:
            await create(platform)  # 3 acknowledgements wait: not written with it
        assert written == ["COMMIT"]
        assert [seq for _, seq, _ in platform_ex.store.outbox()] == [1, 2, 3, 4]
        await settle([platform_ex, business_ex])  # 4 wait now
        await create(platform)  # its transaction writes them
        assert [seq for _, seq, _ in platform_ex.store.outbox()] == [5]
        await settle([platform_ex, business_ex])
    # Stopped: what was acknowledged since is written too.
    again = SQLitePeerStore(tmp_path / "platform.db")
    again.open("platform")
    assert again.outbox() == [] and len(again.load()) == 5
    again.close()


async def test_a_requests_transaction_writes_the_acknowledgements_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peer_store, "ACKS_AT_ONCE", 1000)
    network = MemoryNetwork()
    platform_ex, business_ex, platform, business = agents(tmp_path, network)

    @business.on_enabled("Created")
    async def answer(feasible: FeasibleAction) -> None:
        await business.attempt([feasible.bind(id=f"chk-{feasible.fixed['cid']}", **SIMPLE_CREATED)])

    async with platform, business:
        for _ in range(3):
            await create(platform)
        await settle([platform_ex, business_ex])
        # Each Create was acknowledged; Business's Createds came as requests,
        # whose transactions on Platform wrote the acknowledgements waiting (the
        # last Create's may come after the last request: then it waits still).
        assert len(platform_ex.store.load()) == 6
        assert {seq for _, seq, _ in platform_ex.store.outbox()} <= {5}


async def test_an_attempt_made_on_a_received_message_is_written_with_it(tmp_path: Path) -> None:
    network = MemoryNetwork()
    platform_ex, business_ex, platform, business = agents(tmp_path, network)

    @business.on_enabled("Created")
    async def answer(feasible: FeasibleAction) -> None:
        await business.attempt([feasible.bind(id="chk-1", **SIMPLE_CREATED)])

    async with platform, business:
        await settle([platform_ex, business_ex])
        with commits(business_ex) as written:
            keys = await create(platform)
            await settle([platform_ex, business_ex])
        assert written == ["COMMIT"]  # the Create received and the Created, together
        assert [(r.performer, r.instances[0]["action"]) for r in business_ex.store.load()] == [
            ("platform", "Create"),
            ("business", "Created"),
        ]
        assert [i.name for _, i, _ in platform.history(keys)] == ["Create", "Created"]


def envelope(platform_ex: PeerExecutor) -> tuple[dict[str, str], bytes]:
    """Platform's log as one request to Business, signed."""
    body = wire.envelope(platform_ex.mas, "platform", platform_ex.store.load())
    return {AGENT_HEADER: "platform", SIGNATURE_HEADER: sign("platform-secret", body)}, body


async def test_a_commit_that_fails_acknowledges_nothing_and_is_written_first_later(
    tmp_path: Path,
) -> None:
    network = MemoryNetwork()
    platform_ex, business_ex, platform, business = agents(tmp_path, network, (False, True))
    async with platform:
        network.disconnect("business")  # (it is not started: nothing is delivered)
        keys = await create(platform)
    headers, body = envelope(platform_ex)
    async with business:
        store = business_ex.store
        assert isinstance(store, SQLitePeerStore)
        store.db.execute("PRAGMA query_only = ON")  # every write fails from here
        for _ in range(2):
            status, answer = await business_ex._inbox.endpoint("messages", headers, body)
            assert (status, answer["results"]) == (200, [{"seq": 1, "status": "busy"}])
        assert store.load() == []
        # The state has it, and acts on it; its attempt writes the Create first.
        assert "Created" in [f.name for f in business.enabled(keys)]
        store.db.execute("PRAGMA query_only = OFF")
        created = business.build_action("Created", {**keys, "id": "chk", **SIMPLE_CREATED})
        await business.attempt([created])
        assert [r.instances[0]["action"] for r in store.load()] == ["Create", "Created"]
        status, answer = await business_ex._inbox.endpoint("messages", headers, body)
        assert answer["results"] == [{"seq": 1, "status": "duplicate"}]
        assert len(store.load()) == 2


async def test_a_message_never_written_is_accepted_again_after_a_restart(tmp_path: Path) -> None:
    network = MemoryNetwork()
    platform_ex, business_ex, platform, business = agents(tmp_path, network, (False, True))
    async with platform:
        network.disconnect("business")
        keys = await create(platform)
    headers, body = envelope(platform_ex)
    async with business:
        store = business_ex.store
        assert isinstance(store, SQLitePeerStore)
        store.db.execute("PRAGMA query_only = ON")
        _, answer = await business_ex._inbox.endpoint("messages", headers, body)
        assert answer["results"][0]["status"] == "busy"
        store.db.execute("PRAGMA query_only = OFF")
        store._queued.clear()  # as if the process died here: what was queued is lost
    again = PeerExecutor("business", business_ex.directory, store=tmp_path / "business.db",
                         transport=network)  # fmt: skip
    business = PeachAdapter("business", SIMPLE, "Business", again)
    async with business:
        assert business.history(keys) == []
        _, answer = await again._inbox.endpoint("messages", headers, body)
        assert answer["results"] == [{"seq": 1, "status": "accepted"}]
        assert [r.instances[0]["action"] for r in again.store.load()] == ["Create"]
