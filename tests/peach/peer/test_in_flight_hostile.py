"""A hostile look at several requests to one peer under way at once.

What ``IN_FLIGHT`` must not break: a peer that fails is backed off from, not
hammered (a request that fails at once used to free its messages for the next
one the loop started in the same breath, forever, at full CPU); no message is
left outstanding with nothing under way to send it (a catch-up request that
failed used to strand what it carried until the next attempt); ``sync()``
waits for every message owed when it was called, even one a request started
meanwhile carries; a 413 never raises the size limit another one lowered;
stopping cancels a catch-up request under way too, so that a restarted agent
never has a message in two requests at once, and never hangs on a loop that a
message woke as it was cancelled. Then the whole of it on networks
that fail every way, in memory and over HTTP with a peer that goes away.
Every network here checks that no message rides in two requests at once.
"""

from __future__ import annotations

import asyncio
import json
import operator
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from langshaw import LangshawProtocol
from peach import PeachAdapter
from peach.peer import Faults, HTTPTransport, MemoryNetwork, PeerExecutor
from peach.peer import _wire as wire
from peach.peer import executor as peer_executor
from peach.peer.directory import AGENT_HEADER, Directory, Peer
from peach.peer.transport import Unreachable
from tests.conftest import FIXTURES
from tests.peach.test_peer import NONO, directory, settle

NOGO = LangshawProtocol.load(FIXTURES / "lsh" / "faulty" / "unsafe-nogo.lsh")
FAST: dict[str, Any] = {"retry_initial": 0.01, "retry_max": 0.05}
Answer = tuple[int, dict[str, Any]]
Send = Callable[[], Awaitable[Answer]]
Hook = Callable[[Peer, str, bytes, Send], Awaitable[Answer]]


async def through(peer: Peer, path: str, body: bytes, send: Send) -> Answer:
    return await send()


class Watch:
    """What a network carried: posts per (receiver, path), and every message
    that rode in two requests under way at once (which must never happen)."""

    def __init__(self) -> None:
        self.under_way: Counter[tuple[str, str, str, int]] = Counter()
        self.twice: list[tuple[str, str, str, int]] = []
        self.posts: Counter[tuple[str, str]] = Counter()
        self.carried: Counter[tuple[str, str, str, int]] = Counter()  # in how many requests
        self.news = asyncio.Event()  # set on every post and every answer

    async def carry(
        self, peer: Peer, path: str, body: bytes, headers: Mapping[str, str], send: Send
    ) -> Answer:
        self.posts[peer.name, path] += 1
        self.news.set()
        keys = []
        if path == "messages":
            sender = headers[AGENT_HEADER]
            messages = json.loads(body)["messages"]
            keys = [(sender, peer.name, m["protocol"], m["seq"]) for m in messages]
        self.carried.update(keys)
        for key in keys:
            if self.under_way[key]:
                self.twice.append(key)
            self.under_way[key] += 1
        try:
            return await send()
        finally:
            for key in keys:
                self.under_way[key] -= 1
            self.news.set()

    async def until(self, predicate: Callable[[], bool], seconds: float = 10.0) -> None:
        async def wait() -> None:
            while not predicate():
                self.news.clear()
                await self.news.wait()

        await asyncio.wait_for(wait(), seconds)


class Network(MemoryNetwork):
    """A MemoryNetwork watched, whose ``hook`` decides what each request meets:
    it may hold it, fail it, or change the answer (``send`` delivers it)."""

    def __init__(self, faults: Faults | None = None) -> None:
        super().__init__(faults)
        self.watch = Watch()
        self.hook: Hook = through

    async def post(
        self, peer: Peer, path: str, body: bytes, headers: Mapping[str, str]
    ) -> Answer:
        def send() -> Awaitable[Answer]:
            return super(Network, self).post(peer, path, body, headers)

        return await self.watch.carry(
            peer, path, body, headers, lambda: self.hook(peer, path, body, send)
        )


