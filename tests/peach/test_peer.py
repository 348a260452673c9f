"""Peer to peer: what a receiver refuses, how the verifier's decentralized
verdict shows up at run time, and what a misbehaving network cannot break.

The adapter API itself is run on the PeerExecutor by tests/peach/test_adapter.py;
killed processes by tests/hostile/test_peer_kill.py.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from langshaw import ActionInstance, LangshawProtocol, SocialState
from langshaw.verify import verify
from peach import ActionRejected, FeasibleAction, LocalExecutor, PeachAdapter
from peach.peer import Directory, Faults, MemoryNetwork, PeerExecutor, SQLitePeerStore
from peach.peer.directory import AGENT_HEADER, SIGNATURE_HEADER, sign
from strabo.serving import free_port
from syncserver import SyncServer
from tests.conftest import FIXTURES, load, paper

NONO = LangshawProtocol.load(FIXTURES / "lsh" / "faulty" / "unsafe-nono.lsh")
LOGISTICS = load("logistics.lsh")


def directory(
    protocols: Sequence[LangshawProtocol], roles: Mapping[str, Sequence[str]], http: bool = False
) -> Directory:
    agents: dict[str, dict[str, Any]] = {}
    for agent, played in roles.items():
        agents[agent] = {"roles": list(played), "token": f"{agent}-secret"}
        if http:
            agents[agent]["url"] = f"http://127.0.0.1:{free_port()}"
    return Directory.of(protocols, agents)


async def settle(executors: Sequence[PeerExecutor], seconds: float = 20.0) -> None:
    """Wait until every message is acknowledged and none waits for its context."""

    async def quiet() -> None:
        while any(e.outstanding() or e.waiting() for e in executors):
            events = [e.progress for e in executors]
            for event in events:
                event.clear()
            if not any(e.outstanding() or e.waiting() for e in executors):
                return
            waits = [asyncio.ensure_future(event.wait()) for event in events]
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()

    await asyncio.wait_for(quiet(), seconds)


def replay(protocol: LangshawProtocol, executor: PeerExecutor, roles: Directory) -> None:
    """An agent's log, replayed in its own order: every message must be legal
    where it was accepted (no agent ever kept a violation)."""
    state = SocialState(protocol)
    for record in executor.store.load():
        if record.protocol != protocol.name:
            continue
        instances = [
            ActionInstance(protocol.actions[i["action"]], i["bindings"]) for i in record.instances
        ]
        played = roles.peers[record.performer].plays(protocol.name)
        violation = state.attempt(instances, played)
        assert violation is None, (executor.agent, record, violation)


def known(executor: PeerExecutor, protocol: str) -> dict[Any, Any]:
    return {k: dict(v.bindings) for k, v in executor._ledgers[protocol].known.items()}


# The verifier's verdict, at run time ---------------------------------------------------


def test_the_verifier_calls_the_nono_sample_unsafe_only_decentralized() -> None:
    assert verify(NONO, semantics="shared").safe is True
    report = verify(NONO, semantics="decentralized")
    assert report.safe is False
    assert {(c.rule, frozenset(c.actions)) for c in report.conflicts} == {
        ("nono", frozenset({"Ship", "Withdraw"}))
    }


async def test_concurrent_actions_in_a_nono_conflict_peer_to_peer() -> None:
    """What the verifier's trace says happens: the Seller ships and the Buyer
    withdraws, each on what it knew; each refuses the other's act with the rule."""
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]})
    network = MemoryNetwork()
    buyer_ex, seller_ex = (PeerExecutor(a, roles, transport=network) for a in ("buyer", "seller"))
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    async with buyer, seller:
        [order] = await buyer.attempt([buyer.build_action("Order", {"item": "pen"})])
        await seller.sync()
        # Both act before hearing of the other (the network is down for a
        # moment): attempt() never waits for peers.
        network.disconnect("buyer")
        network.disconnect("seller")
        [ship] = await seller.attempt(
            [seller.build_action("Ship", {**order.keys, "tracking": "T1"})]
        )
        [withdraw] = await buyer.attempt(
            [buyer.build_action("Withdraw", {**order.keys, "reason": "late"})]
        )
        for executor in (buyer_ex, seller_ex):
            await network.listen(executor.me, executor._inbox.endpoint)
            for wake in executor._wake.values():
                wake.set()  # (send now rather than after the back-off)
        await settle([buyer_ex, seller_ex])
    got = {(e.agent, r.incoming, r.rule) for e in (buyer_ex, seller_ex) for r in e.refusals()}
    assert got == {
        ("buyer", True, "nono"),  # the buyer refused the Ship
        ("buyer", False, "nono"),  # the seller refused the Withdraw
        ("seller", True, "nono"),
        ("seller", False, "nono"),
    }
    [refused] = [r for r in buyer_ex.refusals() if r.incoming]
    assert "conflicts with what this agent knows" in refused.message
    # Each agent kept its own act, and refused the other's.
    ship_id, withdraw_id = ("Ship", (ship["id"],)), ("Withdraw", (withdraw["id"],))
    assert withdraw_id in known(buyer_ex, "UnsafeNoNo")
    assert ship_id not in known(buyer_ex, "UnsafeNoNo")
    assert ship_id in known(seller_ex, "UnsafeNoNo")
    assert withdraw_id not in known(seller_ex, "UnsafeNoNo")
    for executor in (buyer_ex, seller_ex):
        replay(NONO, executor, roles)


