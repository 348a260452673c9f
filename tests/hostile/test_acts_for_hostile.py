"""Hostile tests of ``acts_for`` (syncserver.acts_for): an agent pinned to its
own value of an attribute may not bind it to another, however it asks (an
adapter, a plain POST, a channel, a batched window, an atomic list, a peer
whose own directory forgot the pin), and is not offered what it may not take.

The bugs this review found are fixed, and their tests pass."""

from __future__ import annotations

import asyncio
import json
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from langshaw import ActionInstance, LangshawProtocol
from peach import ActionRejected, BindError, PeachAdapter
from peach.llm import LLMAgent
from peach.peer import Directory, PeerExecutor
from tests.conftest import PROTOCOLS
from tests.harness import Harness, harness, until
from tests.syncserver.test_channel import open_channel

MARKET_FILE = PROTOCOLS / "patterns" / "market.lsh"
MARKET = LangshawProtocol.load(MARKET_FILE)
AGENTS = {"market": ["Market"], "steady": ["Seller"], "rival": ["Seller"], "ann": ["Buyer"]}
PINS: dict[str, dict[str, Any]] = {
    "steady": {"seller": "steady"},
    "rival": {"seller": "rival"},
    "ann": {"buyer": "ann"},
}
KEY = ("default", "Market")
STRABO = str(Path(sys.executable).parent / "strabo")

# A task is assigned (or not: assignee is optional) and offered in slots; the
# worker does it. owner is untyped: any JSON value.
TASKS = LangshawProtocol.parse(
    """Tasks
who Boss, Worker
what task key, slot key, Done
do
  Boss : Assign(task: string, assignee?: string)
  Boss : Offer(task, slot, Assign, assignee, owner)
  Worker : Do(task, slot, Offer, assignee, owner, result: string)
  Boss : Done(task, Do)
sayso
  Boss : assignee, owner
  Worker : result
"""
)


def price(seller: Any, value: float = 5.0, **extra: Any) -> dict[str, Any]:
    """A Price instance as the wire carries it (round 1 of market m)."""
    bindings = {"market": "m", "round": 1, "seller": seller, "Call": True, "price": value}
    return {"action": "Price", "bindings": {**bindings, **extra}}


def instance(wire: dict[str, Any]) -> ActionInstance:
    return ActionInstance(MARKET.actions[wire["action"]], wire["bindings"])


async def open_and_call(market: PeachAdapter, *sellers: str) -> None:
    [open_] = market.initiating()
    await market.attempt([open_.bind(market="m", round=1, cost=2.0)])
    calls = [
        f.bind(seller=name)
        for name in sellers
        for f in market.enabled({"market": "m"})
        if f.name == "Call"
    ]
    await market.attempt(calls)


def seq(h: Harness) -> int:
    return h.server.ledgers[KEY].committed_seq


def prices(adapter: PeachAdapter) -> list[Any]:
    return [i["seller"] for _, i, _ in adapter.history({"market": "m"}) if i.name == "Price"]



async def called(h: Harness) -> tuple[PeachAdapter, PeachAdapter]:
    """The market and steady, started, once steady has heard both sellers called."""
    market, steady = h.adapter("market", "Market"), h.adapter("steady", "Seller")
    await market.start()
    await steady.start()
    heard = asyncio.Event()
    steady.listeners.append(lambda *_: heard.set())
    await open_and_call(market, "steady", "rival")
    await steady.sync()
    await until(lambda: any(f.name == "Price" for f in steady.enabled()), heard)
    return market, steady

# The server: every way in refuses, nothing is recorded ---------------------------------


@pytest.mark.parametrize("kind", ["local", "http", "peer"])
async def test_a_forged_second_instance_of_an_atomic_list_refuses_the_whole_list(
    kind: str,
) -> None:
    async with harness(kind, [MARKET], AGENTS, acts_for=PINS) as h:
        _, steady = await called(h)
        before = seq(h) if kind != "peer" else None
        with pytest.raises(ActionRejected) as refused:
            await steady.attempt([instance(price("steady")), instance(price("rival"))])
        assert refused.value.violation.rule == "acts-for"
        assert refused.value.violation.index == 1
        assert refused.value.violation.attribute == "seller"
        # Not even steady's own, first instance was recorded.
        assert prices(steady) == []
        if before is not None:
            assert seq(h) == before
        [own] = [f for f in steady.enabled() if f.name == "Price"]
        await steady.attempt([own.bind(price=4.0)])
        assert prices(steady) == ["steady"]