class WatchedHTTP(HTTPTransport):
    def __init__(self, watch: Watch) -> None:
        super().__init__()
        self.watch = watch

    async def post(
        self, peer: Peer, path: str, body: bytes, headers: Mapping[str, str]
    ) -> Answer:
        def send() -> Awaitable[Answer]:
            return super(WatchedHTTP, self).post(peer, path, body, headers)

        return await self.watch.carry(peer, path, body, headers, send)


def pair(
    roles: Directory, buyer_transport: Any, seller_transport: Any, store: Path | None = None
) -> tuple[PeerExecutor, PeerExecutor, PeachAdapter, PeachAdapter]:
    buyer_ex = PeerExecutor("buyer", roles, transport=buyer_transport, store=store, **FAST)
    seller_ex = PeerExecutor("seller", roles, transport=seller_transport, **FAST)
    return (buyer_ex, seller_ex, PeachAdapter("buyer", NONO, "Buyer", buyer_ex),
            PeachAdapter("seller", NONO, "Seller", seller_ex))  # fmt: skip


def nono() -> Directory:
    return directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]})


async def order(buyer: PeachAdapter, first: int, count: int, size: int = 3) -> None:
    for i in range(first, first + count):  # attempt() gives the loop no turn: one wave
        await buyer.attempt([buyer.build_action("Order", {"id": f"o{i}", "item": "p" * size})])


def held_in_receiver(receiver: PeerExecutor, sender: str) -> Counter[tuple[str, str, str]]:
    """How many times each instance the sender performed is in the receiver's log."""
    found: Counter[tuple[str, str, str]] = Counter()
    for record in receiver.store.load():
        if record.performer == sender:
            for item in record.instances:
                found[record.protocol, item["action"], item["bindings"]["id"]] += 1
    return found


def delivered_once(sender: PeerExecutor, receiver: PeerExecutor) -> None:
    mine = held_in_receiver(sender, sender.agent)
    assert mine and held_in_receiver(receiver, sender.agent) == Counter(dict.fromkeys(mine, 1))


# Back-off ---------------------------------------------------------------------------


async def test_a_peer_that_fails_at_once_is_backed_off_from_not_hammered() -> None:
    # The seller is not listening: every request fails before it awaits anything.
    # The loop started the next request on the messages the last one had just
    # freed, and the next, without end: ~20,000 posts in half a second, a core
    # at 100 %. Backing off from 0.01 s to 0.05 s, half a second holds ~15
    # waits, IN_FLIGHT requests at most after each.
    network = Network()
    buyer_ex, seller_ex, buyer, seller = pair(nono(), network, network)
    async with buyer:
        await order(buyer, 0, 20)
        cpu, start = time.process_time(), time.monotonic()
        await asyncio.sleep(0.5)  # a window to count in, not a wait for something
        cpu, wall = time.process_time() - cpu, time.monotonic() - start
        posts = network.watch.posts["seller", "messages"]
        assert 3 <= posts <= 30 * peer_executor.IN_FLIGHT, posts  # it retries, gently
        assert cpu < wall / 2, (cpu, wall)
        # Back, the seller gets everything promptly: the next retry is at most
        # retry_max away.
        async with seller:
            await settle([buyer_ex, seller_ex], 2.0)
            delivered_once(buyer_ex, seller_ex)
    assert network.watch.twice == []


