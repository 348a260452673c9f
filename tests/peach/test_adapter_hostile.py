"""The PeachAdapter API used carelessly or with ill will, in-process (LocalExecutor
on a real SyncServer): wrong arguments fail with a precise error, handlers that
misbehave fail alone, stop() never hangs, and the agent's view and the
server's log agree afterwards (checked by replaying the log independently).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import tracemalloc
import warnings
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import (
    ActionRejected,
    BindError,
    ExecutorError,
    FeasibleAction,
    HandlerError,
    LocalExecutor,
    PeachAdapter,
)
from tests.conftest import SIMPLE_CREATE, SIMPLE_CREATED
from tests.harness import Harness, until
from tests.peach._hostile_support import (
    SIMPLE,
    Faulty,
    Leaving,
    SlowJoin,
    create,
    log_agrees,
    nested,
    no_tasks_left,
)

AGENTS = {"platform": ["Platform"], "business": ["Business"]}
CREATED = {"id": "chk_1", **SIMPLE_CREATED}


# Wrong arguments: a precise error, not one from inside -----------------------------


async def test_attempt_of_one_instance_not_in_a_list_is_a_type_error() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            instance = create(platform)
            with pytest.raises(TypeError, match=r"attempt\(\[instance\]\)"):
                await platform.attempt(instance)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="not NoneType"):
                await platform.attempt(None)  # type: ignore[arg-type]
            for bindings in (None, "cid", [("cid", "c1")]):
                by_hand = ActionInstance(SIMPLE.action("Create"), bindings)  # type: ignore[arg-type]
                with pytest.raises(TypeError, match="ActionInstance with bindings of type"):
                    await platform.attempt([by_hand])  # before: AttributeError, TypeError
            assert platform.enactments() == [] and await log_agrees(h, platform) == 0


async def test_keys_that_name_no_root_enactment_are_refused() -> None:
    """Before: KeyError 'cid' from inside, a TypeError about hashing, and a
    string read as a tuple of its letters (an enactment that has nothing)."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            [done] = await platform.attempt([create(platform)])
            for read in (platform.enabled, platform.history, platform.is_complete):
                with pytest.raises(ValueError, match="named by cid; cid missing"):
                    read({"order": 1})
                with pytest.raises(TypeError, match="as a dict or a tuple, not str"):
                    read("cid")  # type: ignore[arg-type]
                with pytest.raises(ValueError, match="cid is a key: a string or an integer"):
                    read({"cid": ["c1"]})
                with pytest.raises(ValueError, match="1 key value"):
                    read(("a", "b"))
            assert [i.name for _, i, _ in platform.history(done.keys)] == ["Create"]
            assert platform.history((done.bindings["cid"],)) == platform.history(done.keys)


async def test_asking_about_unknown_enactments_keeps_nothing() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            for n in range(1000):
                assert platform.enabled({"cid": f"nothing-{n}"}) == []
            assert len(platform._enabled_cache) == 0  # before: one entry per question


async def test_build_action_takes_a_mapping() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            for data in ([("cid", "c1")], None, "cid=c1"):
                with pytest.raises(TypeError, match="build_action takes a dict"):
                    platform.build_action("Create", data)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["local", "http"])
async def test_values_nested_too_deeply_are_refused_and_nothing_is_kept(kind: str) -> None:
    """Before: RecursionError from inside bind(), and from attempt() in-process
    and over HTTP (the request's JSON encoder)."""
    async with Harness(kind, [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            deep = nested(5000)
            with pytest.raises(BindError, match="payment_pref is nested too deeply") as e:
                create(platform, payment_pref=deep)
            assert e.value.attribute == "payment_pref"
            with pytest.raises(BindError, match="nested too deeply"):
                platform.build_action("Create", {**SIMPLE_CREATE, "payment_pref": deep})
            by_hand = ActionInstance(
                SIMPLE.action("Create"), {"cid": "deep", **SIMPLE_CREATE, "payment_pref": deep}
            )
            with pytest.raises(ExecutorError, match="nested too deeply") as caught:
                await platform.attempt([by_hand])
            assert caught.value.code == "bad-json"
            assert await log_agrees(h, platform) == 0
            await platform.attempt([create(platform)])  # and the agent goes on
            assert await log_agrees(h, platform) == 1


# Registration ---------------------------------------------------------------------------


async def test_registration_refuses_what_could_never_run() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")

        async def handler(*args: Any) -> None:
            pass

        with pytest.raises(TypeError, match="registers a function"):
            platform.on_completion("Created")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="registers a function"):
            platform.observation("Create")(None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"@adapter.on_enabled\(\)"):
            platform.on_enabled(handler)  # type: ignore[arg-type]  # no parentheses
        with pytest.raises(TypeError, match=r"@adapter.observation\(\)"):
            platform.observation(handler)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="no action 'Nope'"):
            platform.on_enabled("Nope")
        assert platform.activity()["handlers"] == ({}, {}, [])


