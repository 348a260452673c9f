"""Roles as run-time entities: a RoleSpec adopted by an adapter runs its coded
actions, refuses what it must never do before it leaves the agent, reports
must-always breaches, and shows all of it through inspect() and over HTTP."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from peach import ActionRejected, FeasibleAction, PeachAdapter
from peach.inspection import KIND, describe, inspection_app
from peach.roles import ConstraintRefused, MustAlways, MustNever, Responsibility, RoleSpec
from syncserver.serving import serve
from tests.conftest import load
from tests.harness import Harness, until

SIMPLE = load("atomic-ucp.lsh")
AGENTS = {"platform": ["Platform"], "business": ["Business"]}
ITEMS = [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}]


def create(platform: PeachAdapter, currency: str = "USD") -> Any:
    [fa] = platform.initiating()
    return fa.bind(line_items=ITEMS, currency=currency, payment_pref={})


def business_spec(stock: dict[str, int], business: PeachAdapter) -> RoleSpec:
    spec = RoleSpec(
        "Business",
        goal="Sell flowers at list price",
        domain="retail",
        responsibilities=[
            Responsibility(
                "Checkout",
                "Answer each checkout with a session",
                actions=("Created",),
                must_never=(
                    MustNever(
                        "no-free-sessions",
                        "never open a session with an empty id",
                        lambda instance, adapter: instance.bindings.get("id") == "",
                    ),
                ),
                must_always=(
                    MustAlways(
                        "stock-never-negative",
                        "the roses in stock are never fewer than zero",
                        lambda adapter: stock["roses"] >= 0,
                    ),
                ),
            )
        ],
        state=lambda: {"stock": dict(stock)},
    )

    @spec.action("Created", description="open a session for the order")
    async def created(fa: FeasibleAction) -> None:
        stock["roses"] -= 1
        await business.attempt([fa.bind(id=f"chk_{stock['roses']}", totals=[], payment={})])

    spec.decided_by(["Failed"])
    return spec


async def test_a_spec_runs_its_actions_and_reports_a_breach_once() -> None:
    stock = {"roses": 1}
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        business.adopt(business_spec(stock, business))
        breached: list[str] = []
        changed = asyncio.Event()
        business.breach_listeners.append(lambda c: (breached.append(c.name), changed.set()))
        business.listeners.append(lambda batch, newly: changed.set())
        async with platform, business:
            await platform.attempt([create(platform)])
            await until(lambda: business.counters["finalized"] == 1, changed)
            assert stock == {"roses": 0} and breached == []
            await platform.attempt([create(platform)])
            await until(lambda: business.counters["finalized"] == 2, changed)
            # The second Created drove stock below zero: reported after the next
            # batch the business observes, and only once while it lasts.
            await platform.attempt([create(platform)])
            await until(lambda: breached != [], changed)
            await platform.attempt([create(platform)])
            await until(lambda: business.counters["finalized"] == 4, changed)
            await business.drain()
            assert breached == ["stock-never-negative"]
            assert business.counters["breaches"] == 1
            seen = business.inspect()
    json.dumps(seen)  # JSON-able as it is
    assert seen["agent"] == "business" and seen["role"] == "Business"
    assert seen["spec"]["goal"] == "Sell flowers at list price"
    [responsibility] = seen["spec"]["responsibilities"]
    assert responsibility["must_always"][0]["holds"] is False
    assert responsibility["must_never"] == [
        {"name": "no-free-sessions", "description": "never open a session with an empty id"}
    ]
    assert seen["spec"]["actions"] == {
        "Created": {"kind": "local", "description": "open a session for the order", "coded": True},
        "Failed": {"kind": "llm", "description": "", "coded": False},
    }
    assert seen["state"] == {"stock": {"roses": -3}}
    assert seen["counters"]["finalized"] == 4 and seen["counters"]["attempts"] == 4
    assert seen["breaches"][0]["constraint"] == "stock-never-negative"
    assert seen["handlers"]["on_enabled"] == {
        "Created": ["business_spec.<locals>.created"]
    }
    assert seen["enactments"] == {"count": 4, "complete": 0}
    assert seen["pending"] == []
    # Failed is enabled in each of the four checkouts (Created and Failed exclude
    # each other only once one is done; here Created is): none.
    assert seen["enabled"]["count"] == 0


async def test_must_never_refuses_before_the_attempt_leaves_the_agent() -> None:
    async with Harness("http", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        platform.adopt(
            RoleSpec(
                "Platform",
                goal="Buy roses",
                responsibilities=[
                    Responsibility(
                        "Spend",
                        actions=("Create",),
                        must_never=(
                            MustNever(
                                "dollars-only",
                                "never pay in a currency other than USD",
                                lambda i, a: i.bindings.get("currency") not in (None, "USD"),
                            ),
                        ),
                    )
                ],
            )
        )
        async with platform, h.client("platform") as client:
            with pytest.raises(ConstraintRefused) as refused:
                await platform.attempt([create(platform, currency="EUR")])
            assert isinstance(refused.value, ActionRejected)
            assert refused.value.rule == "must-never" and refused.value.constraint == "dollars-only"
            assert "dollars-only" in str(refused.value)
            # Nothing reached the server.
            log = (await client.get("/mas/default/protocols/SimpleUCP/log")).json()
            assert log["events"] == []
            await platform.attempt([create(platform)])
            log = (await client.get("/mas/default/protocols/SimpleUCP/log")).json()
            assert len(log["events"]) == 1
        assert platform.counters == {
            "attempts": 2,
            "refused by constraints": 1,
            "finalized": 1,
            "batches observed": 1,
        }


def test_adopt_checks_the_role_and_the_names() -> None:
    from peach import LocalExecutor
    from syncserver import SyncServer

    server = SyncServer.embedded([SIMPLE], AGENTS)
    adapter = PeachAdapter("platform", SIMPLE, "Platform", LocalExecutor(server))
    with pytest.raises(ValueError, match="the spec is for Business"):
        adapter.adopt(RoleSpec("Business"))
    with pytest.raises(ValueError, match="has no action 'Crate'"):
        typo = Responsibility("x", actions=("Crate",))
        adapter.adopt(RoleSpec("Platform", responsibilities=[typo]))
    spec = RoleSpec("Platform")
    with pytest.raises(ValueError, match="action kind"):
        spec.action("Create", kind="rpc")  # type: ignore[arg-type]
    adapter.adopt(spec)
    with pytest.raises(ValueError, match="adopted a spec already"):
        adapter.adopt(RoleSpec("Platform"))


async def test_the_inspection_endpoint_serves_a_running_agent() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        platform.adopt(RoleSpec("Platform", goal="Buy roses", state=lambda: {"budget": 10}))
        app = inspection_app(lambda: describe("platform", [platform], {"model": "none"}))
        async with platform, serve(app) as url, httpx.AsyncClient(base_url=url) as client:
            await platform.attempt([create(platform)])
            answer = (await client.get("/inspect")).json()
            missing = await client.get("/nothing")
    assert answer["kind"] == KIND and answer["agent"] == "platform" and answer["model"] == "none"
    [role] = answer["roles"]
    assert role["spec"]["goal"] == "Buy roses" and role["state"] == {"budget": 10}
    assert role["counters"] == {"attempts": 1, "finalized": 1, "batches observed": 1}
    names = sorted(a["action"] for a in role["enabled"]["actions"])
    assert names == ["Create"]  # a new checkout; the open one waits for the business
    assert role["enactments"] == {"count": 1, "complete": 0}
    assert missing.status_code == 404