async def test_stopping_as_a_message_wakes_the_backing_off_loop_does_not_hang() -> None:
    # The loop backs off (the seller is away); a new message wakes it in the same
    # turn as stop() cancels it. asyncio.wait_for (3.11) returned the wake and
    # lost the cancel: the loop went on, and stop() waited for it for ever.
    network = Network()
    roles = nono()
    buyer_ex = PeerExecutor("buyer", roles, transport=network, retry_initial=5.0, retry_max=5.0)
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    await buyer.start()
    try:
        await order(buyer, 0, 1)
        await network.watch.until(lambda: network.watch.posts["seller", "messages"] == 1)
        for _ in range(10):
            await asyncio.sleep(0)  # (turns for the loop to begin its back-off)
        await order(buyer, 1, 1)  # wakes it ...
        stopping = asyncio.create_task(buyer.stop())  # ... as it is cancelled
        await asyncio.wait_for(asyncio.shield(stopping), 5)
    finally:
        if buyer.running:
            await buyer.stop()
    assert buyer_ex.outstanding() == 2 and buyer_ex._senders == {}


# Nothing stranded, sync() waits for what it is owed ----------------------------------


async def test_a_catch_up_request_that_fails_strands_nothing() -> None:
    # The seller's sync() asks the buyer to deliver; the buyer's catch-up round
    # takes the messages its loop had not taken yet, and fails. Its messages
    # must be sent again, though the loop found nothing to send meanwhile.
    network = Network()
    buyer_ex, seller_ex, buyer, seller = pair(nono(), network, network)
    flush_gate, messages_gate = asyncio.Event(), asyncio.Event()
    failing = True

    async def hook(peer: Peer, path: str, body: bytes, send: Send) -> Answer:
        if path == "flush" and peer.name == "buyer":
            await flush_gate.wait()
        elif path == "messages" and peer.name == "seller" and failing:
            await messages_gate.wait()
            raise Unreachable("the answer was lost")
        return await send()

    async with buyer, seller:
        network.hook = hook
        syncing = asyncio.create_task(seller.sync())
        await network.watch.until(lambda: network.watch.posts["buyer", "flush"] == 1)
        # The catch-up request runs before the buyer's loop wakes to the orders:
        flush_gate.set()
        await order(buyer, 0, 3)
        await network.watch.until(lambda: len(+network.watch.under_way) == 3)
        assert network.watch.posts["seller", "messages"] == 1  # the catch-up's, with all 3
        for _ in range(20):
            await asyncio.sleep(0)  # (the loop has its turns: it finds nothing to send)
        failing = False
        messages_gate.set()
        await asyncio.wait_for(syncing, 5)
        await settle([buyer_ex, seller_ex], 3.0)  # sent again, by the loop
        delivered_once(buyer_ex, seller_ex)
    assert network.watch.twice == []


async def test_sync_waits_for_what_a_request_started_meanwhile_carries() -> None:
    # 32 orders ride in IN_FLIGHT requests, held; 8 more wait for a place. The
    # seller's sync() waits for the buyer's requests under way; as the first
    # ends, the loop sends the 8 in a fifth request (held too). sync() must not
    # return before the 8 arrive: they were owed when it was called.
    network = Network()
    buyer_ex, seller_ex, buyer, seller = pair(nono(), network, network)
    gates: list[asyncio.Event] = []

    async def hook(peer: Peer, path: str, body: bytes, send: Send) -> Answer:
        if path == "messages" and peer.name == "seller":
            gate = asyncio.Event()
            gates.append(gate)
            await gate.wait()
        return await send()

    async with buyer, seller:
        network.hook = hook
        await order(buyer, 0, 32)
        await network.watch.until(lambda: len(gates) == peer_executor.IN_FLIGHT)
        await order(buyer, 32, 8)
        syncing = asyncio.create_task(seller.sync())
        await network.watch.until(lambda: network.watch.posts["buyer", "flush"] == 1)
        at_return: list[int] = []
        syncing.add_done_callback(lambda _: at_return.append(len(seller.enactments())))
        gates[0].set()
        await network.watch.until(lambda: len(gates) == 5)  # the 8, under way
        for gate in gates[1:4]:
            gate.set()
        await network.watch.until(lambda: len(seller.enactments()) == 32)
        for _ in range(100):
            await asyncio.sleep(0)  # (turns enough for sync() to return, if it would)
        gates[4].set()
        await asyncio.wait_for(syncing, 5)
        assert at_return == [40]
        await settle([buyer_ex, seller_ex], 3.0)
    assert network.watch.twice == []