async def test_a_handler_registered_again_runs_once_per_event() -> None:
    """A handler that registers itself each time it runs (or one registered for
    an action and for all) used to run twice, then four times, ..."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        calls: list[str] = []
        seen = asyncio.Event()

        @platform.observation()
        @platform.observation("Create")
        async def observe(instance: ActionInstance, performer: str) -> None:
            platform.observation("Create")(observe)
            calls.append(instance.bindings["cid"])
            seen.set()

        async with platform:
            for _ in range(3):
                await platform.attempt([create(platform)])
            await until(lambda: len(calls) >= 3, seen)
            await platform.drain()
        assert len(calls) == 3 and len(set(calls)) == 3


# Handlers that misbehave ---------------------------------------------------------------


async def test_a_plain_def_handler_fails_alone_and_the_batch_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler that is not a coroutine function, or raises before its first
    await, was called inside the batch: its error escaped from sync() or
    attempt() (of a batch already finalized), and the batch never reached the
    handlers after it. Now it is that handler's failure, as docs/peach.md says."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        business.handler_errors = "log"
        answered = asyncio.Event()

        @business.observation("Create")
        def raises(instance: ActionInstance, performer: str) -> None:
            raise RuntimeError("boom")

        @business.on_enabled("Created")
        def plain(fa: FeasibleAction) -> None:
            pass

        @business.on_enabled("Created")
        async def answer(fa: FeasibleAction) -> None:
            await business.attempt([fa.bind(**CREATED)])
            answered.set()

        with caplog.at_level(logging.ERROR, logger="strabo.peach"):
            async with platform, business:
                [done] = await platform.attempt([create(platform)])
                await business.sync()  # before: RuntimeError boom, from here
                await answered.wait()
                await business.drain()
                assert [i.name for _, i, _ in business.history(done.keys)] == ["Create", "Created"]
                await log_agrees(h, platform, business)
        assert business.counters["handler errors"] == 2
        messages = " ".join(r.getMessage() for r in caplog.records)
        assert "boom" in messages and "handlers are coroutine functions (async def)" in messages


async def test_a_plain_def_handler_stops_the_agent_with_handler_error() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")

        @platform.on_enabled("Create")
        def plain(fa: FeasibleAction) -> None:
            pass

        with pytest.raises(HandlerError) as caught:
            async with asyncio.timeout(30), platform:  # before: TimeoutError
                await asyncio.Event().wait()
        assert isinstance(caught.value.__cause__, TypeError)
        assert "returned NoneType, not an awaitable" in str(caught.value)


async def test_an_async_listener_is_reported_not_left_unawaited() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        calls: list[int] = []

        async def listener(batch: Any, newly: Any) -> None:
            calls.append(batch.seq)

        platform.listeners.append(listener)  # type: ignore[arg-type]
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # "never awaited"
            async with platform:
                await platform.attempt([create(platform)])
            gc.collect()
        assert calls == [] and platform.counters["listener errors"] == 1


async def test_a_listener_that_adds_itself_is_called_once_per_batch() -> None:
    """Listeners were read while they were called: one that appends itself ran
    again in the same batch, and again (without the bound here, for good)."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        calls: list[int] = []

        def listener(batch: Any, newly: Any) -> None:
            calls.append(batch.seq)
            if len(platform.listeners) < 50:
                platform.listeners.append(listener)

        platform.listeners.append(listener)
        async with platform:
            await platform.attempt([create(platform)])
        assert calls == [1]


