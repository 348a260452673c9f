"""The PeachAdapter API, run identically on the LocalExecutor, over HTTP to a
SyncServer, and peer to peer (PeerExecutor over HTTP, no server).

On a SyncServer an attempt is checked against the shared state; peer to peer,
against what the agent knows, so a test that acts on another agent's action
first calls ``sync()``, which is harmless on a server (docs/peach.md).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import (
    ActionRejected,
    BindError,
    ExecutorError,
    FeasibleAction,
    HandlerError,
    PeachAdapter,
)
from tests.conftest import LINE_ITEMS, ORDER, PAYMENT_DATA, load
from tests.harness import Harness, until

SIMPLE = load("atomic-ucp.lsh")
PURCHASE = load("purchase.lsh")
INCREMENTAL = load("incremental-ucp.lsh")
AGENTS = {"platform": ["Platform"], "business": ["Business"]}
CREATE = dict(
    line_items=[{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}],
    currency="USD",
    payment_pref={},
)
CREATED = dict(id="chk_1", totals=[], payment={})


@pytest.fixture(params=["local", "http", "peer"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def find(adapter: PeachAdapter, name: str, keys: Any = None) -> FeasibleAction:
    found = [f for f in adapter.enabled(keys) if f.name == name]
    assert len(found) == 1, (name, adapter.enabled(keys))
    return found[0]


async def test_enabled_bind_attempt_and_enabled_reflects_the_result(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        async with platform, business:
            assert [f.name for f in platform.enabled()] == ["Create"]
            create = find(platform, "Create")
            assert create.initiating and create.new_keys == ("cid",)
            [created] = await platform.attempt([create.bind(**CREATE)])
            keys = created.keys
            assert (
                created.name == "Create" and created.bindings["line_items"] == CREATE["line_items"]
            )
            # The attempter's replica already has it...
            assert platform.enabled(keys) == []
            # ... and the other agent's replica gets it from the stream (or at once
            # with sync()).
            await business.sync()
            answer = find(business, "Created", keys)
            assert answer.fixed == {**keys, "Create": True}
            [done] = await business.attempt([answer.bind(**CREATED)])
            assert business.enabled(keys) == []
            assert done.bindings["id"] == "chk_1"


async def test_bind_names_the_attribute_at_fault(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            create = find(platform, "Create")
            with pytest.raises(BindError, match="'order' is not an attribute of Create") as e:
                create.bind(order=1, **CREATE)
            assert e.value.attribute == "order"
            with pytest.raises(BindError, match="Create needs 'currency' bound") as e:
                create.bind(**{k: v for k, v in CREATE.items() if k != "currency"})
            assert e.value.attribute == "currency"
            with pytest.raises(BindError, match="line_items is a set, not a JSON value"):
                create.bind(**{**CREATE, "line_items": {1, 2}})
            with pytest.raises(BindError, match="key 'cid' must be a string or an integer"):
                create.bind(cid=1.5, **CREATE)
            explicit = create.bind(cid="my-checkout", **CREATE)
            assert explicit.bindings["cid"] == "my-checkout"
            [created] = await platform.attempt([create.bind(**CREATE)])

            business = h.adapter("business", "Business")
            async with business:  # start-up catches up with the log
                answer = find(business, "Created", created.keys)
                with pytest.raises(BindError, match="'Create' records that Create occurred"):
                    answer.bind(Create=True, **CREATED)
                with pytest.raises(BindError, match="'cid' is already bound to"):
                    answer.bind(cid="other", **CREATED)


async def test_rejections_carry_the_rule(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        async with platform, business:
            [create] = await platform.attempt([find(platform, "Create").bind(**CREATE)])
            keys = create.keys
            await business.sync()
            with pytest.raises(ActionRejected) as caught:
                await platform.attempt([create])
            assert caught.value.rule == "duplicate"
            assert "'Create' has already occurred in this scope" in caught.value.message
            with pytest.raises(ActionRejected) as caught:
                await platform.attempt(
                    [
                        ActionInstance(
                            SIMPLE.action("Complete"),
                            {
                                **keys,
                                "Created": True,
                                "id": "x",
                                "payment_data": PAYMENT_DATA,
                                "risk_signals": {},
                            },
                        )
                    ]
                )
            assert caught.value.rule == "dependency"
            await business.attempt([business.build_action("Created", {**keys, **CREATED})])
            await platform.sync()
            with pytest.raises(ActionRejected) as caught:
                await platform.attempt(
                    [
                        ActionInstance(
                            SIMPLE.action("Cancel"), {**keys, "Created": True, "id": "not-chk_1"}
                        )
                    ]
                )
            assert caught.value.rule == "bound"
            assert caught.value.violation.attribute == "id"


async def test_a_list_is_atomic(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            good = find(platform, "Create").bind(**CREATE)
            bad = ActionInstance(
                SIMPLE.action("Cancel"), {"cid": "nowhere", "Created": True, "id": "x"}
            )
            with pytest.raises(ActionRejected) as caught:
                await platform.attempt([good, bad])
            assert caught.value.rule == "dependency" and caught.value.violation.index == 1
            assert platform.enactments() == []
            first = find(platform, "Create").bind(**CREATE)
            second = find(platform, "Create").bind(**CREATE)
            done = await platform.attempt([first, second])
            assert [d.bindings["cid"] for d in done] == [first["cid"], second["cid"]]
            assert len(platform.enactments()) == 2


async def test_handlers_observation_on_enabled_completion(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        seen: list[tuple[str, str]] = []
        enabled: list[tuple[str, Any]] = []
        completed: list[tuple[dict, str]] = []
        changed = asyncio.Event()

        @platform.observation("Create", "Created", "Completed")
        async def observe(action: ActionInstance, performer: str) -> None:
            seen.append((action.action.name, performer))
            changed.set()

        @platform.on_enabled("Create", "Complete")
        async def on_enabled(fa: FeasibleAction) -> None:
            enabled.append((fa.name, fa.keys))
            changed.set()

        @platform.on_completion
        async def on_completion(keys: dict, mas_id: str) -> None:
            completed.append((keys, mas_id))
            changed.set()

        @business.on_enabled("Created")
        async def answer(fa: FeasibleAction) -> None:
            await business.attempt([fa.bind(**CREATED)])

        @business.observation("Complete")
        async def complete(action: ActionInstance, performer: str) -> None:
            await business.attempt(
                [business.build_action("Completed", {**action.bindings, "order": ORDER})]
            )

        async with business, platform:
            await until(lambda: enabled == [("Create", {})], changed)  # once, at start-up
            [create] = await platform.attempt([find(platform, "Create").bind(**CREATE)])
            keys = create.keys
            await until(lambda: ("Complete", keys) in enabled, changed)
            await platform.attempt(
                [find(platform, "Complete", keys).bind(payment_data=PAYMENT_DATA, risk_signals={})]
            )
            await until(lambda: completed != [], changed)
            await platform.drain()
        assert seen == [("Create", "platform"), ("Created", "business"), ("Completed", "business")]
        assert enabled == [("Create", {}), ("Complete", keys)]  # each once per enactment
        assert completed == [(keys, "default")]


async def test_a_failing_handler_is_logged_and_the_adapter_goes_on(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        platform.handler_errors = "log"  # the default, "stop", ends the block instead
        calls: list[str] = []
        done = asyncio.Event()

        @platform.observation("Create")
        async def broken(action: ActionInstance, performer: str) -> None:
            raise RuntimeError("boom")

        @platform.observation("Create")
        async def fine(action: ActionInstance, performer: str) -> None:
            calls.append(action.bindings["cid"])
            done.set()

        with caplog.at_level(logging.ERROR, logger="strabo.peach"):
            async with platform:
                for _ in range(2):
                    await platform.attempt([find(platform, "Create").bind(**CREATE)])
                await until(lambda: len(calls) == 2, done)
                await platform.drain()
        failures = [r for r in caplog.records if "boom" in r.getMessage()]
        assert len(failures) == 2
        assert (
            "handler test_a_failing_handler_is_logged_and_the_adapter_goes_on.<locals>.broken"
            in (failures[0].getMessage())
        )
        assert "platform (Platform in SimpleUCP)" in failures[0].getMessage()


async def test_one_agent_plays_several_roles_in_several_protocols(kind: str) -> None:
    agents = {
        "both": ["SimpleUCP:Platform", "SimpleUCP:Business", "Purchase:Buyer"],
        "seller": ["Seller"],
    }
    async with Harness(kind, [SIMPLE, PURCHASE], agents) as h:
        platform = h.adapter("both", "Platform", "SimpleUCP")
        business = h.adapter("both", "Business", "SimpleUCP")
        buyer = h.adapter("both", "Buyer", "Purchase")
        async with platform, business, buyer:
            [create] = await platform.attempt([find(platform, "Create").bind(**CREATE)])
            # The business adapter of the same process sees it at once.
            answer = find(business, "Created", create.keys)
            await business.attempt([answer.bind(**CREATED)])
            await platform.sync()
            assert sorted(f.name for f in platform.enabled(create.keys)) == ["Cancel", "Complete"]
            [rfq] = await buyer.attempt([find(buyer, "RFQ").bind(item="pen", budget=5)])
            assert buyer.enabled(rfq.keys) == [] and rfq.bindings["item"] == "pen"


async def test_roles_and_names_are_checked_at_start(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        wrong_role = PeachAdapter("platform", SIMPLE, "Business", h.executor("platform"))
        with pytest.raises(ExecutorError, match="does not play Business in SimpleUCP"):
            await wrong_role.start()
        if kind == "http":
            from peach import SyncExecutor

            assert h.url is not None
            misnamed = PeachAdapter(
                "someone", SIMPLE, "Platform", SyncExecutor(h.url, "platform-token")
            )
            with pytest.raises(ExecutorError, match="the token authenticates agent 'platform'"):
                await misnamed.start()
            bad_token = PeachAdapter("platform", SIMPLE, "Platform", SyncExecutor(h.url, "nope"))
            with pytest.raises(ExecutorError, match="401 this token is not valid for 'default'"):
                await bad_token.start()
        elif kind == "peer":
            from peach.peer import PeerExecutor

            with pytest.raises(ExecutorError, match="'default' has no agent 'stranger'"):
                PeerExecutor("stranger", h.directory)
            misnamed = PeachAdapter("someone", SIMPLE, "Platform", h.executor("platform"))
            with pytest.raises(ExecutorError, match="speaks for agent 'platform'"):
                await misnamed.start()
        else:
            stranger = PeachAdapter("stranger", SIMPLE, "Platform", h.executor("stranger"))
            with pytest.raises(ExecutorError, match="'default' has no agent 'stranger'"):
                await stranger.start()
        idle = PeachAdapter("platform", SIMPLE, "Platform", h.executor("platform"))
        with pytest.raises(ExecutorError, match="is not started"):
            await idle.attempt([find(idle, "Create").bind(**CREATE)])


async def test_build_action_from_a_dict(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        async with platform, business:
            create = platform.build_action("Create", {**CREATE, "extra": "ignored"})
            [create] = await platform.attempt([create])
            await business.sync()
            response = {"id": "chk_9", "totals": [], "payment": {}, "currency": "USD"}
            with pytest.raises(BindError, match="Created needs 'payment' bound") as missing:
                business.build_action("Created", {**create.bindings, "id": "chk_9", "totals": []})
            assert missing.value.missing and missing.value.attribute == "payment"
            # discounts and fulfillment are optional: left out, they stay absent, even
            # with a default for what is missing.
            created = business.build_action(
                "Created", {**create.bindings, **response}, default=None
            )
            assert "discounts" not in created and created.bindings["id"] == "chk_9"
            await business.attempt([created])
            await platform.sync()
            with pytest.raises(
                BindError, match="'id' is bound to 'chk_9' in this enactment, not 'x'"
            ):
                platform.build_action("Cancel", {**create.keys, "id": "x"})
            with pytest.raises(BindError, match=r"Failed is not enabled for Business in .*nono"):
                business.build_action("Failed", {**create.keys, "reason": {"message": "late"}})
            with pytest.raises(BindError, match="Completed is performed by Business, not Platform"):
                platform.build_action("Completed", create.keys)


async def test_new_keys_for_sub_scopes(kind: str) -> None:
    async with Harness(kind, [INCREMENTAL], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        async with platform, business:
            [create] = await platform.attempt(
                [
                    platform.build_action(
                        "Create",
                        {"line_items": LINE_ITEMS, "currency": "USD", "payment": {}},
                    )
                ]
            )
            await business.sync()
            await business.attempt(
                [
                    business.build_action(
                        "Created",
                        {**create.keys, "id": "chk", "payment_config": {}, "messages": []},
                    )
                ]
            )
            await platform.sync()
            first = await platform.attempt(
                [
                    platform.build_action(
                        "Update", {**create.keys, "line_items": LINE_ITEMS, "currency": "USD"}
                    )
                ]
            )
            second = await platform.attempt(
                [
                    platform.build_action(
                        "Update",
                        {**create.keys, "line_items": LINE_ITEMS * 2, "currency": "USD"},
                    )
                ]
            )
            v1, v2 = first[0].bindings["v"], second[0].bindings["v"]
            assert v1 < v2  # generated keys sort by creation
            explicit = await platform.attempt(
                [
                    platform.build_action(
                        "SetBuyer", {**create.keys, "v": v2, "buyer": {"email": "a@b.c"}}
                    )
                ]
            )
            assert explicit[0].bindings["v"] == v2
            await business.sync()
            updates = {
                f.keys.get("v") for f in business.enabled(create.keys) if f.name == "Updated"
            }
            assert updates == {v1, v2}


async def test_restart_catches_up_silently_and_resumes_with_on_enabled(kind: str) -> None:
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        # The platform stays up (peer to peer, the business learns of its actions
        # from the platform itself; there is no server's log to read).
        platform = h.adapter("platform", "Platform")
        await platform.start()
        [one] = await platform.attempt([find(platform, "Create").bind(**CREATE)])
        [two] = await platform.attempt([find(platform, "Create").bind(**CREATE)])
        business = h.adapter("business", "Business")
        async with business:
            await business.attempt([find(business, "Created", one.keys).bind(**CREATED)])
        # A fresh business process: history is replayed without observations, and
        # what is enabled now is announced once through on_enabled.
        restarted = h.adapter("business", "Business")
        observed: list[str] = []
        announced: list[tuple[str, Any]] = []
        ready = asyncio.Event()

        @restarted.observation()
        async def observe(action: ActionInstance, performer: str) -> None:
            observed.append(action.name)

        @restarted.on_enabled()
        async def on_enabled(fa: FeasibleAction) -> None:
            announced.append((fa.name, fa.keys))
            ready.set()

        async with restarted:
            await until(lambda: len(announced) == 2, ready)
            await restarted.drain()
            assert sorted(announced, key=str) == sorted(
                [("Created", two.keys), ("Failed", two.keys)], key=str
            )
            assert observed == []
            assert [i.name for _, i, _ in restarted.history(one.keys)] == ["Create", "Created"]


async def test_a_handler_that_raises_stops_the_agent_with_its_error(kind: str) -> None:
    """The default: an agent waiting for a completion its failed handler will never
    bring about is not left waiting; ``async with`` ends with HandlerError."""
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        done = asyncio.Event()

        @platform.on_enabled("Create")
        async def create(fa: Any) -> None:
            await platform.attempt([fa.bind(**{**CREATE, "discount_codes": None})])

        with pytest.raises(HandlerError) as caught:
            async with asyncio.timeout(60), platform:  # without the stop: TimeoutError
                await done.wait()  # would wait forever
        assert isinstance(caught.value.__cause__, BindError)
        assert "handler test_a_handler_that_raises_stops_the_agent_with_its_error" in str(
            caught.value
        )
        assert not platform.running and platform.counters["handler errors"] == 1


async def test_run_ends_with_a_handler_failure_too() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")

        @platform.on_enabled("Create")
        async def create(fa: Any) -> None:
            raise RuntimeError("no stock")

        with pytest.raises(HandlerError, match="RuntimeError: no stock"):
            async with asyncio.timeout(60):
                await platform.run()


async def test_a_cancelled_block_cancels_its_handlers_at_once() -> None:
    """Ctrl-C (the run cancelled) does not wait out the stop's grace for handlers."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        started, cancelled = asyncio.Event(), asyncio.Event()
        graces: list[float] = []
        stop = platform.stop

        async def spy(grace: float = 5.0) -> None:
            graces.append(grace)
            await stop(grace)

        platform.stop = spy  # type: ignore[method-assign]

        @platform.on_enabled("Create")
        async def slow(fa: Any) -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        async def body() -> None:
            async with platform:
                await asyncio.Event().wait()

        task = asyncio.create_task(body())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert graces == [0] and cancelled.is_set()


async def test_handler_errors_takes_stop_or_log() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        assert platform.handler_errors == "stop"
        with pytest.raises(ValueError, match="'stop' or 'log'"):
            platform.handler_errors = "ignore"  # type: ignore[assignment]


async def test_a_value_json_cannot_carry_is_refused_on_every_executor(kind: str) -> None:
    """NaN, infinities: bind() refuses them; a hand-built instance holding one is
    refused by the executor too (``bad-json``), in-process as over HTTP and
    peer to peer, and nothing is kept."""
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            for value in (float("nan"), float("inf")):
                forged = ActionInstance(
                    SIMPLE.action("Create"), {**CREATE, "cid": "c1", "line_items": [value]}
                )
                with pytest.raises(ExecutorError) as caught:
                    await platform.attempt([forged])
                assert caught.value.code == "bad-json", caught.value
                assert "line_items[0] is " in str(caught.value)
            assert platform.enactments() == []