# 413 with several requests under way -------------------------------------------------


async def test_a_late_413_never_raises_the_limit_an_earlier_one_lowered() -> None:
    # The seller reads at most 3,000 bytes. Four requests go at once, the first
    # small (8 orders of 400 bytes), the last large (8 of 1,200); all get 413,
    # the small one's first. The limit is then about 1,900 bytes: the large
    # one's answer, coming later, must not raise it to 5,000, which would make
    # the next requests too large again.
    network = Network()
    buyer_ex, seller_ex, buyer, seller = pair(nono(), network, network)
    gates: list[asyncio.Event] = []
    refused: list[int] = []  # sizes answered 413, in the order answered
    sent_after: list[tuple[int, int, int]] = []  # (size, messages, smallest refused yet)

    async def hook(peer: Peer, path: str, body: bytes, send: Send) -> Answer:
        if path != "messages" or peer.name != "seller":
            return await send()
        carried = len(json.loads(body)["messages"])
        if refused:
            sent_after.append((len(body), carried, min(refused)))
        if len(gates) < 4:
            gate = asyncio.Event()
            gates.append(gate)
            await gate.wait()
        if len(body) > 3000:
            refused.append(len(body))
            return 413, wire.error("too-large", "no")
        return await send()

    async with buyer, seller:
        network.hook = hook
        await order(buyer, 0, 8, size=400)
        await order(buyer, 8, 16, size=600)
        await order(buyer, 24, 8, size=1200)
        await network.watch.until(lambda: len(gates) == 4)
        for count, gate in enumerate(gates, 1):  # answered in order: smallest first
            gate.set()
            await network.watch.until(partial(lambda n: len(refused) == n, count))
        await settle([buyer_ex, seller_ex], 5.0)
        assert buyer_ex.refusals() == [] and len(seller.enactments()) == 32
    assert sent_after and all(
        size <= smallest // 2 or messages == 1 for size, messages, smallest in sent_after
    ), sent_after
    assert network.watch.twice == []


async def test_a_request_stuck_in_a_memory_peer_times_out_and_is_sent_again() -> None:
    # The seller's endpoint hangs on the first request: the network's timeout
    # makes it unreachable (the stuck handler is cancelled, as a dropped
    # connection would leave it), and the orders come again, once each.
    network = Network()
    network.timeout = 0.2
    buyer_ex, seller_ex, buyer, seller = pair(nono(), network, network)
    cancelled = asyncio.Event()
    stuck = True

    async with buyer, seller:
        inbox = seller_ex._inbox.endpoint

        async def endpoint(path: str, headers: Mapping[str, str], body: bytes) -> Answer:
            nonlocal stuck
            if path == "messages" and stuck:
                stuck = False
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    cancelled.set()
                    raise
            return await inbox(path, headers, body)

        await network.listen(seller_ex.me, endpoint)
        await order(buyer, 0, 5)
        await asyncio.wait_for(cancelled.wait(), 5)
        await settle([buyer_ex, seller_ex], 5.0)
        delivered_once(buyer_ex, seller_ex)
    assert network.watch.posts["seller", "messages"] == 2
    assert network.watch.twice == []


# A peer that answers some requests and fails the others --------------------------------


