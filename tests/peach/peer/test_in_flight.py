"""Several requests to one peer under way at once, each with messages of its own.

With one request at a time, a wave of concurrent attempts went as one request,
the peer handled it while the sender idled, then the sender handled the answers
while the peer idled: two agents on two cores took turns. Now up to
``IN_FLIGHT`` requests are under way, a wave is shared out among them, and
nothing is lost by it: no message rides in two requests at once, ``sync()``
still waits for what is on its way, and stopping cancels what is under way.
Over a :class:`MemoryNetwork` whose requests wait at a gate the test opens.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from langshaw import LangshawProtocol
from peach import PeachAdapter
from peach.peer import MemoryNetwork, PeerExecutor
from peach.peer import executor as peer_executor
from peach.peer.directory import Peer
from tests.conftest import FIXTURES
from tests.peach.test_peer import directory, settle

NONO = LangshawProtocol.load(FIXTURES / "lsh" / "faulty" / "unsafe-nono.lsh")


class Gated(MemoryNetwork):
    """Requests to ``held`` wait at a gate; each one's messages are recorded."""

    def __init__(self, held: str, timeout: float = 10.0) -> None:
        super().__init__(timeout=timeout)
        self.held = held
        self.gate = asyncio.Event()
        self.arrived = asyncio.Event()  # set as each held request reaches the gate
        self.under_way: list[list[int]] = []  # seqs of the held requests now waiting
        self.carried: list[list[int]] = []  # seqs of every request, once delivered

    async def post(
        self, peer: Peer, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, Any]]:
        if path == "messages" and peer.name == self.held:
            seqs = [m["seq"] for m in json.loads(body)["messages"]]
            self.under_way.append(seqs)
            self.arrived.set()
            await self.gate.wait()
            self.under_way.remove(seqs)
            self.carried.append(seqs)
        return await super().post(peer, path, body, headers)

    async def until_under_way(self, count: int) -> None:
        while len(self.under_way) < count:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 10)


def buyer_and_seller(
    network: MemoryNetwork,
) -> tuple[PeerExecutor, PeerExecutor, PeachAdapter, PeachAdapter]:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]})
    buyer_ex, seller_ex = (PeerExecutor(a, roles, transport=network) for a in ("buyer", "seller"))
    return (buyer_ex, seller_ex, PeachAdapter("buyer", NONO, "Buyer", buyer_ex),
            PeachAdapter("seller", NONO, "Seller", seller_ex))  # fmt: skip


async def order(buyer: PeachAdapter, count: int) -> None:
    for i in range(count):  # attempt() gives the loop no turn: one wave
        await buyer.attempt([buyer.build_action("Order", {"id": f"o{i}", "item": "pen"})])


async def test_a_wave_is_shared_out_among_requests_under_way_at_once() -> None:
    network = Gated("seller")
    buyer_ex, seller_ex, buyer, seller = buyer_and_seller(network)
    async with buyer, seller:
        await order(buyer, 32)
        await network.until_under_way(peer_executor.IN_FLIGHT)
        under_way = [sorted(seqs) for seqs in network.under_way]
        assert len(under_way) == peer_executor.IN_FLIGHT == 4  # and no more start
        assert sorted(s for seqs in under_way for s in seqs) == list(range(1, 33))
        assert [len(seqs) for seqs in under_way] == [8, 8, 8, 8]  # no message in two
        network.gate.set()
        await settle([buyer_ex, seller_ex])
        assert len(seller.enactments()) == 32
    assert sorted(s for seqs in network.carried for s in seqs) == list(range(1, 33))


async def test_a_few_messages_go_in_one_request() -> None:
    network = Gated("seller")
    buyer_ex, seller_ex, buyer, seller = buyer_and_seller(network)
    async with buyer, seller:
        await order(buyer, peer_executor.MIN_SHARE)
        await network.until_under_way(1)
        assert network.under_way == [list(range(1, peer_executor.MIN_SHARE + 1))]
        network.gate.set()
        await settle([buyer_ex, seller_ex])
    assert len(network.carried) == 1


async def test_what_is_sent_while_requests_are_under_way_goes_in_the_next() -> None:
    network = Gated("seller")
    buyer_ex, seller_ex, buyer, seller = buyer_and_seller(network)
    async with buyer, seller:
        await order(buyer, 32)
        await network.until_under_way(4)
        for i in range(32, 40):  # every request place is taken: these wait
            await buyer.attempt([buyer.build_action("Order", {"id": f"o{i}", "item": "pen"})])
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(network.under_way) == 4
        network.gate.set()
        await settle([buyer_ex, seller_ex])
        assert len(seller.enactments()) == 40
    carried = sorted(s for seqs in network.carried for s in seqs)
    assert carried == list(range(1, 41))  # each once: none sent again meanwhile


async def test_sync_waits_for_the_requests_under_way() -> None:
    # The seller's sync() asks the buyer to deliver what it owes; the buyer's
    # requests under way hold all of it. sync() returns only once they are done.
    network = Gated("seller")
    _buyer_ex, seller_ex, buyer, seller = buyer_and_seller(network)
    async with buyer, seller:
        await order(buyer, 32)
        await network.until_under_way(4)
        syncing = asyncio.create_task(seller_ex.sync(seller))
        for _ in range(50):
            await asyncio.sleep(0)
        assert not syncing.done()
        network.gate.set()
        await asyncio.wait_for(syncing, 10)
        assert len(seller.enactments()) == 32  # delivered by the time sync() returned


async def test_stopping_cancels_the_requests_under_way() -> None:
    network = Gated("seller")
    buyer_ex, _seller_ex, buyer, seller = buyer_and_seller(network)
    async with seller:
        async with buyer:
            await order(buyer, 32)
            await network.until_under_way(4)
        rounds = [t for t in asyncio.all_tasks() if t.get_name().startswith("round to")]
        assert rounds == []
        assert buyer_ex._in_flight["seller"] == set()
        assert buyer_ex._sending["seller"] == set()
        assert buyer_ex.outstanding() == 32  # kept, for the next start to send


async def test_a_peer_that_never_answers_is_unreachable_on_a_memory_network() -> None:
    # Its endpoint is stuck: the buyer's start-up catch-up asks it, and goes on
    # once the network's timeout passes instead of waiting for ever.
    network = MemoryNetwork(timeout=0.2)
    buyer_ex, _seller_ex, buyer, _seller = buyer_and_seller(network)
    stuck = asyncio.Event()

    async def never(path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, Any]:
        await stuck.wait()
        raise AssertionError("unreachable")

    seller_peer = buyer_ex.directory.peers["seller"]
    await network.listen(seller_peer, never)
    try:
        await asyncio.wait_for(buyer.start(), 10)
        await order(buyer, 1)
        assert buyer_ex.outstanding() == 1  # not delivered, kept to send again
    finally:
        await buyer.stop()
