"""Peer to peer: a refusal outlives the process that gave it.

A peer that refused an act must refuse what follows it the same way after a
restart; otherwise the later message waits for a context that will never
come, and its sender resends it forever. Real peers, over HTTP on loopback,
each with its own SQLite log; restarts are new executors on the same file and
port. Nothing sleeps: each step waits on the agents' progress, with a timeout.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from langshaw import LangshawProtocol
from peach import PeachAdapter
from peach.peer import Directory, PeerExecutor, Refusal
from peach.peer.directory import AGENT_HEADER, SIGNATURE_HEADER, sign
from tests.peach.test_peer import directory, settle

# After an Order the Seller may Ship (then Bill) and the Buyer may Withdraw;
# Ship and Withdraw exclude each other, so peers that act concurrently refuse
# each other's act, and the Bill that follows a refused Ship.
CHAIN = LangshawProtocol.parse(
    """Chain
who Buyer , Seller
what id key , Bill or Withdraw
do
  Buyer : Order(id , item)
  Seller : Ship(id , Order , tracking)
  Seller : Bill(id , Ship , amount)
  Buyer : Withdraw(id , Order , reason)
sayso
  Buyer : item , reason
  Seller : tracking , amount
nono
  Ship Withdraw
"""
)
WAIT = 10.0  # seconds for any one step


class Agent:
    """One peer that can be stopped and started again on the same log (a new
    executor each time, as a new process would be)."""

    def __init__(self, name: str, role: str, roles: Directory, store: Path) -> None:
        self.name, self.role, self.roles, self.store = name, role, roles, store
        self.refused: list[Refusal] = []  # every refusal its listeners heard of
        self.news = asyncio.Event()  # set on each of them
        self.executor: PeerExecutor | None = None
        self.adapter: PeachAdapter | None = None

    async def start(self) -> PeachAdapter:
        self.executor = PeerExecutor(self.name, self.roles, store=self.store)
        self.executor.refusal_listeners.append(self._heard)
        self.adapter = PeachAdapter(self.name, CHAIN, self.role, self.executor)
        await self.adapter.start()
        return self.adapter

    async def stop(self) -> None:
        if self.adapter is not None:
            await self.adapter.stop()
        self.adapter = None

    def _heard(self, refusal: Refusal) -> None:
        self.refused.append(refusal)
        self.news.set()

    async def hears(self, rule: str, incoming: bool) -> Refusal:
        """The first refusal with ``rule`` its listeners hear of (waiting for it)."""

        async def first() -> Refusal:
            while True:
                for refusal in self.refused:
                    if (refusal.rule, refusal.incoming) == (rule, incoming):
                        return refusal
                self.news.clear()
                await self.news.wait()

        return await asyncio.wait_for(first(), WAIT)


async def resend(url: str, sender: str, record: Any) -> dict[str, Any]:
    """``record`` of ``sender``'s log sent again, signed as ``sender``: the answer."""
    message = {
        "protocol": record.protocol,
        "seq": record.seq,
        "instances": record.instances,
        "context": record.context,
    }
    body = json.dumps({"mas": "default", "sender": sender, "messages": [message]}).encode()
    headers = {AGENT_HEADER: sender, SIGNATURE_HEADER: sign(f"{sender}-secret", body)}
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{url}/peer/messages", content=body, headers=headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["results"][0]
    return result


async def test_a_restarted_peer_refuses_what_follows_an_act_it_refused(tmp_path: Path) -> None:
    roles = directory([CHAIN], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    buyer = Agent("buyer", "Buyer", roles, tmp_path / "buyer.db")
    seller = Agent("seller", "Seller", roles, tmp_path / "seller.db")
    try:
        # The Order reaches the seller.
        b, s = await buyer.start(), await seller.start()
        [order] = await b.attempt([b.build_action("Order", {"item": "pen"})])
        assert buyer.executor and seller.executor
        await settle([buyer.executor, seller.executor], WAIT)
        # The buyer withdraws while the seller is down, and goes down; the seller
        # comes back and ships, not having heard of the Withdraw.
        await seller.stop()
        await b.attempt([b.build_action("Withdraw", {**order.keys, "reason": "late"})])
        await buyer.stop()
        s = await seller.start()
        await s.attempt([s.build_action("Ship", {**order.keys, "tracking": "T1"})])
        # The buyer comes back: each refuses the other's act (nono).
        b = await buyer.start()
        await settle([buyer.executor, seller.executor], WAIT)
        ship_refused = await buyer.hears("nono", incoming=True)
        await seller.hears("nono", incoming=False)
        # The buyer restarts again; meanwhile the seller bills, after its Ship.
        await buyer.stop()
        await s.attempt([s.build_action("Bill", {**order.keys, "amount": 3})])
        b = await buyer.start()
        # The restarted buyer still knows it refused the Ship: it refuses the
        # Bill at once (it does not wait for the Ship forever), and the seller
        # hears of it and stops sending it.
        refusal = await seller.hears("dependency", incoming=False)
        assert "which this agent refused" in refusal.message
        await buyer.hears("dependency", incoming=True)
        await settle([buyer.executor, seller.executor], WAIT)
        assert buyer.executor.waiting() == 0
        assert seller.executor.outstanding() == 0
        assert [i.name for _, i, _ in b.history(order.keys)] == ["Order", "Withdraw"]
        # The Ship sent again (its answer lost, say) gets the verdict it got
        # before the restart, and is not refused (nor recorded) a second time.
        [ship] = [r for r in seller.executor.store.load() if r.instances[0]["action"] == "Ship"]
        url = roles.peers["buyer"].url
        assert url is not None
        before = len(buyer.executor.refusals())
        again = await resend(url, "seller", ship)
        assert (again["status"], again["rule"], again["message"]) == (
            "refused",
            "nono",
            ship_refused.message,
        )
        assert len(buyer.executor.refusals()) == before
    finally:
        await buyer.stop()
        await seller.stop()
    # The buyer's log holds each refusal once.
    incoming = [(r.peer, r.rule) for r in buyer.executor.refusals() if r.incoming]
    assert incoming == [("seller", "nono"), ("seller", "dependency")]