async def test_a_peer_that_fails_requests_every_way_gets_everything_once() -> None:
    # Each request (either way) is lost, has its answer lost, gets a 500, one
    # result too few, every result "busy" or "pending", or its answer: 300
    # orders and 300 ships, in waves, arrive once and are all acknowledged.
    rng = random.Random(7)
    network = Network()
    buyer_ex, seller_ex, buyer, seller = pair(nono(), network, network)

    @seller.on_enabled("Ship")
    async def ship(feasible: Any) -> None:
        await seller.attempt([feasible.bind(tracking="T")])

    async def hook(peer: Peer, path: str, body: bytes, send: Send) -> Answer:
        if path != "messages":
            return await send()
        await asyncio.sleep(0)  # (others get under way meanwhile)
        way = rng.randrange(9)  # 6 to 8: answered as it should be
        if way == 0:
            raise Unreachable("lost on its way")
        if way == 1:
            await send()
            raise Unreachable("the answer was lost")
        if way == 2:
            return 500, wire.error("internal", "boom")
        status, answer = await send()
        if way == 3:  # one result too few
            return status, {"results": answer["results"][:-1]}
        if way in (4, 5):  # looked at nothing now; waiting for their context
            verdict = wire.BUSY if way == 4 else wire.PENDING
            return status, {"results": [{**r, "status": verdict} for r in answer["results"]]}
        return status, answer

    async with buyer, seller:
        network.hook = hook
        for wave in range(6):
            await order(buyer, wave * 50, 50)
            await asyncio.sleep(0)
        await settle([buyer_ex, seller_ex], 10.0)
        assert len(seller.enactments()) == 300
        delivered_once(buyer_ex, seller_ex)
        delivered_once(seller_ex, buyer_ex)  # the Ships, back
        assert buyer_ex.outstanding() == seller_ex.outstanding() == 0
        assert buyer_ex.refusals() == [] and seller_ex.refusals() == []
    assert network.watch.twice == []
    assert network.watch.posts["seller", "messages"] > 6


async def test_refusals_and_acknowledgements_answered_out_of_order_end_each_message_once() -> None:
    # Both act on what they knew (the requests are held): the seller ships 12 of
    # 24 orders, the buyer withdraws all 24. The held requests are answered last
    # first: refusals (nono, both ways) and acknowledgements arrive while other
    # requests carry other messages. Each message was carried once, each refusal
    # is recorded once, nothing is outstanding.
    network = Network()
    buyer_ex, seller_ex, buyer, seller = pair(nono(), network, network)
    gates: list[asyncio.Event] = []
    answered: list[int] = []  # the held requests answered, by index
    holding = False

    async def hook(peer: Peer, path: str, body: bytes, send: Send) -> Answer:
        if path != "messages" or not holding:
            return await send()
        gate = asyncio.Event()
        gates.append(gate)
        await gate.wait()
        try:
            return await send()
        finally:
            answered.append(gates.index(gate))

    async with buyer, seller:
        network.hook = hook
        await order(buyer, 0, 24)
        await settle([buyer_ex, seller_ex], 5.0)
        holding = True
        for i in range(12):
            ship = seller.build_action("Ship", {"id": f"o{i}", "tracking": "T"})
            await seller.attempt([ship])
        for i in range(24):
            await buyer.attempt([buyer.build_action("Withdraw", {"id": f"o{i}", "reason": "r"})])
        await network.watch.until(lambda: len(gates) == 5)  # 24 in 3 requests, 12 in 2
        holding = False
        for index in reversed(range(len(gates))):
            gates[index].set()
            await network.watch.until(partial(operator.contains, answered, index))
        assert answered == [4, 3, 2, 1, 0]
        await settle([buyer_ex, seller_ex], 5.0)
        assert buyer_ex.outstanding() == seller_ex.outstanding() == 0
        both = (buyer_ex, seller_ex)
        refused = {(e.agent, r.peer, r.incoming, r.rule) for e in both for r in e.refusals()}
        assert refused == {
            ("buyer", "seller", False, "nono"), ("seller", "buyer", True, "nono"),
            ("seller", "buyer", False, "nono"), ("buyer", "seller", True, "nono"),
        }  # fmt: skip
        assert [len(buyer_ex.refusals()), len(seller_ex.refusals())] == [24, 24]
        withdrawn = [k for k in seller.enactments() if seller.history(k)[-1][1].name == "Withdraw"]
        assert len(withdrawn) == 12
    assert set(network.watch.carried.values()) == {1}  # none sent again
    assert network.watch.twice == []


