"""An agent acts for its own name only: a seller prices its own call, a member
takes from its own queue. The protocol cannot say which agent a key names; the
MAS's ``acts_for`` can, the server holds agents to it and adapters offer
nothing else (syncserver.acts_for)."""

from __future__ import annotations

import asyncio

import pytest

from langshaw import ActionInstance, LangshawProtocol
from peach import ActionRejected, BindError
from strabo.simulate import ScenarioError, parse_scenario, simulate
from syncserver.config import ConfigError, build_config
from tests.conftest import PROTOCOLS
from tests.harness import harness, until

PATTERNS = PROTOCOLS / "patterns"
MARKET = LangshawProtocol.load(PATTERNS / "market.lsh")
QUEUES = LangshawProtocol.load(PATTERNS / "queue.lsh")
AGENTS = {"market": ["Market"], "steady": ["Seller"], "rival": ["Seller"]}
PINS = {"steady": {"seller": "steady"}, "rival": {"seller": "rival"}}


async def open_and_call(market) -> None:  # type: ignore[no-untyped-def]
    [open_] = market.initiating()
    await market.attempt([open_.bind(market="m", round=1, cost=2.0)])
    calls = [
        f.bind(seller=name)
        for name in ("steady", "rival")
        for f in market.enabled({"market": "m"})
        if f.name == "Call"
    ]
    await market.attempt(calls)


@pytest.mark.parametrize("kind", ["local", "http"])
async def test_a_seller_is_offered_and_may_set_only_its_own_price(kind: str) -> None:
    async with harness(kind, [MARKET], AGENTS, acts_for=PINS) as h:
        market = h.adapter("market", "Market")
        steady = h.adapter("steady", "Seller")
        await market.start()
        await steady.start()
        await open_and_call(market)
        await steady.sync()
        offered = [f.keys.get("seller") for f in steady.enabled() if f.name == "Price"]
        assert offered == ["steady"]  # rival's call is not steady's to answer
        # Asked for by name, the rival's price is refused, naming the pin ...
        rivals = {"market": "m", "round": 1, "seller": "rival", "price": 99.0}
        with pytest.raises(BindError) as unbindable:
            steady.build_action("Price", rivals)
        assert unbindable.value.rule == "acts-for"
        assert "acts for seller 'steady' only" in str(unbindable.value)
        # ... and, built by hand, by the server.
        price = MARKET.actions["Price"]
        forged = ActionInstance(price, {**rivals, "Call": True})
        with pytest.raises(ActionRejected) as refused:
            await steady.attempt([forged])
        assert refused.value.violation.rule == "acts-for"
        assert "acts for seller 'steady' only" in refused.value.violation.message
        # Nothing of it was recorded; steady's own price is taken.
        [own] = [f for f in steady.enabled() if f.name == "Price"]
        await steady.attempt([own.bind(price=5.0)])
        prices = [i["seller"] for _, i, _ in steady.history({"market": "m"}) if i.name == "Price"]
        assert prices == ["steady"]


async def test_peer_to_peer_a_seller_is_held_to_its_own_price() -> None:
    async with harness("peer", [MARKET], AGENTS, acts_for=PINS) as h:
        market = h.adapter("market", "Market")
        steady = h.adapter("steady", "Seller")
        arrived = asyncio.Event()
        steady.listeners.append(lambda *_: arrived.set())
        await market.start()
        await steady.start()
        await open_and_call(market)
        await until(lambda: any(f.name == "Price" for f in steady.enabled()), arrived)
        assert [f.keys["seller"] for f in steady.enabled() if f.name == "Price"] == ["steady"]
        forged = ActionInstance(
            MARKET.actions["Price"],
            {"market": "m", "round": 1, "seller": "rival", "Call": True, "price": 99.0},
        )
        with pytest.raises(ActionRejected) as refused:
            await steady.attempt([forged])
        assert refused.value.violation.rule == "acts-for"


async def test_over_http_the_refusal_is_a_403_naming_the_rule() -> None:
    async with harness("http", [MARKET], AGENTS, acts_for=PINS) as h:
        market = h.adapter("market", "Market")
        await market.start()
        await open_and_call(market)
        async with h.client("steady") as client:
            info = (await client.get("/mas/default")).json()
            assert info["acts_for"] == {"seller": "steady"}
            body = {
                "instances": [
                    {
                        "action": "Price",
                        "bindings": {
                            "market": "m", "round": 1, "seller": "rival", "Call": True,
                            "price": 1.0,
                        },
                    }
                ]
            }
            answer = await client.post("/mas/default/protocols/Market/attempts", json=body)
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["rule"] == "acts-for"