async def test_on_a_shared_state_the_later_attempt_is_rejected_instead() -> None:
    server = SyncServer.embedded([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]})
    buyer = PeachAdapter("buyer", NONO, "Buyer", LocalExecutor(server))
    seller = PeachAdapter("seller", NONO, "Seller", LocalExecutor(server))
    async with buyer, seller:
        [order] = await buyer.attempt([buyer.build_action("Order", {"item": "pen"})])
        await seller.sync()
        await seller.attempt([seller.build_action("Ship", {**order.keys, "tracking": "T1"})])
        withdraw = ActionInstance(
            NONO.action("Withdraw"), {**order.keys, "Order": True, "reason": "late"}
        )
        with pytest.raises(ActionRejected) as caught:
            await buyer.attempt([withdraw])
        assert caught.value.rule == "nono"


# Random play on a misbehaving network ----------------------------------------------------

# The UCP protocols as the paper prints them (untyped: any value binds).
SAFE = [
    "logistics.lsh",
    "flexible-purchase.lsh",
    "paper/atomic-ucp.lsh",
    "paper/incremental-ucp.lsh",
    # Safe since Award and Cancel exclude each other (nono, both the
    # Customer's): no Hotel confirms a request cancelled after the award.
    "contract-net.lsh",
]
# Unsafe decentralized, and whether random play meets a conflict in a few runs
# (Purchase's races are near the start).
UNSAFE = {"purchase.lsh": True}


def value_for(feasible: FeasibleAction, attribute: str, rng: random.Random) -> Any:
    """A value the attribute's type accepts (protocols here use simple types)."""
    state = feasible._state
    assert state is not None
    for candidate in (f"v{rng.randrange(3)}", rng.randrange(100), True, {}, []):
        if state.type_violation(feasible.name, attribute, candidate) is None:
            return candidate
    raise AssertionError(f"no simple value fits {attribute}")


async def play(
    name: str, faults: Faults, seed: int, rounds: int = 25
) -> tuple[LangshawProtocol, Directory, list[PeerExecutor]]:
    """One agent per role, each performing a random enabled action per round,
    all concurrently, on a network that drops, repeats and delays messages."""
    protocol = paper(name[6:]) if name.startswith("paper/") else load(name)
    exclusive = {a for group in (*protocol.nono, *protocol.nogo) for a in group}
    rng = random.Random(seed)
    roles = directory([protocol], {r.lower(): [r] for r in protocol.roles})
    network = MemoryNetwork(faults)
    executors = [
        PeerExecutor(r.lower(), roles, transport=network, retry_initial=0.005, retry_max=0.05)
        for r in protocol.roles
    ]
    adapters = [
        PeachAdapter(e.agent, protocol, r, e)
        for e, r in zip(executors, protocol.roles, strict=True)
    ]
    for adapter in adapters:
        await adapter.start()
    try:
        for _ in range(rounds):

            async def act(adapter: PeachAdapter) -> None:
                options = adapter.enabled()
                if len(adapter.enactments()) >= 4:
                    options = [o for o in options if not o.initiating]
                if not options:
                    return
                # Favour the actions of nono and nogo clauses: where races matter.
                racy = [o for o in options if o.name in exclusive]
                chosen = rng.choice(racy if racy and rng.random() < 0.6 else options)
                bindings = {a: value_for(chosen, a, rng) for a in chosen.to_bind}
                await adapter.attempt([chosen.bind(**bindings)])

            await asyncio.gather(*(act(a) for a in adapters))
            # Half the rounds start once everything is delivered, half at once:
            # agents then act on what they know while messages are in flight.
            if rng.random() < 0.5:
                await settle(executors)
        await settle(executors)
    finally:
        for adapter in adapters:
            await adapter.stop()
    return protocol, roles, executors


