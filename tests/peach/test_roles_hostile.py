"""Roles and inspection as a careless or hostile program would use them: checks
that raise or are coroutines, listeners that raise, specs adopted wrongly,
state that JSON cannot hold, and an adapter in a great many enactments. The
adapter must keep playing, refuse what it cannot show harmless, and the
inspection must answer JSON, bounded in size and time."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
from typing import Any

import httpx
import pytest

from langshaw import ActionInstance
from peach import FeasibleAction, LocalExecutor, PeachAdapter
from peach.inspection import MAX_LISTED, MAX_SCANNED, describe, inspection_app
from peach.roles import ConstraintRefused, MustAlways, MustNever, Responsibility, RoleSpec
from syncserver import SyncServer
from syncserver.batch import Batch, Entry
from syncserver.serving import serve
from tests.conftest import load
from tests.harness import Harness, until

SIMPLE = load("atomic-ucp.lsh")
AGENTS = {"platform": ["Platform"], "business": ["Business"]}
ITEMS = [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}]


def create(platform: PeachAdapter) -> Any:
    [fa] = platform.initiating()
    return fa.bind(line_items=ITEMS, currency="USD", payment_pref={})


def guarded(check: Any) -> RoleSpec:
    return RoleSpec(
        "Platform",
        responsibilities=[
            Responsibility("Spend", must_never=(MustNever("guard", "guard", check),))
        ],
    )


async def test_a_must_never_check_that_raises_refuses_the_attempt() -> None:
    def broken(instance: ActionInstance, adapter: Any) -> bool:
        return instance.bindings["no such attribute"] == 1

    async with Harness("http", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        platform.adopt(guarded(broken))
        async with platform, h.client("platform") as client:
            with pytest.raises(ConstraintRefused) as refused:
                await platform.attempt([create(platform)])
            assert refused.value.rule == "must-never" and refused.value.constraint == "guard"
            assert isinstance(refused.value.check_error, KeyError)
            assert "check of the role's constraint 'guard'" in str(refused.value)
            assert "KeyError" in str(refused.value)
            log = (await client.get("/mas/default/protocols/SimpleUCP/log")).json()
            assert log["events"] == []  # nothing left the agent
            assert platform.counters["constraint check errors"] == 1
            assert platform.counters["refused by constraints"] == 1


def test_checks_must_be_plain_functions() -> None:
    async def later(instance: Any, adapter: Any) -> bool:
        return False

    with pytest.raises(TypeError, match="coroutine function"):
        MustNever("n", "d", later)
    with pytest.raises(TypeError, match="coroutine function"):
        MustAlways("a", "d", later)
    with pytest.raises(TypeError, match="must be a function"):
        MustAlways("a", "d", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a name"):
        MustNever("", "d", lambda i, a: False)


async def test_a_check_returning_an_awaitable_refuses_rather_than_passing() -> None:
    async def coroutine() -> bool:
        return False

    # A lambda around a coroutine slips past the declaration check; its result,
    # truthy whatever it would say, must not decide.
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        platform.adopt(guarded(lambda instance, adapter: coroutine()))
        async with platform:
            with pytest.raises(ConstraintRefused, match="returned an awaitable"):
                await platform.attempt([create(platform)])


async def test_a_raising_breach_listener_neither_fails_the_attempt_nor_starves_handlers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # One agent playing both roles: both adapters share an executor, so the
    # platform's attempt delivers the batch to the business too.
    async with Harness("local", [SIMPLE], {"shop": ["Platform", "Business"]}) as h:
        platform, business = h.adapter("shop", "Platform"), h.adapter("shop", "Business")
        spec = RoleSpec(
            "Business",
            responsibilities=[
                Responsibility(
                    "Quiet",
                    must_always=(
                        MustAlways("no-orders", "no checkout", lambda a: not a.enactments()),
                    ),
                )
            ],
        )

        @spec.action("Created")
        async def created(fa: FeasibleAction) -> None:
            await business.attempt([fa.bind(id="chk_1", totals=[], payment={})])

        business.adopt(spec)

        def listener(constraint: MustAlways) -> None:
            raise RuntimeError("the pager is down")

        business.breach_listeners.append(listener)
        changed = asyncio.Event()
        business.listeners.append(lambda batch, newly: changed.set())
        async with platform, business:
            with caplog.at_level(logging.ERROR, logger="strabo.peach"):
                done = await platform.attempt([create(platform)])  # finalized: no error
            assert [i.name for i in done] == ["Create"]
            await until(lambda: business.counters["finalized"] == 1, changed)
    assert business.counters["breaches"] == 1
    assert business.counters["breach listener errors"] == 1
    assert [b["constraint"] for b in business.breaches] == ["no-orders"]
    assert any("the pager is down" in r.getMessage() for r in caplog.records)


async def test_a_coded_action_or_a_listener_that_raises_does_not_stop_the_role() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        spec = RoleSpec("Business")
        answered: list[str] = []

        @spec.action("Created")
        async def created(fa: FeasibleAction) -> None:
            if not answered:
                answered.append("refused")
                raise RuntimeError("the stock database is down")
            answered.append(fa.keys["cid"])
            await business.attempt([fa.bind(id="chk", totals=[], payment={})])

        business.adopt(spec)
        business.handler_errors = "log"
        changed = asyncio.Event()

        def fussy(batch: Any, newly: Any) -> None:
            changed.set()
            raise ValueError("a listener with a bug")

        business.listeners.append(fussy)
        async with platform, business:
            await platform.attempt([create(platform)])
            await platform.attempt([create(platform)])
            await until(lambda: business.counters["finalized"] == 1, changed)
            await business.drain()
    assert business.counters["handler errors"] == 1
    assert business.counters["listener errors"] >= 2
    assert answered[0] == "refused" and len(answered) == 2


async def test_a_must_always_check_that_keeps_failing_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = {"n": 0}

    def flaky(adapter: Any) -> bool:
        calls["n"] += 1
        raise ValueError("the stock service is down")

    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        platform.adopt(
            RoleSpec(
                "Platform",
                responsibilities=[
                    Responsibility("r", must_always=(MustAlways("stocked", "in stock", flaky),))
                ],
            )
        )
        async with platform:
            with caplog.at_level(logging.ERROR, logger="strabo.peach"):
                for _ in range(3):
                    await platform.attempt([create(platform)])
            seen = platform.inspect()
    failures = [r for r in caplog.records if "must-always check stocked failed" in r.getMessage()]
    assert len(failures) == 1 and calls["n"] >= 3
    assert platform.counters["constraint check errors"] == calls["n"] - 1  # one by inspect()
    assert platform.counters["breaches"] == 0  # nothing is known, so nothing is reported
    [rule] = seen["spec"]["responsibilities"][0]["must_always"]
    assert rule["holds"] == "check failed: ValueError: the stock service is down"


def test_a_refused_spec_leaves_the_adapter_as_it_was() -> None:
    server = SyncServer.embedded([SIMPLE], AGENTS)
    adapter = PeachAdapter("platform", SIMPLE, "Platform", LocalExecutor(server))
    spec = RoleSpec("Platform")

    @spec.action("Create")
    async def create_one(fa: FeasibleAction) -> None:
        pass

    @spec.action("Created")  # the Business's action: refused at adopt()
    async def not_mine(fa: FeasibleAction) -> None:
        pass

    with pytest.raises(ValueError, match="Business performs"):
        adapter.adopt(spec)
    assert adapter.spec is None and adapter.inspect()["handlers"]["on_enabled"] == {}
    adapter.adopt(RoleSpec("Platform"))  # still free to adopt a good one


def test_a_spec_is_adopted_once_and_then_closed() -> None:
    server = SyncServer.embedded([SIMPLE], AGENTS)
    first = PeachAdapter("platform", SIMPLE, "Platform", LocalExecutor(server))
    second = PeachAdapter("platform", SIMPLE, "Platform", LocalExecutor(server))
    spec = RoleSpec("Platform")
    first.adopt(spec)
    with pytest.raises(ValueError, match="adopted by platform already"):
        second.adopt(spec)
    with pytest.raises(ValueError, match="before adopt"):  # it would never run
        spec.action("Complete")

    def plain(fa: FeasibleAction) -> None:
        pass

    with pytest.raises(TypeError, match="coroutine function"):
        RoleSpec("Platform").action("Complete")(plain)  # type: ignore[arg-type]


async def test_adopting_after_start_is_refused() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            with pytest.raises(ValueError, match="adopt the spec before start"):
                platform.adopt(RoleSpec("Platform"))
        assert platform.spec is None


class Opaque:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


async def test_the_inspection_answers_json_whatever_the_state_holds() -> None:
    state = {
        "tags": {"b", "a"},
        "when": datetime.datetime(2026, 1, 2, 3, 4, 5),
        "raw": b"\xff\x00bytes",
        "ratio": float("nan"),
        7: "an integer key",
        "opaque": Opaque(),
        "deep": [[[[[[[[[[[[[[[[["bottom"]]]]]]]]]]]]]]]]],
        "many": list(range(10_000)),
    }
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        platform.adopt(RoleSpec("Platform", state=lambda: state))
        broken = h.adapter("business", "Business")
        not_a_mapping: Any = lambda: ["not", "a", "mapping"]  # noqa: E731
        broken.adopt(RoleSpec("Business", state=not_a_mapping))
        extra = {"when": datetime.date(2026, 1, 1)}
        app = inspection_app(lambda: describe("two", [platform, broken], extra))
        async with platform, broken, serve(app) as url, httpx.AsyncClient(base_url=url) as client:
            answer = await client.get("/inspect")
            seen = platform.inspect()
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    body = answer.json()
    shown = body["roles"][0]["state"]
    assert shown["tags"] == ["a", "b"] and shown["when"] == "2026-01-02T03:04:05"
    assert shown["raw"] == "\\xff\x00bytes"  # what is not UTF-8 is escaped
    assert shown["ratio"] == "nan" and shown["7"] == "an integer key"
    assert shown["opaque"] == "<Opaque>"
    assert len(shown["many"]) == 201 and shown["many"][-1] == "... 9800 more"
    assert "bottom" not in json.dumps(shown["deep"])  # cut off, not recursed without end
    assert body["roles"][1]["state"] == {
        "error": "TypeError: state() returned a list, not a mapping"
    }
    assert body["when"] == "2026-01-01"
    json.dumps(seen, allow_nan=False)  # adapter.inspect() itself is strict JSON


async def test_a_failing_source_answers_a_json_error() -> None:
    def source() -> dict[str, Any]:
        raise LookupError("the agent is gone")

    async with serve(inspection_app(source)) as url, httpx.AsyncClient(base_url=url) as client:
        answer = await client.get("/inspect")
        again = await client.get("/inspect")  # the app is still there
    assert answer.status_code == 500 and again.status_code == 500
    assert answer.json() == {
        "error": {"code": "inspection-failed", "message": "LookupError: the agent is gone"}
    }


def test_an_adapter_in_many_enactments_is_inspected_in_bounded_time_and_size() -> None:
    server = SyncServer.embedded([SIMPLE], AGENTS)
    business = PeachAdapter("business", SIMPLE, "Business", LocalExecutor(server))
    action = SIMPLE.actions["Create"]
    count = MAX_SCANNED * 5
    for i in range(count):  # applied to the replica as the executor would
        bindings = {"cid": f"c{i}", "line_items": ITEMS, "currency": "USD", "payment_pref": {}}
        entry = Entry(ActionInstance(action, bindings), "platform")
        business._view.apply(Batch("SimpleUCP", i + 1, (entry,)))
    started = time.perf_counter()
    seen = business.inspect()
    seconds = time.perf_counter() - started
    # Only the latest enactments are scanned for what is enabled (each costs a
    # check of the protocol's rules), and no more than MAX_LISTED are listed.
    assert seen["enactments"] == {"count": count, "complete": 0}
    assert seen["enabled"]["scanned"] == MAX_SCANNED
    assert seen["enabled"]["count"] == 2 * MAX_SCANNED  # Created and Failed in each
    assert len(seen["enabled"]["actions"]) == MAX_LISTED
    assert seen["enabled"]["actions"][0]["enactment"] == {"cid": f"c{count - MAX_SCANNED}"}
    assert len(business._enabled_cache) <= MAX_SCANNED  # the rest was not computed
    assert len(json.dumps(seen)) < 20_000
    assert seconds < 5, seconds


async def test_concurrent_inspections_all_answer() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        app = inspection_app(lambda: describe("platform", [platform]))
        async with platform, serve(app) as url, httpx.AsyncClient(base_url=url) as client:
            attempts = [platform.attempt([create(platform)]) for _ in range(5)]
            answers = await asyncio.gather(*(client.get("/inspect") for _ in range(20)), *attempts)
    statuses = {a.status_code for a in answers[:20]}
    assert statuses == {200}
    assert all(a.json()["roles"][0]["agent"] == "platform" for a in answers[:20])


async def test_build_action_refuses_a_key_that_is_a_list_or_an_object() -> None:
    from peach import BindError

    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            for bad in (["c1"], {"id": "c1"}):
                with pytest.raises(BindError) as refused:
                    platform.build_action("Complete", {"cid": bad, "payment_data": {}})
                assert refused.value.rule == "type" and refused.value.attribute == "cid"