async def test_an_action_pin_holds_that_action_only() -> None:
    agents = {"host": ["Host"], "ann": ["Member"], "bob": ["Member"]}
    pins = {a: {"Take.queue": a, "Send.sender": a} for a in ("ann", "bob")}
    async with harness("local", [QUEUES], agents, acts_for=pins) as h:
        host, ann, bob = (h.adapter(a, r) for a, r in [("host", "Host"), ("ann", "Member"),
                                                        ("bob", "Member")])
        for adapter in (host, ann, bob):
            await adapter.start()
        [start] = host.initiating()
        await host.attempt([start.bind(session="s", subject="x")])
        await ann.sync()
        # Send.queue names the recipient: not pinned. Send.sender is.
        message = {"session": "s", "queue": "bob", "msg": "1", "sender": "ann", "body": "hi"}
        await ann.attempt([ann.build_action("Send", message)])
        forged = {**message, "msg": "2", "sender": "bob"}
        with pytest.raises(BindError) as unbindable:
            ann.build_action("Send", forged)
        assert unbindable.value.rule == "acts-for"
        send = QUEUES.actions["Send"]
        with pytest.raises(ActionRejected) as refused:
            await ann.attempt([ActionInstance(send, {**forged, "Start": True})])
        assert refused.value.violation.rule == "acts-for"
        await ann.sync()
        await bob.sync()
        assert not [f for f in ann.enabled({"session": "s"}) if f.name == "Take"]
        [take] = [f for f in bob.enabled({"session": "s"}) if f.name == "Take"]
        await bob.attempt([take.bind(answer="ok")])


def test_a_pin_naming_nothing_is_a_configuration_error() -> None:
    def config(pins: object) -> None:
        build_config(
            {
                "mas": {
                    "default": {
                        "protocols": [MARKET],
                        "agents": {"steady": {"roles": ["Seller"], "token": "t",
                                              "acts_for": pins}},
                    }
                }
            },
            source="<test>",
        )

    config({"seller": "steady", "Price.seller": "steady"})  # both forms are fine
    for pins, message in [
        ({"sellr": "steady"}, "no action of this MAS's protocols has an attribute 'sellr'"),
        ({"Bid.seller": "steady"}, "no protocol here has an action 'Bid'"),
        ({"Open.seller": "steady"}, "Open has no attribute 'seller'"),
        ({"seller": ["steady"]}, "must be a string or an integer"),
        ({"seller": True}, "must be a string or an integer"),
        ("steady", "must be a table"),
    ]:
        with pytest.raises(ConfigError) as error:
            config(pins)
        assert message in str(error.value), (pins, str(error.value))


ROGUE = '''
def hijack(move):
    if move.name != "Price":
        return None
    return {"price": 99.0 if move.keys.get("seller") != move.agent else 3.0}
'''


async def test_a_rogue_seller_in_a_scenario_cannot_price_for_its_rivals(tmp_path) -> None:
    (tmp_path / "rogue.py").write_text(ROGUE)
    text = (PATTERNS / "market.toml").read_text()
    text = text.replace('protocol = "market.lsh"', f'protocol = "{PATTERNS / "market.lsh"}"')
    text = text.replace("strabo.simulate.policies.market:fixed", "rogue:hijack")
    text = text.replace("limit = 12", "limit = 2").replace("count = 12", "count = 3")
    result = await simulate(parse_scenario(text, base=tmp_path))
    assert (result.reason, result.rounds_ended) == ("complete", 2), result.detail
    prices = [o for o in result.trace if o.action == "Price"]
    assert len(prices) == 6
    assert all(o.performer == o["seller"] for o in prices)
    assert {o["price"] for o in prices if o.performer == "steady"} == {3.0}


def test_a_scenario_pin_naming_nothing_is_reported_where_it_is() -> None:
    text = (PATTERNS / "market.toml").read_text().replace(
        'acts_for = "buyer"', 'acts_for = "buyr"'
    )
    with pytest.raises(ScenarioError) as error:
        parse_scenario(text, base=PATTERNS)
    [problem] = error.value.problems
    assert "agents.buyer.acts_for" in problem
    assert "attribute 'buyr'" in problem