# Stopping and starting again while requests are under way -------------------------------


async def test_a_restart_with_a_catch_up_under_way_sends_nothing_twice_at_once(
    tmp_path: Path,
) -> None:
    # The buyer's four requests fail, and its loop backs off (for seconds); the
    # seller's sync() has the buyer send all 40 orders at once, in a catch-up
    # request, held. The buyer stops. A new buyer on the same log sends them
    # again (held too): stopping must have cancelled the catch-up request, or
    # the seller's sync() never returns and each order rides twice at once.
    network = Network()
    roles = nono()
    store = tmp_path / "b.db"
    buyer_ex = PeerExecutor(
        "buyer", roles, transport=network, store=store, retry_initial=5.0, retry_max=5.0
    )
    seller_ex = PeerExecutor("seller", roles, transport=network, **FAST)
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    gates: list[asyncio.Event] = []

    async def hook(peer: Peer, path: str, body: bytes, send: Send) -> Answer:
        if path == "messages" and peer.name == "seller":
            gate = asyncio.Event()
            gates.append(gate)
            await gate.wait()
            if gates.index(gate) < peer_executor.IN_FLIGHT:
                raise Unreachable("the answer was lost")
        return await send()

    async with seller:
        network.hook = hook
        await buyer.start()
        await order(buyer, 0, 40)
        await network.watch.until(lambda: len(gates) == 4)
        syncing = asyncio.create_task(seller.sync())
        await network.watch.until(lambda: network.watch.posts["buyer", "flush"] == 1)
        for gate in gates:
            gate.set()
        await network.watch.until(lambda: len(gates) == 5)  # the catch-up, with all 40
        assert network.watch.under_way == Counter(dict.fromkeys(network.watch.under_way, 1))
        assert len(+network.watch.under_way) == 40
        await buyer.stop()
        await asyncio.wait_for(syncing, 5)  # answered: the catch-up was cancelled
        assert buyer_ex.outstanding() == 40 and buyer_ex._sending["seller"] == set()
        again = PeerExecutor("buyer", roles, store=store, transport=network, **FAST)
        buyer = PeachAdapter("buyer", NONO, "Buyer", again)
        async with buyer:
            await network.watch.until(lambda: len(gates) == 9)  # sent again, held
            for gate in gates:
                gate.set()
            await settle([again, seller_ex], 5.0)
            delivered_once(again, seller_ex)
    assert network.watch.twice == []


# Soaks ----------------------------------------------------------------------------------


