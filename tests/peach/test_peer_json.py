"""Peer to peer: a number JSON cannot carry (NaN, Infinity, 1e400) never travels.

Python's and pydantic's JSON parsers take ``NaN``, ``Infinity`` and ``1e400``
(as inf), which no log can hold as JSON. A receiver refuses such a message at
once, with the rule ``bad-json`` and the place of the value (as the SyncServer
answers ``400 bad-json`` for an attempt body); it never answers ``busy``, which
would make its sender resend it forever. A sender never lets one out:
``bind()`` raises BindError, and ``attempt()`` of a hand-built instance is
refused before anything is kept. Real peers over HTTP on loopback.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from langshaw import ActionInstance, LangshawProtocol
from peach import BindError, ExecutorError, PeachAdapter
from peach.peer import PeerExecutor
from peach.peer.directory import AGENT_HEADER, SIGNATURE_HEADER, sign
from tests.conftest import FIXTURES
from tests.peach.test_peer import NONO, directory, settle

TYPED = LangshawProtocol.load(FIXTURES / "lsh" / "typed" / "order.lsh")
ROLES = {"buyer": "Buyer", "seller": "Seller"}
LITERALS = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf", "1e400": "inf"}


async def post(url: str, protocol: str, seq: int, instance: str, context: str = "[]") -> Any:
    """One message, written by hand (so that it may hold any literal), signed
    as the buyer; the receiver's result for it."""
    body = (
        '{"mas": "default", "sender": "buyer", "messages": [{"protocol": '
        f'{json.dumps(protocol)}, "seq": {seq}, "instances": [{instance}], '
        f'"context": {context}}}]}}'
    ).encode()
    headers = {AGENT_HEADER: "buyer", SIGNATURE_HEADER: sign("buyer-secret", body)}
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{url}/peer/messages", content=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["results"][0]


async def test_a_number_json_cannot_carry_is_refused_at_once_never_busy(tmp_path: Path) -> None:
    played = {a: [f"{p}:{r}" for p in ("UnsafeNoNo", "TypedOrder")] for a, r in ROLES.items()}
    roles = directory([NONO, TYPED], played, http=True)
    seller_ex = PeerExecutor("seller", roles, store=tmp_path / "seller.db")
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    url = roles.peers["seller"].url
    assert url is not None
    async with seller:
        for seq, (literal, shown) in enumerate(LITERALS.items(), start=1):
            # Untyped: any JSON value binds, but this is none.
            order = f'{{"action": "Order", "bindings": {{"id": "o{seq}", "item": {literal}}}}}'
            for _ in range(2):  # sent again: the same refusal, never "busy"
                result = await post(url, "UnsafeNoNo", seq, order)
                assert (result["status"], result["rule"]) == ("refused", "bad-json"), literal
                assert result["message"] == (
                    "the message is not valid JSON: "
                    f"instances[0].bindings.item is {shown}, not a JSON number"
                )
        # Typed: reported as what it is and where, not as null.
        typed = {
            '"items": [{"sku": "ABC-1", "qty": NaN}]': "items[0].qty is nan",
            '"items": [{"sku": "ABC-1", "qty": 1}], "note": 1e400': "note is inf",
        }
        for seq, (bindings, shown) in enumerate(typed.items(), start=10):
            order = f'{{"action": "Order", "bindings": {{"oid": "t{seq}", {bindings}}}}}'
            result = await post(url, "TypedOrder", seq, order)
            assert (result["status"], result["rule"]) == ("refused", "bad-json")
            assert result["message"] == (
                f"the message is not valid JSON: instances[0].bindings.{shown}, not a JSON number"
            )
        # What follows a refused message is refused in turn; the channel is not
        # poisoned: a well-formed message is accepted.
        withdraw = '{"action": "Withdraw", "bindings": {"id": "o1", "Order": true, "reason": "r"}}'
        result = await post(url, "UnsafeNoNo", 12, withdraw, '[["Order", ["o1"]]]')
        assert (result["status"], result["rule"]) == ("refused", "dependency")
        order = '{"action": "Order", "bindings": {"id": "o9", "item": 1e300}}'
        assert (await post(url, "UnsafeNoNo", 13, order))["status"] == "accepted"
        assert [i.name for _, i, _ in seller.history({"id": "o9"})] == ["Order"]
        assert seller.history({"id": "o1"}) == []
    rules = [r.rule for r in seller_ex.refusals() if r.incoming]
    assert rules == ["bad-json"] * (len(LITERALS) + 2) + ["dependency"]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_an_agent_cannot_send_a_number_json_cannot_carry(store: str, tmp_path: Path) -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    buyer_ex = PeerExecutor("buyer", roles, store=None if store == "memory" else tmp_path / "b.db")
    seller_ex = PeerExecutor("seller", roles)
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    async with buyer, seller:
        for value in (math.nan, math.inf, -math.inf):
            with pytest.raises(BindError, match=r"item is .*, not a JSON number"):
                buyer.build_action("Order", {"item": value})
            [fa] = buyer.initiating()
            with pytest.raises(BindError, match=r"item\.price\[0\] is .*, not a JSON number"):
                fa.bind(item={"price": [value]})
            # Built by hand, past bind(): refused before it is kept or sent.
            forged = ActionInstance(NONO.action("Order"), {"id": "o1", "item": [value]})
            with pytest.raises(ExecutorError) as caught:
                await buyer.attempt([forged])
            assert caught.value.code == "bad-json"
            assert str(caught.value) == (
                "the attempt cannot be sent: it is not valid JSON: "
                f"instances[0].bindings.item[0] is {value}, not a JSON number"
            )
        assert buyer.enactments() == [] and buyer_ex.outstanding() == 0
        # The agent goes on: the next Order reaches the seller.
        [order] = await buyer.attempt([buyer.build_action("Order", {"item": "pen"})])
        await settle([buyer_ex, seller_ex], 10.0)
        assert [i.name for _, i, _ in seller.history(order.keys)] == ["Order"]
    assert buyer_ex.refusals() == [] and seller_ex.refusals() == []


async def test_a_key_no_context_can_name_is_refused_never_a_server_error() -> None:
    """A key bound to a list or an object (JSON, but no key value: not even
    hashable) is refused with the rule the semantics give, not answered 500,
    which its sender would take for "send it again"."""
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    seller_ex = PeerExecutor("seller", roles)
    url = roles.peers["seller"].url
    assert url is not None
    async with PeachAdapter("seller", NONO, "Seller", seller_ex):
        for seq, key in enumerate(("[1]", '{"a": 1}', "1.5", "null"), start=1):
            order = f'{{"action": "Order", "bindings": {{"id": {key}, "item": "x"}}}}'
            for _ in range(2):
                result = await post(url, "UnsafeNoNo", seq, order)
                assert (result["status"], result["rule"]) == ("refused", "key"), key
                assert result["message"].startswith(
                    "key 'id' of 'Order' must be a string or an integer, not "
                )
        assert (await post(url, "UnsafeNoNo", 9, order.replace("null", '"o9"')))[
            "status"
        ] == "accepted"
    assert [r.rule for r in seller_ex.refusals()] == ["key"] * 4
