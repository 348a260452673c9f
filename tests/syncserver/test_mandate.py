"""Mandates on the SyncServer: the principal's bounds hold against bursts.

The agents here post over HTTP themselves, past any adapter, so what holds is
the server's doing. Each run ends with an oracle written from the mandate's
text, not from the code: the log is read back and the agent's actions counted
again by hand.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from langshaw import ActionInstance
from syncserver import SyncServer
from syncserver.config import ConfigError, build_config
from syncserver.errors import Rejected
from syncserver.mandate import Mandate, MandateError, read_mandate
from tests.conftest import LINE_ITEMS, PAYMENT_DATA, SIMPLE_CREATE, load
from tests.harness import Harness

SIMPLE = load("atomic-ucp.lsh")
PATH = "/mas/default/protocols/SimpleUCP"
TOTAL = "$[?(@.type == 'total')].amount"

#: One order, one bouquet, no more than $50.00 (UCP amounts are in cents).
MANDATE: dict[str, Any] = {
    "enactments": 2,
    "actions": {"Complete": {"per_run": 1, "per_enactment": 1}},
    "values": {"Create.line_items": {"path": "$[*].quantity", "total": 1}},
    "ceiling": {"attribute": "totals", "path": TOTAL, "max": 5000, "on": ["Complete"]},
}
AGENTS = {"platform": ["Platform"], "business": ["Business"], "free": ["Platform"]}


def create(cid: str, quantity: int = 1) -> dict[str, Any]:
    items = [{**LINE_ITEMS[0], "quantity": quantity}]
    return {"action": "Create", "bindings": {**SIMPLE_CREATE, "cid": cid, "line_items": items}}


def created(cid: str, cents: int) -> dict[str, Any]:
    return {
        "action": "Created",
        "bindings": {
            "cid": cid,
            "Create": True,
            "id": f"chk-{cid}",
            "totals": [{"type": "subtotal", "amount": cents}, {"type": "total", "amount": cents}],
            "payment": {},
        },
    }


def complete(cid: str) -> dict[str, Any]:
    return {
        "action": "Complete",
        "bindings": {
            "cid": cid,
            "Created": True,
            "id": f"chk-{cid}",
            "payment_data": PAYMENT_DATA,
            "risk_signals": {},
        },
    }


async def post(client: httpx.AsyncClient, *instances: dict[str, Any]) -> httpx.Response:
    return await client.post(f"{PATH}/attempts", json={"instances": list(instances)})


async def log_of(client: httpx.AsyncClient) -> list[tuple[str, str, dict[str, Any]]]:
    """(action, performer, bindings) of every entry, in log order."""
    answer = await client.get(f"{PATH}/log", params={"after": 0, "limit": 5000})
    assert answer.status_code == 200, answer.text
    return [
        (i["action"], i["performer"], i["bindings"])
        for batch in answer.json()["events"]
        for i in batch["instances"]
    ]


def recount(log: list[tuple[str, str, dict[str, Any]]], agent: str) -> dict[str, Any]:
    """The oracle: what ``agent`` did, counted from the log alone."""
    started: list[str] = []
    seen: set[str] = set()
    per_root: dict[tuple[str, str], int] = {}
    per_run: dict[str, int] = {}
    quantities = []
    for action, performer, bindings in log:
        cid = bindings["cid"]
        if cid not in seen:
            seen.add(cid)
            if performer == agent:
                started.append(cid)
        if performer != agent:
            continue
        per_root[(action, cid)] = per_root.get((action, cid), 0) + 1
        per_run[action] = per_run.get(action, 0) + 1
        if action == "Create":
            quantities.append(sum(i["quantity"] for i in bindings["line_items"]))
    return {"started": started, "per_root": per_root, "per_run": per_run, "q": quantities}


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_a_burst_gets_no_more_than_the_mandate_allows(policy: str, tmp_path: Path) -> None:
    async with Harness(
        "http", [SIMPLE], AGENTS, policy=policy, batch_window_ms=5,
        store=str(tmp_path / "s.db"), mandates={"platform": MANDATE},
    ) as h:
        async with h.client("platform") as me, h.client("business") as shop, h.client(
            "free"
        ) as free:
            # Twenty checkouts at once, each for one bouquet: two are allowed.
            answers = await asyncio.gather(*(post(me, create(f"c{i}")) for i in range(20)))
            ok = [a for a in answers if a.status_code == 200]
            refused = [a.json()["error"] for a in answers if a.status_code != 200]
            assert len(ok) == 2, [a.text for a in answers]
            assert {(e["code"], e["rule"]) for e in refused} == {("mandate", "mandate")}
            assert all("mandate enactments = 2" in e["message"] for e in refused), refused
            # An agent without a mandate is not bound by another's.
            for i in range(3):
                assert (await post(free, create(f"f{i}", quantity=7))).status_code == 200
            # Quantities: the burst's survivors were ones; a hundred is refused
            # on its value (the count is full anyway, the value is checked first).
            hundred = await post(me, create("c100", quantity=100))
            assert hundred.status_code == 403
            assert "values.Create.line_items" in hundred.json()["error"]["message"]
            # The shop prices the two checkouts: one at $38.00, one at $3,800.
            mine = [a.json()["seq"] for a in ok]
            log = await log_of(me)
            cids = [b["cid"] for action, who, b in log if who == "platform" and action == "Create"]
            assert len(cids) == 2 and len(mine) == 2
            cheap, dear = cids
            assert (await post(shop, created(cheap, 3800))).status_code == 200
            assert (await post(shop, created(dear, 380000))).status_code == 200
            over = await post(me, complete(dear))
            assert over.status_code == 403, over.text
            assert "mandate ceiling.max = 5000" in over.json()["error"]["message"]
            assert "380000" in over.json()["error"]["message"]
            # Paying twice at once: once is allowed.
            twice = await asyncio.gather(*(post(me, complete(cheap)) for _ in range(5)))
            assert sorted(a.status_code for a in twice).count(200) == 1, [a.text for a in twice]
            log = await log_of(me)
        counted = recount(log, "platform")
        assert len(counted["started"]) <= MANDATE["enactments"]
        assert counted["per_run"].get("Complete", 0) == 1
        assert all(q <= 1 for q in counted["q"])
        assert all(n <= 1 for (a, _), n in counted["per_root"].items() if a == "Complete")


def served(db: str, mandate: dict[str, Any]) -> SyncServer:
    return SyncServer.embedded([SIMPLE], AGENTS, store=db, mandates={"platform": mandate})


def agent(server: SyncServer, name: str = "platform") -> Any:
    return server.config.mas["default"].agents[name]


async def test_the_counts_survive_a_restart(tmp_path: Path) -> None:
    """The server recounts from its log: a restart grants nothing new."""
    db = str(tmp_path / "s.db")
    async with served(db, {"enactments": 1}) as server:
        await server.attempt("default", "SimpleUCP", agent(server), [create("r0")])
    async with served(db, {"enactments": 1}) as server:
        with pytest.raises(Rejected) as refused:
            await server.attempt("default", "SimpleUCP", agent(server), [create("r1")])
        assert "mandate enactments = 1" in refused.value.violation.message


async def test_an_atomic_list_counts_each_instance(tmp_path: Path) -> None:
    async with served(str(tmp_path / "s.db"), {"enactments": 1}) as server:
        me = agent(server)
        with pytest.raises(Rejected) as refused:
            await server.attempt("default", "SimpleUCP", me, [create("a1"), create("a2")])
        assert refused.value.violation.rule == "mandate"
        assert refused.value.violation.index == 1
        await server.attempt("default", "SimpleUCP", me, [create("a1")])


# Reading mandates -------------------------------------------------------------------


def config_with(mandate: Any) -> dict[str, Any]:
    return {
        "mas": {
            "default": {
                "protocols": ["atomic-ucp.lsh"],
                "agents": {"p": {"roles": ["Platform"], "token": "t", "mandate": mandate}},
            }
        }
    }


@pytest.mark.parametrize(
    ("mandate", "message"),
    [
        ({"actions": {"Pay": {"per_run": 1}}}, "no protocol here has an action 'Pay'"),
        ({"actions": {"Complete": {"per_run": -1}}}, "per_run: must be a whole number"),
        ({"actions": {"Complete": {"per_day": 1}}}, "per_day: unknown setting"),
        ({"values": {"Create.colour": {"max": 1}}}, "Create has no attribute 'colour'"),
        ({"values": {"line_items": {"path": "$[*].quantity"}}}, "bounds nothing"),
        ({"values": {"line_items": {"path": "$[", "max": 1}}}, "is not a JSONPath"),
        ({"ceiling": {"attribute": "totals", "max": 1}}, "ceiling.on: missing"),
        ({"ceiling": {"attribute": "price", "max": 1, "on": ["Complete"]}}, "binds 'price'"),
        ({"approval": ["Buy"]}, "no protocol here has an action 'Buy'"),
        ({"enactments": True}, "enactments: must be a whole number"),
        ("one order", "must be a table"),
    ],
)
def test_a_wrong_mandate_is_refused_with_its_place(mandate: Any, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        build_config(config_with(mandate), source="mas.toml")
    text = str(error.value)
    assert message in text, text
    assert "mas.default.agents.p.mandate" in text, text


def test_a_mandate_file_reads_as_toml_or_json(tmp_path: Path) -> None:
    toml = tmp_path / "m.toml"
    toml.write_text(
        'enactments = 1\napproval = ["Complete"]\n'
        '[actions.Complete]\nper_run = 1\n'
        '[values."Create.line_items"]\npath = "$[*].quantity"\ntotal = 1\n'
        f'[ceiling]\nattribute = "totals"\npath = "{TOTAL}"\nmax = 5000\non = ["Complete"]\n'
    )
    from_toml = read_mandate(toml, [SIMPLE])
    as_json = tmp_path / "m.json"
    as_json.write_text(json.dumps({"mandate": from_toml.describe()}))
    from_json = read_mandate(as_json, [SIMPLE])
    assert from_toml == from_json
    assert from_toml.approval == {"Complete"} and from_toml.enactments == 1
    bad = tmp_path / "bad.toml"
    bad.write_text("enactments = 1\n[actions.Pay]\nper_run = 1\n")
    with pytest.raises(MandateError) as error:
        read_mandate(bad, [SIMPLE])
    assert str(error.value).startswith(f"{bad}:2: actions.Pay: no protocol here has an action")
    with pytest.raises(MandateError, match="not valid TOML"):
        (tmp_path / "x.toml").write_text("enactments = ")
        read_mandate(tmp_path / "x.toml", [SIMPLE])
    with pytest.raises(MandateError, match="cannot read it"):
        read_mandate(tmp_path / "none.toml", [SIMPLE])


def test_in_bounds_the_values_a_path_selects() -> None:
    problems: list[str] = []
    table = {"Create.line_items": {"path": "$[*].item.id", "in": ["roses"]}}
    mandate = Mandate.parse({"values": table}, [SIMPLE], "m", lambda w, m: problems.append(m))
    assert not problems
    roses = SIMPLE.action("Create")
    ok = ActionInstance(roses, create("c1")["bindings"])
    tulips = create("c2")
    tulips["bindings"]["line_items"][0]["item"] = {"id": "tulips", "title": "Tulips"}
    assert mandate.check_values([ok]) is None
    refused = mandate.check_values([ok, ActionInstance(roses, tulips["bindings"])])
    assert refused is not None and refused.index == 1
    assert "values.Create.line_items: 'tulips' is not among the allowed ['roses']" in str(refused)
    Mandate.parse({"values": {"currency": {"inn": [1]}}}, [SIMPLE], "m",
                  lambda w, m: problems.append(m))
    assert problems == ["unknown setting (did you mean 'min'? known: path, min, max, total, in)"]


def test_a_path_that_selects_nothing_in_a_value_refuses_it() -> None:
    """A bound whose path finds nothing in a value that holds something cannot be
    checked (the value is not shaped as the mandate expects): refused, never
    passed. An empty list has nothing to bound."""
    table = {"Create.line_items": {"path": "$[*].qty", "max": 2}}
    mandate = Mandate.parse({"values": table}, [SIMPLE], "m", lambda w, m: None)
    action = SIMPLE.action("Create")
    items = ActionInstance(action, create("c1")["bindings"])  # quantities, no "qty"
    refused = mandate.check_values([items])
    assert refused is not None and "selects nothing in" in str(refused)
    empty = ActionInstance(action, {**create("c2")["bindings"], "line_items": []})
    assert mandate.check_values([empty]) is None


async def test_enactments_are_counted_across_the_protocols_of_the_mas(tmp_path: Path) -> None:
    """``enactments = 1`` for an agent playing in two protocols: one enactment
    in all, not one per protocol; and so after a restart."""
    purchase = load("purchase.lsh")
    agents = {"me": ["SimpleUCP:Platform", "Purchase:Buyer"]}
    db = str(tmp_path / "s.db")
    rfq = {"action": "RFQ", "bindings": {"ID": "p1", "item": "pen", "budget": 5}}

    def both() -> SyncServer:
        return SyncServer.embedded([SIMPLE, purchase], agents, store=db,
                                   mandates={"me": {"enactments": 1}})

    async with both() as server:
        me = agent(server, "me")
        await server.attempt("default", "SimpleUCP", me, [create("c1")])
        with pytest.raises(Rejected) as refused:
            await server.attempt("default", "Purchase", me, [rfq])
        assert "mandate enactments = 1" in refused.value.violation.message
    async with both() as server:
        with pytest.raises(Rejected):
            await server.attempt("default", "Purchase", agent(server, "me"), [rfq])