@pytest.mark.parametrize("name", SAFE)
@pytest.mark.parametrize("seed", [1, 2])
async def test_a_safe_protocol_never_conflicts_on_a_bad_network(name: str, seed: int) -> None:
    faults = Faults(drop=0.2, lose_answer=0.2, duplicate=0.3, delay=0.002, seed=seed)
    protocol, roles, executors = await play(name, faults, seed)
    assert verify(protocol, semantics="decentralized").safe is True
    assert [r for e in executors for r in e.refusals()] == []
    views = [known(e, protocol.name) for e in executors]
    assert views[0] and all(v == views[0] for v in views)  # every agent knows everything
    for executor in executors:
        replay(protocol, executor, roles)


@pytest.mark.parametrize("name", sorted(UNSAFE))
async def test_an_unsafe_protocol_conflicts_only_as_the_verifier_says(name: str) -> None:
    """Random concurrent play meets the verifier's conflicts; each is refused by
    the agent that sees it (with the verifier's rule, or "dependency" for what
    followed a refused act), and no agent ever keeps a violation."""
    rules = {c.rule for c in verify(load(name), semantics="decentralized").conflicts}
    seen: set[str] = set()
    for seed in range(1, 7):
        faults = Faults(drop=0.2, lose_answer=0.2, duplicate=0.3, delay=0.002, seed=seed)
        protocol, roles, executors = await play(name, faults, seed, rounds=30)
        for executor in executors:
            replay(protocol, executor, roles)  # refused, never kept
            seen.update(r.rule for r in executor.refusals())
    if UNSAFE[name]:
        assert seen & rules, (name, seen)
    assert seen <= rules | {"dependency"}, (name, seen)


# What a receiver refuses -------------------------------------------------------------------


class Forger:
    """Speaks to a peer's HTTP endpoint as ``agent`` (with its secret, or not)."""

    def __init__(self, url: str, agent: str, secret: str) -> None:
        self.url, self.agent, self.secret = url, agent, secret
        self.seq = 0

    async def send(
        self,
        protocol: str,
        instances: list[dict[str, Any]],
        context: list[Any] | None = None,
        *,
        seq: int | None = None,
        headers: Mapping[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, dict[str, Any]]:
        if seq is None:
            self.seq += 1
            seq = self.seq
        message = {
            "protocol": protocol,
            "seq": seq,
            "instances": instances,
            "context": context or [],
        }
        body = (
            raw
            if raw is not None
            else json.dumps(
                {"mas": "default", "sender": self.agent, "messages": [message]}
            ).encode()
        )
        sent = {AGENT_HEADER: self.agent, SIGNATURE_HEADER: sign(self.secret, body)}
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{self.url}/peer/messages",
                content=body,
                headers=sent if headers is None else dict(headers),
            )
        answer = response.json()
        if response.status_code == 200:
            return 200, answer["results"][0]
        return response.status_code, answer["error"]