@pytest.mark.parametrize("kind", ["local", "http"])
async def test_the_batched_policy_refuses_a_forgery_among_concurrent_attempts(kind: str) -> None:
    async with harness(
        kind, [MARKET], AGENTS, acts_for=PINS, policy="batched", batch_window_ms=30
    ) as h:
        market = h.adapter("market", "Market")
        steady, rival = h.adapter("steady", "Seller"), h.adapter("rival", "Seller")
        for adapter in (market, steady, rival):
            await adapter.start()
        await open_and_call(market, "steady", "rival")
        await steady.sync()
        await rival.sync()
        results = await asyncio.gather(
            steady.attempt([instance(price("rival", 1.0))]),  # steady forges rival's
            rival.attempt([instance(price("rival", 7.0))]),  # in the same window
            steady.attempt([instance(price("steady", 6.0))]),
            return_exceptions=True,
        )
        assert isinstance(results[0], ActionRejected), results[0]
        assert results[0].violation.rule == "acts-for"
        assert not isinstance(results[1], BaseException), results[1]
        assert not isinstance(results[2], BaseException), results[2]
        await market.sync()
        recorded = {
            i["seller"]: (i["price"], who)
            for _, i, who in market.history({"market": "m"})
            if i.name == "Price"
        }
        assert recorded == {"rival": (7.0, "rival"), "steady": (6.0, "steady")}


LOOK_ALIKES = [
    "rival",
    "Steady",
    "steady ",
    " steady",
    "\u0455teady",  # Cyrillic dze
    "steady\u200b",  # zero width space
    "\uff53\uff54\uff45\uff41\uff44\uff59",  # full width
    "steady\x00",
    "",
    None,
    1,
    True,
    ["steady"],
    {"name": "steady"},
    "steady" * 20_000,
]


async def test_a_plain_post_with_a_look_alike_value_is_a_403_and_nothing_is_recorded() -> None:
    async with harness("http", [MARKET], AGENTS, acts_for=PINS) as h:
        market = h.adapter("market", "Market")
        await market.start()
        await open_and_call(market, "steady", "rival")
        before = seq(h)
        async with h.client("steady") as client:
            for value in LOOK_ALIKES:
                answer = await client.post(
                    "/mas/default/protocols/Market/attempts",
                    json={"instances": [price(value)], "attempt_id": "same-id"},
                )
                assert answer.status_code == 403, (repr(value)[:40], answer.text[:300])
                error = answer.json()["error"]
                assert (error["rule"], error["attribute"]) == ("acts-for", "seller")
                assert "acts for seller 'steady' only" in error["message"]
            # An attempt id refused before is no receipt: the real thing goes through.
            ok = await client.post(
                "/mas/default/protocols/Market/attempts",
                json={"instances": [price("steady")], "attempt_id": "same-id"},
            )
            assert ok.status_code == 200, ok.text
        assert seq(h) == before + 1


async def test_a_decomposed_unicode_name_is_not_the_composed_one() -> None:
    composed = unicodedata.normalize("NFC", "zoë")
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    agents = {"market": ["Market"], composed: ["Seller"]}
    async with harness("local", [MARKET], agents, acts_for={composed: {"seller": composed}}) as h:
        market, zoe = h.adapter("market", "Market"), h.adapter(composed, "Seller")
        await market.start()
        await zoe.start()
        await open_and_call(market, composed, decomposed)
        await zoe.sync()
        offered = [f.keys["seller"] for f in zoe.enabled() if f.name == "Price"]
        assert offered == [composed]
        with pytest.raises(ActionRejected) as refused:
            await zoe.attempt([instance(price(decomposed))])
        assert refused.value.violation.rule == "acts-for"