async def test_a_handler_may_stop_its_own_adapter() -> None:
    """stop() from a handler waited for every handler, itself included: it hung
    (and cancelling it ended in a RecursionError inside asyncio)."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        stopped = asyncio.Event()

        @platform.on_enabled("Create")
        async def once(fa: FeasibleAction) -> None:
            await platform.attempt([fa.bind(**SIMPLE_CREATE)])
            await platform.stop()
            stopped.set()

        async with asyncio.timeout(10):  # a safety net: before, it hung here
            await platform.run()
        assert stopped.is_set() and not platform.running
        assert platform.activity()["pending"] == []

        again = PeachAdapter("platform", SIMPLE, "Platform", LocalExecutor(h.server))

        @again.on_enabled("Create")
        async def stop_it(fa: FeasibleAction) -> None:
            await again.stop()

        async with asyncio.timeout(10), again:
            await again._stopped.wait()
        assert again.activity()["pending"] == []
        assert await log_agrees(h, platform) == 1


async def test_stop_gives_up_on_a_handler_that_ignores_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before, stop() waited for it as long as it ran (here 10 s, its own bound:
    the test ends either way; for good, for a handler that never ends)."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        started, release = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()

        @platform.on_enabled("Create")
        async def stubborn(fa: FeasibleAction) -> None:
            started.set()
            deadline = loop.time() + 10
            while not release.is_set() and loop.time() < deadline:
                # what a handler must not do with a cancellation:
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(release.wait(), deadline - loop.time())

        await platform.start()
        await started.wait()
        began = loop.time()
        with caplog.at_level(logging.ERROR, logger="strabo.peach"):
            await platform.stop(grace=0.05)
        assert loop.time() - began < 5  # grace + CANCEL_PATIENCE (1 s)
        assert "ignored its cancellation" in caplog.text
        [task] = platform._handler_tasks.tasks  # still shown as pending by inspect()
        release.set()
        await task
        assert platform.activity()["pending"] == []


async def test_a_handler_failing_while_its_block_stops_ends_it_with_handler_error() -> None:
    """The failure cancelled the block that was already leaving: it ended with a
    bare CancelledError ("a handler failed"), its drain cut short, the other
    handlers left running."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        executor = Leaving(h.server)
        platform = PeachAdapter("platform", SIMPLE, "Platform", executor)
        started, finished = asyncio.Event(), asyncio.Event()

        @platform.on_enabled("Create")
        async def fails_late(fa: FeasibleAction) -> None:
            started.set()
            await executor.left.wait()  # the block is being left: stop() drains
            raise RuntimeError("late")

        @platform.on_enabled("Create")
        async def other(fa: FeasibleAction) -> None:
            await executor.left.wait()  # ends within the stop's grace
            finished.set()

        with pytest.raises(HandlerError, match="RuntimeError: late"):
            async with asyncio.timeout(30), platform:
                await started.wait()
        assert finished.is_set() and platform.activity()["pending"] == []
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_restarted_adapter_announces_what_is_enabled_again() -> None:
    """docs/peach.md: starting announces everything enabled through on_enabled.
    The same adapter started a second time announced nothing."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        announced: list[str] = []

        @platform.on_enabled()
        async def note(fa: FeasibleAction) -> None:
            announced.append(fa.name)

        for _ in range(2):
            async with platform:
                await platform.drain()
        assert announced == ["Create", "Create"]


async def test_a_second_start_waits_for_the_first() -> None:
    """start() returned at once while another start() was still joining: an
    attempt right after it failed with "not started"."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        executor = SlowJoin(h.server)
        platform = PeachAdapter("platform", SIMPLE, "Platform", executor)
        first = asyncio.create_task(platform.start())
        await executor.admitting.wait()
        second = asyncio.create_task(platform.start())
        await asyncio.sleep(0)  # let the second start run as far as it goes
        assert not second.done()
        executor.go.set()
        await asyncio.gather(first, second)
        await platform.attempt([create(platform)])
        await platform.stop()
        assert await log_agrees(h, platform) == 1


async def test_one_adapters_fault_keeps_no_batch_from_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        executor = LocalExecutor(h.server)
        faulty = Faulty("platform", SIMPLE, "Platform", executor)
        healthy = PeachAdapter("platform", SIMPLE, "Platform", executor)
        async with faulty, healthy:
            with caplog.at_level(logging.ERROR, logger="strabo.peach"):
                [done] = await faulty.attempt([create(faulty)])  # before: RuntimeError
            assert healthy.enabled(done.keys) == [] and len(healthy.enactments()) == 1
            assert "a broken adapter" in caplog.text
            await log_agrees(h, healthy)


# The in-process boundary ---------------------------------------------------------


async def test_an_attempts_values_reach_the_server_as_a_copy() -> None:
    """An agent that changed a list after attempting it changed the server's log
    and every other agent's view, behind the type checks (a quantity of -5).
    (What agents observe is the server's, read-only as ActionInstance says: not
    copied, for speed; docs/peach.md, LocalExecutor.)"""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        items = [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}]
        async with platform, business:
            [done] = await platform.attempt([create(platform, line_items=items)])
            items.append({"item": {"id": "evil", "title": "Evil"}, "quantity": -5})
            items[0]["quantity"] = -6
            await business.sync()
            [(_, seen, _)] = business.history(done.keys)
            assert seen.bindings["line_items"] == SIMPLE_CREATE["line_items"]
            fresh = PeachAdapter("business", SIMPLE, "Business", LocalExecutor(h.server))
            async with fresh:
                [(_, logged, _)] = fresh.history(done.keys)
                assert logged.bindings["line_items"] == SIMPLE_CREATE["line_items"]
                await log_agrees(h, fresh)


