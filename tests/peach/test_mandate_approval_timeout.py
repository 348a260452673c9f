"""A mandate's approval is waited for a bounded time (PeachAdapter(approve_timeout=)).

An approver that never answers (an event nobody sets) must not hold the attempt,
nor its place in the mandate's counts, for ever: past the timeout the attempt
is refused, saying so, the approver is cancelled, and the count is free for the
next attempt. An approver that answers within the timeout is obeyed as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from langshaw import ActionInstance
from peach import MandateRefused, PeachAdapter
from peach._mandate import APPROVE_TIMEOUT
from tests.harness import Harness
from tests.peach.test_mandate import AGENTS, SIMPLE, create, mandate, mine


async def test_an_approver_that_never_answers_is_refused_in_time_and_frees_the_count() -> None:
    asked, cancelled, never = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def hangs(agent: str, instances: Sequence[ActionInstance]) -> bool:
        asked.set()
        try:
            await never.wait()  # nobody sets it: the approver hangs
        finally:
            cancelled.set()  # reached only by the adapter cancelling it
        return True

    async def yes(agent: str, instances: Sequence[ActionInstance]) -> bool:
        return True

    async with asyncio.timeout(30), Harness("local", [SIMPLE], AGENTS) as h:
        # One Create in the run: a refused attempt must not use it up.
        platform = PeachAdapter(
            "platform", SIMPLE, "Platform", h.executor("platform"),
            mandate=mandate(approval=["Create"], actions={"Create": {"per_run": 1}}),
            approve=hangs, approve_timeout=0.2,
        )
        h.adapters.append(platform)
        async with platform:
            late = r"Create was not approved within 0\.2 s"
            with pytest.raises(MandateRefused, match=late) as exc:
                await platform.attempt([create(platform)])
            assert exc.value.rule == "mandate"
            assert asked.is_set() and cancelled.is_set()  # asked, then given up on
            assert platform._guard is not None and platform._guard._flying == []
            assert mine(platform, "Create") == 0

            platform.approve = yes  # the count was released: the one Create goes
            await platform.attempt([create(platform)])
            assert mine(platform, "Create") == 1
            with pytest.raises(MandateRefused, match=r"actions\.Create\.per_run = 1"):
                await platform.attempt([create(platform)])


async def test_an_approver_that_answers_in_time_is_obeyed() -> None:
    asked, answer = asyncio.Event(), asyncio.Event()
    said: list[bool] = []

    async def human(agent: str, instances: Sequence[ActionInstance]) -> bool:
        asked.set()
        await answer.wait()  # the test answers once it sees the question
        return said.pop(0)

    async def attempt_when_asked(platform: PeachAdapter, yes: bool) -> None:
        asked.clear()
        answer.clear()
        attempt = asyncio.create_task(platform.attempt([create(platform)]))
        waiting = asyncio.create_task(asked.wait())
        await asyncio.wait({attempt, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        assert asked.is_set(), attempt.result()  # else: why it was not asked
        said.append(yes)
        answer.set()
        await attempt

    async with asyncio.timeout(30), Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        assert platform.approve_timeout == APPROVE_TIMEOUT  # the documented default
        platform.mandate = mandate(approval=["Create"])
        platform.approve, platform.approve_timeout = human, 20.0
        async with platform:
            with pytest.raises(MandateRefused, match="Create was not approved by the principal"):
                await attempt_when_asked(platform, False)
            await attempt_when_asked(platform, True)
            assert mine(platform, "Create") == 1
            assert platform._guard is not None and platform._guard._flying == []


def test_an_llm_agent_gives_its_adapters_the_approval_wait() -> None:
    """``LLMAgent(approve_timeout=)`` (``strabo agent --approve-timeout``) sets
    each adapter's wait; without it the adapters keep theirs."""
    from langshaw import LangshawProtocol
    from peach import LocalExecutor, PeachAdapter
    from peach.llm import LLMAgent
    from syncserver import SyncServer
    from tests.conftest import PROTOCOLS

    purchase = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    server = SyncServer.embedded([purchase], {"me": ["Buyer"]})
    adapter = PeachAdapter("me", purchase, "Buyer", LocalExecutor(server))
    LLMAgent([adapter], "goal", client=object(), approve_timeout=2.5)
    assert adapter.approve_timeout == 2.5
    other = PeachAdapter("me", purchase, "Buyer", LocalExecutor(server), approve_timeout=9)
    LLMAgent([other], "goal", client=object())
    assert other.approve_timeout == 9
