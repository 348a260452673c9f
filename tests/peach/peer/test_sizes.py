"""Peer to peer: a message is never sent again forever because of its size.

A peer reads requests of at most ``MAX_BODY`` bytes (``413`` past it). A sender
packs its requests under that bound; an attempt whose message alone would pass
it is refused before it is kept (it could never be delivered); a peer that reads
less (another version, another limit) makes the sender send smaller requests,
and a message it will never read is recorded as refused by it, once, instead of
being sent again every few seconds for good. Real peers over HTTP on loopback.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from langshaw import ActionInstance
from peach import ExecutorError, PeachAdapter
from peach.peer import PeerExecutor, _app
from peach.peer import _wire as wire
from tests.peach.test_peer import NONO, directory, settle

FAST = {"retry_initial": 0.01, "retry_max": 0.05}


async def test_an_attempt_too_large_to_deliver_is_refused_before_it_is_kept(
    tmp_path: Path,
) -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    buyer_ex = PeerExecutor("buyer", roles, store=tmp_path / "b.db")
    seller_ex = PeerExecutor("seller", roles)
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    async with buyer, seller:
        huge = ActionInstance(NONO.action("Order"), {"id": "o1", "item": "x" * wire.MAX_BODY})
        with pytest.raises(ExecutorError) as caught:
            await buyer.attempt([huge])
        assert caught.value.code == "too-large" and caught.value.status == 413
        assert "a peer reads at most 8388608" in str(caught.value)
        assert buyer.enactments() == [] and buyer_ex.outstanding() == 0
        assert buyer_ex.store.load() == []
        # The agent goes on: an ordinary Order reaches the seller.
        [order] = await buyer.attempt([buyer.build_action("Order", {"item": "pen"})])
        await settle([buyer_ex, seller_ex], 10.0)
        assert [i.name for _, i, _ in seller.history(order.keys)] == ["Order"]


async def test_a_peer_that_reads_less_gets_smaller_requests_and_refuses_what_it_cannot_read(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_app, "MAX_BODY", 4096)  # the seller reads less than the buyer sends
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    buyer_ex = PeerExecutor("buyer", roles, **FAST)  # type: ignore[arg-type]
    seller_ex = PeerExecutor("seller", roles)
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    caplog.set_level(logging.WARNING, "strabo.peach.peer")
    async with buyer, seller:
        orders = []
        for n in range(30):  # about 1 kB each: 30 kB would go in one request
            [order] = await buyer.attempt([buyer.build_action("Order", {"item": f"{n}" * 1000})])
            orders.append(order)
        await settle([buyer_ex, seller_ex], 20.0)
        assert all(len(seller.history(o.keys)) == 1 for o in orders)
        assert "refused a request of" in caplog.text and buyer_ex.refusals() == []

        # One message the seller will never read: refused by it, once, not sent again.
        [big] = await buyer.attempt([buyer.build_action("Order", {"item": "y" * 5000})])
        await settle([buyer_ex, seller_ex], 20.0)
        [refusal] = buyer_ex.refusals()
        assert (refusal.peer, refusal.rule) == ("seller", "too-large")
        assert "reads no request of" in refusal.message
        assert buyer_ex.outstanding() == 0 and seller.history(big.keys) == []