async def test_an_integer_pin_is_not_met_by_true_a_float_or_a_string() -> None:
    pins = {"steady": {"Price.round": 1}}
    async with harness("http", [MARKET], AGENTS, acts_for=pins) as h:
        market = h.adapter("market", "Market")
        await market.start()
        await open_and_call(market, "steady")
        before = seq(h)
        async with h.client("steady") as client:
            info = (await client.get("/mas/default")).json()
            assert info["acts_for"] == {"Price.round": 1}
            for value in (True, 1.0, "1", 2, -1, 10**30):
                body = json.dumps({"instances": [price("steady", round=value)]})
                answer = await client.post(
                    "/mas/default/protocols/Market/attempts",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                assert answer.status_code == 403, (value, answer.text)
                assert answer.json()["error"]["rule"] == "acts-for"
            assert seq(h) == before
            ok = await client.post(
                "/mas/default/protocols/Market/attempts", json={"instances": [price("steady")]}
            )
            assert ok.status_code == 200, ok.text


async def answer_to(reader: asyncio.StreamReader, ident: str) -> dict[str, Any]:
    """The channel's answer to attempt ``ident`` (batches skipped)."""
    while True:
        block = (await asyncio.wait_for(reader.readuntil(b"\n\n"), 5)).decode()
        kind = "message"
        data_: dict[str, Any] | None = None
        for text in block.splitlines():
            if text.startswith("event: "):
                kind = text[7:]
            elif text.startswith("data: "):
                data_ = json.loads(text[6:])
        if kind == "answer" and data_ is not None and data_["id"] == ident:
            return data_


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_a_forgery_on_a_channel_is_answered_403_and_the_channel_goes_on(
    policy: str,
) -> None:
    async with harness("http", [MARKET], AGENTS, acts_for=PINS, policy=policy) as h:
        market = h.adapter("market", "Market")
        await market.start()
        await open_and_call(market, "steady", "rival")
        before = seq(h)
        assert h.url is not None
        reader, writer = await open_channel(h.url, "steady-token", protocol="Market")
        try:
            forged = [price("steady"), price("rival")]  # the second is forged
            writer.write(json.dumps({"instances": forged, "attempt_id": "f"}).encode() + b"\n")
            answer = await answer_to(reader, "f")
            assert answer["status"] == 403, answer
            assert answer["error"]["rule"] == "acts-for"
            assert answer["error"]["index"] == 1
            assert seq(h) == before
            own = {"instances": [price("steady")], "attempt_id": "f2"}
            writer.write(json.dumps(own).encode() + b"\n")
            assert (await answer_to(reader, "f2"))["status"] == 200
            assert seq(h) == before + 1
        finally:
            writer.close()


async def test_the_refusal_message_of_a_huge_value_is_bounded() -> None:
    """Other messages shorten what they echo (an unknown MAS name, say); the
    acts-for one quoted a rejected value whole, here 400 kB, in the answer."""
    async with harness("local", [MARKET], AGENTS, acts_for=PINS) as h:
        market, steady = h.adapter("market", "Market"), h.adapter("steady", "Seller")
        await market.start()
        await steady.start()
        await open_and_call(market, "steady")
        with pytest.raises(ActionRejected) as refused:
            await steady.attempt([instance(price("x" * 400_000))])
        assert refused.value.violation.rule == "acts-for"
        assert len(refused.value.violation.message) < 2_000


# Peers --------------------------------------------------------------------------------


async def test_a_peer_whose_own_directory_lacks_the_pin_is_refused_by_its_receivers() -> None:
    async with harness("peer", [MARKET], AGENTS, acts_for=PINS) as h:
        market = h.adapter("market", "Market")
        rival = h.adapter("rival", "Seller")
        # steady runs with a directory of its own that forgot every pin.
        forgetful = Directory.of(
            [MARKET],
            {
                name: {"roles": list(AGENTS[name]), "token": f"{name}-token", "url": peer.url}
                for name, peer in h.directory.peers.items()
            },
        )
        rogue = PeerExecutor("steady", forgetful)
        steady = PeachAdapter("steady", MARKET, "Seller", rogue)
        h.adapters.append(steady)
        for adapter in (market, rival, steady):
            await adapter.start()
        heard = asyncio.Event()
        steady.listeners.append(lambda *_: heard.set())
        await open_and_call(market, "steady", "rival")
        await until(lambda: len([f for f in steady.enabled() if f.name == "Price"]) == 2, heard)
        refusals = asyncio.Event()
        rogue.refusal_listeners.append(lambda _: refusals.set())
        # steady's own executor lets it through ...
        await steady.attempt([instance(price("rival", 0.5))])
        await until(lambda: len(rogue.refusals()) >= 2, refusals)
        # ... market and rival both refuse it, naming the rule; neither records it.
        assert {(r.peer, r.rule) for r in rogue.refusals()} == {
            ("market", "acts-for"),
            ("rival", "acts-for"),
        }
        assert prices(market) == [] and prices(rival) == []
        # and rival may still set its own price.
        [own] = [f for f in rival.enabled() if f.name == "Price"]
        await rival.attempt([own.bind(price=8.0)])
        assert prices(rival) == ["rival"]


async def test_peer_build_action_names_the_pin_and_offers_only_its_own() -> None:
    async with harness("peer", [MARKET], AGENTS, acts_for=PINS) as h:
        market, steady = h.adapter("market", "Market"), h.adapter("steady", "Seller")
        await market.start()
        await steady.start()
        heard = asyncio.Event()
        steady.listeners.append(lambda *_: heard.set())
        await open_and_call(market, "steady", "rival")
        await until(lambda: any(f.name == "Price" for f in steady.enabled()), heard)
        assert [f.keys["seller"] for f in steady.enabled() if f.name == "Price"] == ["steady"]
        with pytest.raises(BindError) as unbindable:
            steady.build_action(
                "Price", {"market": "m", "round": 1, "seller": "rival", "price": 1.0}
            )
        assert unbindable.value.rule == "acts-for"


# Offers: the adapter and the LLM ------------------------------------------------------


@pytest.mark.parametrize("kind", ["local", "http", "peer"])
async def test_an_llm_seller_is_offered_only_its_own_price(kind: str) -> None:
    async with harness(kind, [MARKET], AGENTS, acts_for=PINS) as h:
        _, steady = await called(h)
        agent = LLMAgent([steady], "price well", client=object())
        offers = [o for o in agent.offers() if o.feasible.name == "Price"]
        assert [o.feasible.keys["seller"] for o in offers] == ["steady"]
        assert "seller" not in offers[0].asks
        text, ok = await agent.perform_offer(offers[0], {"price": 3.0})
        assert ok, text
        assert prices(steady) == ["steady"]


async def posted(h: Harness) -> PeachAdapter:
    """Round 1 posted with steady's price; ann's Buyer adapter, started."""
    market, steady = h.adapter("market", "Market"), h.adapter("steady", "Seller")
    ann = h.adapter("ann", "Buyer")
    for adapter in (market, steady, ann):
        await adapter.start()
    await open_and_call(market, "steady")
    await steady.sync()
    await steady.attempt([steady.build_action("Price", price("steady")["bindings"])])
    await market.sync()
    await market.attempt(
        [market.build_action("Post", {"market": "m", "round": 1, "prices": {"steady": 5.0}})]
    )
    await ann.sync()
    return ann


async def test_an_offer_whose_new_key_is_pinned_binds_the_agent_s_own_value() -> None:
    async with harness("local", [MARKET], AGENTS, acts_for=PINS) as h:
        ann = await posted(h)
        agent = LLMAgent([ann], "buy cheap", client=object())
        [offer] = [o for o in agent.offers() if o.feasible.name == "Buy"]
        text, ok = await agent.perform_offer(offer, {"choice": "steady"})
        assert ok, text
        [buy] = [i for _, i, _ in ann.history({"market": "m"}) if i.name == "Buy"]
        assert buy["buyer"] == "ann"


async def test_build_action_refuses_a_pinned_new_key_of_another_value() -> None:
    async with harness("local", [MARKET], AGENTS, acts_for=PINS) as h:
        ann = await posted(h)
        with pytest.raises(BindError) as unbindable:
            ann.build_action("Buy", {"market": "m", "round": 1, "buyer": "bob", "choice": "steady"})
        assert unbindable.value.rule == "acts-for"


async def test_a_required_pinned_attribute_left_out_is_refused_and_not_recorded() -> None:
    async with harness("http", [MARKET], AGENTS, acts_for=PINS) as h:
        market = h.adapter("market", "Market")
        await market.start()
        await open_and_call(market, "steady")
        before = seq(h)
        wire = price("steady")
        del wire["bindings"]["seller"]
        async with h.client("steady") as client:
            answer = await client.post(
                "/mas/default/protocols/Market/attempts", json={"instances": [wire]}
            )
        assert answer.status_code in (403, 409, 422), answer.text
        assert seq(h) == before


async def test_a_pinned_new_key_given_another_value_is_refused_by_the_server() -> None:
    async with harness("http", [MARKET], AGENTS, acts_for=PINS) as h:
        ann = await posted(h)
        [buy] = [f for f in ann.enabled() if f.name == "Buy"]
        before = seq(h)
        with pytest.raises(ActionRejected) as refused:
            forged = {**buy.fixed, "buyer": "bob", "choice": "steady"}
            await ann.attempt([ActionInstance(MARKET.actions["Buy"], forged)])
        assert refused.value.violation.rule == "acts-for"
        assert seq(h) == before
        assert buy.keys["buyer"] == "ann"  # offered in its own scope: nothing to give
        await ann.attempt([buy.bind(choice="steady")])


def tasks(kind: str, pins: dict[str, Any]) -> Any:
    return harness(kind, [TASKS], {"boss": ["Boss"], "w1": ["Worker"]}, acts_for={"w1": pins})


@pytest.mark.parametrize("kind", ["local", "http"])
async def test_a_pinned_optional_attribute_left_absent_is_offered_iff_accepted(kind: str) -> None:
    async with tasks(kind, {"assignee": "w1"}) as h:
        boss, w1 = h.adapter("boss", "Boss"), h.adapter("w1", "Worker")
        await boss.start()
        await w1.start()
        [assign] = boss.initiating()
        await boss.attempt([assign.bind(task="a")])  # assigned to no one
        await boss.attempt([boss.build_action("Offer", {"task": "a", "slot": 1, "owner": 0})])
        await w1.sync()
        offered = any(f.name == "Do" for f in w1.enabled())
        forged = ActionInstance(
            TASKS.actions["Do"],
            {"task": "a", "slot": 1, "Offer": True, "owner": 0, "result": "done"},
        )
        try:
            await w1.attempt([forged])
            accepted = True
        except ActionRejected:
            accepted = False
        assert offered == accepted, (offered, accepted)


@pytest.mark.parametrize("kind", ["local", "http"])
async def test_a_pinned_optional_attribute_bound_to_null_is_refused(kind: str) -> None:
    async with tasks(kind, {"owner": "w1"}) as h:
        boss, w1 = h.adapter("boss", "Boss"), h.adapter("w1", "Worker")
        await boss.start()
        await w1.start()
        [assign] = boss.initiating()
        for task, owner in [("a", None), ("b", "w1")]:
            await boss.attempt([assign.bind(task=task, assignee="w1")])
            await boss.attempt(
                [boss.build_action("Offer", {"task": task, "slot": 1, "owner": owner})]
            )
        await w1.sync()
        # The scope held for null is not offered; w1's own is.
        assert [f.keys["task"] for f in w1.enabled() if f.name == "Do"] == ["b"]
        forged = ActionInstance(
            TASKS.actions["Do"],
            {"task": "a", "slot": 1, "Offer": True, "assignee": "w1", "owner": None, "result": "r"},
        )
        with pytest.raises(ActionRejected) as refused:
            await w1.attempt([forged])
        assert refused.value.violation.rule == "acts-for"


async def test_a_scope_held_for_true_or_1_0_is_not_offered_to_an_agent_pinned_to_1() -> None:
    async with tasks("local", {"owner": 1}) as h:
        boss, w1 = h.adapter("boss", "Boss"), h.adapter("w1", "Worker")
        await boss.start()
        await w1.start()
        [assign] = boss.initiating()
        for task, owner in [("b", True), ("c", 1.0), ("d", "1"), ("e", 1)]:
            await boss.attempt([assign.bind(task=task, assignee="w1")])
            await boss.attempt(
                [boss.build_action("Offer", {"task": task, "slot": 1, "owner": owner})]
            )
        await w1.sync()
        offered = sorted(f.keys["task"] for f in w1.enabled() if f.name == "Do")
        assert offered == ["e"], offered
        for feasible in [f for f in w1.enabled() if f.name == "Do"]:
            await w1.attempt([feasible.bind(result="r")])  # each offer is acceptable