async def test_a_receiver_refuses_what_its_sender_could_not_have_done(tmp_path: Path) -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    seller_ex = PeerExecutor("seller", roles, store=tmp_path / "seller.db")
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    url = roles.peers["seller"].url
    assert url is not None
    buyer = Forger(url, "buyer", "buyer-secret")
    order = {"action": "Order", "bindings": {"id": "o1", "item": "pen"}}
    withdraw = {"action": "Withdraw", "bindings": {"id": "o1", "Order": True, "reason": "r"}}
    async with seller:
        # Who speaks: unsigned, unknown, forged signature.
        status, error = await buyer.send("UnsafeNoNo", [order], headers={})
        assert (status, error["code"]) == (401, "unsigned")
        status, error = await Forger(url, "mallory", "x").send("UnsafeNoNo", [order])
        assert (status, error["code"]) == (401, "unknown-peer")
        status, error = await Forger(url, "buyer", "wrong").send("UnsafeNoNo", [order])
        assert (status, error["code"]) == (401, "bad-signature")
        status, error = await buyer.send("UnsafeNoNo", [], raw=b"{not json")
        assert (status, error["code"]) == (400, "bad-json")  # as the SyncServer answers
        # A Buyer performing the Seller's action.
        ship = {"action": "Ship", "bindings": {"id": "o1", "Order": True, "tracking": "t"}}
        status, result = await buyer.send("UnsafeNoNo", [ship], [["Order", ["o1"]]])
        assert result["status"] == "pending"  # (the Order is not here yet)
        ship_seq = buyer.seq
        # The Order arrives: the waiting Ship is released, and refused (role).
        status, result = await buyer.send("UnsafeNoNo", [order])
        assert result["status"] == "accepted"
        status, result = await buyer.send("UnsafeNoNo", [ship], [["Order", ["o1"]]], seq=ship_seq)
        assert (result["status"], result["rule"]) == ("refused", "role")
        # A withdrawal claiming an Order it does not say it knew: forged (the
        # seller knows the Order, but the buyer's context says it did not).
        status, result = await buyer.send("UnsafeNoNo", [withdraw], [])
        assert (result["status"], result["rule"]) == ("refused", "dependency")
        assert "could not have performed this on what it knew" in result["message"]
        # The same Order again is a duplicate; with other bindings, refused.
        status, result = await buyer.send("UnsafeNoNo", [order])
        assert result["status"] == "duplicate"
        other = {"action": "Order", "bindings": {"id": "o1", "item": "ink"}}
        status, result = await buyer.send("UnsafeNoNo", [other])
        assert (result["status"], result["rule"]) == ("refused", "duplicate")
        # Unknown protocol, unknown action, a context that names no instance.
        status, result = await buyer.send("Nope", [order])
        assert result["rule"] == "unknown-protocol"
        status, result = await buyer.send("UnsafeNoNo", [{"action": "Fly", "bindings": {}}])
        assert result["rule"] == "unknown-action"
        status, result = await buyer.send("UnsafeNoNo", [withdraw], [["Order", [1.5]]])
        assert result["rule"] == "context"
        # What the seller knows is intact: the Order only.
        assert [i.name for _, i, _ in seller.history({"id": "o1"})] == ["Order"]
    incoming = [(r.peer, r.rule) for r in seller_ex.refusals() if r.incoming]
    assert incoming == [("buyer", "role"), ("buyer", "dependency")]
    # Refusals are kept in the agent's log, with the rule.
    again = SQLitePeerStore(tmp_path / "seller.db")
    again.open("seller")
    assert [(r.peer, r.rule) for r in again.refusals()] == incoming
    again.close()


async def test_a_receiver_refuses_a_value_that_contradicts_what_it_knows() -> None:
    agents = {
        "merchant": ["Merchant"],
        "wrapper": ["Wrapper"],
        "labeler": ["Labeler"],
        "packer": ["Packer"],
    }
    roles = directory([LOGISTICS], agents, http=True)
    executors = {a: PeerExecutor(a, roles) for a in agents}
    merchant = PeachAdapter("merchant", LOGISTICS, "Merchant", executors["merchant"])
    packer = PeachAdapter("packer", LOGISTICS, "Packer", executors["packer"])
    async with merchant, packer:
        [label] = await merchant.attempt(
            [merchant.build_action("RequestLabel", {"orderID": "o", "address": "here"})]
        )
        [wrap] = await merchant.attempt(
            [merchant.build_action("RequestWrapping", {**label.keys, "item": "vase"})]
        )
        await packer.sync()
        url = roles.peers["packer"].url
        assert url is not None
        wrapper = Forger(url, "wrapper", "wrapper-secret")
        wrapped = {
            "action": "Wrapped",
            "bindings": {**wrap.keys, "RequestWrapping": True, "item": "lamp", "wrapping": "box"},
        }
        context = [["RequestLabel", ["o"]], ["RequestWrapping", ["o", wrap.keys["itemID"]]]]
        _, result = await wrapper.send("Logistics", [wrapped], context)
        assert (result["status"], result["rule"]) == ("refused", "bound")
        assert "'item' is already bound" in result["message"]


async def test_a_restarted_agent_resumes_from_its_log(tmp_path: Path) -> None:
    """In-process restart (kill -9 of real processes: tests/hostile)."""
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]})
    network = MemoryNetwork()
    buyer_ex = PeerExecutor("buyer", roles, store=tmp_path / "b.db", transport=network)
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    async with buyer:
        [order] = await buyer.attempt([buyer.build_action("Order", {"item": "pen"})])
        assert buyer_ex.outstanding() == 1  # the seller is not there
    # A new process: the Order is in its state, and still owed to the seller.
    again = PeerExecutor("buyer", roles, store=tmp_path / "b.db", transport=network)
    buyer = PeachAdapter("buyer", NONO, "Buyer", again)
    seller_ex = PeerExecutor("seller", roles, transport=network)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    async with buyer, seller:
        assert [f.name for f in buyer.enabled(order.keys)] == ["Withdraw"]
        await settle([again, seller_ex])
        assert [i.name for _, i, _ in seller.history(order.keys)] == ["Order"]
    with pytest.raises(Exception, match="holds the log of agent 'buyer', not 'seller'"):
        PeerExecutor("seller", roles, store=tmp_path / "b.db")._load()