# Races --------------------------------------------------------------------------------


async def test_the_same_attempt_twice_at_once_and_colliding_keys_finalize_once() -> None:
    async with Harness("local", [SIMPLE], {**AGENTS, "other": ["Platform"]}) as h:
        platform, other = h.adapter("platform", "Platform"), h.adapter("other", "Platform")
        async with platform, other:
            instance = create(platform)
            same = await asyncio.gather(
                platform.attempt([instance]), platform.attempt([instance]),
                return_exceptions=True,
            )
            mine = create(platform, cid="collide")
            theirs = create(other, cid="collide", currency="EUR")
            collided = await asyncio.gather(
                platform.attempt([mine]), other.attempt([theirs]), return_exceptions=True
            )
            for outcomes in (same, collided):
                refused = [o for o in outcomes if isinstance(o, ActionRejected)]
                assert len(refused) == 1 and refused[0].rule == "duplicate", outcomes
            assert platform.counters["rejected"] + other.counters["rejected"] == 2
            assert await log_agrees(h, platform, other) == 2


# Cancellation, isolation, numbers -------------------------------------------------------


async def test_cancelling_an_attempt_at_every_step_leaves_view_and_log_agreeing() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        outcomes: set[str] = set()
        async with platform:
            for steps in range(12):
                task = asyncio.create_task(platform.attempt([create(platform)]))
                for _ in range(steps):
                    await asyncio.sleep(0)  # yields, to cancel at each await in turn
                task.cancel()
                try:
                    await task
                    outcomes.add("finalized")
                except asyncio.CancelledError:
                    outcomes.add("cancelled")
                await log_agrees(h, platform)
            assert outcomes == {"finalized", "cancelled"}
            await platform.attempt([create(platform)])
            await log_agrees(h, platform)
    no_tasks_left()


async def test_cancelling_a_start_at_every_step_leaves_a_startable_adapter() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        for steps in range(8):
            executor = LocalExecutor(h.server)
            adapter = PeachAdapter("platform", SIMPLE, "Platform", executor)
            announced = asyncio.Event()

            @adapter.on_enabled("Create")
            async def note(fa: FeasibleAction, announced: asyncio.Event = announced) -> None:
                announced.set()

            task = asyncio.create_task(adapter.start())
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            async with asyncio.timeout(30), adapter:
                await announced.wait()
                await adapter.attempt([create(adapter)])
            await log_agrees(h, adapter)
    no_tasks_left()


async def test_a_failing_handler_stops_its_agent_only() -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")

        @business.on_enabled("Created")
        async def broken(fa: FeasibleAction) -> None:
            raise RuntimeError("business is broken")

        async def run_business() -> None:
            async with business:
                await asyncio.Event().wait()

        failing = asyncio.create_task(run_business())
        async with platform:
            await platform.attempt([create(platform)])
            with pytest.raises(HandlerError, match="business is broken"):
                await asyncio.wait_for(failing, 30)
            await platform.attempt([create(platform)])  # the other agent goes on
            assert await log_agrees(h, platform) == 2


MANY = 500  # at once, three times (1,000 took 8.6 s of the suite under tracemalloc)


async def test_many_enactments_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    """500 concurrent attempts, half of whose answers fail in a handler: every
    enactment is answered or logged, no handler task is left, the views agree
    with the log, and memory grows by the enactments kept, not by the rounds."""
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        business.handler_errors = "log"
        calls = [0]

        @business.on_enabled("Created")
        async def answer(fa: FeasibleAction) -> None:
            calls[0] += 1
            if calls[0] % 2:
                raise RuntimeError("odd")
            await business.attempt([fa.bind(**CREATED)])

        growth: list[int] = []
        async with platform, business:
            tracemalloc.start()
            try:
                for _ in range(3):
                    gc.collect()
                    before = tracemalloc.get_traced_memory()[0]
                    attempts = (platform.attempt([create(platform)]) for _ in range(MANY))
                    await asyncio.gather(*attempts)
                    await business.sync()
                    await business.drain()
                    gc.collect()
                    growth.append(tracemalloc.get_traced_memory()[0] - before)
            finally:
                tracemalloc.stop()
            assert business.activity()["pending"] == []
            assert business.counters["handler errors"] == 3 * MANY // 2 == calls[0] // 2
            assert await log_agrees(h, platform, business) == 3 * MANY * 3 // 2
        # server, two views and histories in one process: per enactment, and flat
        # from round to round (no growth but the enactments')
        per = [g // MANY for g in growth]
        with capsys.disabled():  # the figure, for who runs it with -s (-n 0)
            print(f"\n{MANY} enactments: memory per enactment by round {per} bytes")
        assert max(per) < 32_000 and max(growth) < 2 * min(growth)