async def soak(network: Network, seed: int, stores: Path | None = None) -> None:
    """Two protocols, each message going both ways (Orders, then Ships); syncs
    and, with ``stores``, restarts of the buyer on its log along the way."""
    rng = random.Random(seed)
    both = ("UnsafeNoNo", "UnsafeNoGo")
    played = {a: [f"{p}:{r}" for p in both] for a, r in (("buyer", "Buyer"), ("seller", "Seller"))}
    roles = directory([NONO, NOGO], played)
    store = stores / f"buyer-{seed}.db" if stores else None
    buyer_ex = PeerExecutor("buyer", roles, transport=network, store=store, **FAST)
    seller_ex = PeerExecutor("seller", roles, transport=network, **FAST)
    sellers = [PeachAdapter("seller", p, "Seller", seller_ex) for p in (NONO, NOGO)]
    for adapter in sellers:

        @adapter.on_enabled("Ship")
        async def ship(feasible: Any, adapter: PeachAdapter = adapter) -> None:
            await adapter.attempt([feasible.bind(tracking="T")])

    def buyers(executor: PeerExecutor) -> list[PeachAdapter]:
        return [PeachAdapter("buyer", p, "Buyer", executor) for p in (NONO, NOGO)]

    adapters = buyers(buyer_ex)
    for adapter in [*sellers, *adapters]:
        await adapter.start()
    try:
        for wave in range(20):
            for adapter in adapters:
                await order(adapter, wave * 7, 7)
            if rng.random() < 0.3:
                await rng.choice(sellers).sync()
            if stores is not None and wave in (6, 13):
                for adapter in adapters:
                    await adapter.stop()
                buyer_ex = PeerExecutor("buyer", roles, transport=network, store=store, **FAST)
                adapters = buyers(buyer_ex)
                for adapter in adapters:
                    await adapter.start()
            await asyncio.sleep(0)
        await settle([buyer_ex, seller_ex], 10.0)
        assert buyer_ex.outstanding() == seller_ex.outstanding() == 0
        assert buyer_ex.waiting() == seller_ex.waiting() == 0
        assert buyer_ex.refusals() == [] and seller_ex.refusals() == []
        assert sum(len(a.enactments()) for a in sellers) == 280
        delivered_once(buyer_ex, seller_ex)
        delivered_once(seller_ex, buyer_ex)
    finally:
        for adapter in [*adapters, *sellers]:
            await adapter.stop()
    assert network.watch.twice == []


@pytest.mark.parametrize("seed", range(1, 13))
async def test_a_bad_network_loses_and_repeats_nothing(seed: int, tmp_path: Path) -> None:
    # 560 messages (280 Orders in two protocols, 280 Ships back), a network that
    # drops, loses answers, repeats and reorders; half the seeds restart the buyer.
    faults = Faults(drop=0.2, lose_answer=0.2, duplicate=0.3, delay=0.002, seed=seed)
    await soak(Network(faults), seed, tmp_path if seed % 2 else None)


async def test_over_http_a_peer_that_goes_away_and_comes_back_gets_everything_once(
    tmp_path: Path,
) -> None:
    # Real HTTP on loopback. The seller stops (its port closes) with requests
    # under way; the buyer keeps ordering, backs off from the dead port without
    # hammering it, and the seller, restarted on its log and port, gets every
    # order once; every Ship comes back once.
    watch = Watch()
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)

    def seller_on(executor: PeerExecutor) -> PeachAdapter:
        adapter = PeachAdapter("seller", NONO, "Seller", executor)

        @adapter.on_enabled("Ship")
        async def ship(feasible: Any) -> None:
            await adapter.attempt([feasible.bind(tracking="T")])

        return adapter

    buyer_ex = PeerExecutor("buyer", roles, transport=WatchedHTTP(watch), **FAST)
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    store = tmp_path / "s.db"
    seller_ex = PeerExecutor("seller", roles, transport=WatchedHTTP(watch), store=store, **FAST)
    seller = seller_on(seller_ex)
    async with buyer:
        async with seller:
            await order(buyer, 0, 150)
            await watch.until(lambda: len(seller.enactments()) >= 20)
        await order(buyer, 150, 100)
        before, start = watch.posts["seller", "messages"], time.monotonic()
        await asyncio.sleep(0.3)  # a window to count in, while the seller is away
        posts = watch.posts["seller", "messages"] - before
        # Each wait at least 3/4 of retry_max once grown (0.05 s), IN_FLIGHT after each.
        waits = (time.monotonic() - start) / (0.75 * FAST["retry_max"]) + 5
        assert 1 <= posts <= waits * peer_executor.IN_FLIGHT, posts
        seller_ex = PeerExecutor("seller", roles, transport=WatchedHTTP(watch), store=store, **FAST)
        seller = seller_on(seller_ex)
        async with seller:
            await settle([buyer_ex, seller_ex], 10.0)
            assert len(seller.enactments()) == 250
            delivered_once(buyer_ex, seller_ex)
            delivered_once(seller_ex, buyer_ex)
    assert watch.twice == []
