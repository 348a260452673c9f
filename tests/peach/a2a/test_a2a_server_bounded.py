"""A RoleAgent keeps a bounded number of tasks (RoleAgent(kept=), KEPT_TASKS).

The Purchase Buyer served as an A2A agent on loopback (uvicorn), driven by the
A2A SDK's client over HTTP, a coded Seller quoting on the same in-process
SyncServer. Many tasks go through it; what it remembers of them (the SDK's task
store and the enactment of each task, ``_roots``) stays within the bound, a
task it forgot is "not found" to a message or ``tasks/get``, never a new
enactment, and a task that ended is no longer remembered as followed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Task,
    TaskNotFoundError,
    TaskState,
)

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from peach.a2a import server as a2a_server
from peach.a2a.server import KEPT_TASKS, RoleAgent
from syncserver import SyncServer
from syncserver.serving import serve
from tests.peach.a2a.test_a2a_server import PURCHASE, ask, send

KEPT = 4


@contextlib.asynccontextmanager
async def buyer_agent(kept: int = KEPT) -> AsyncIterator[tuple[RoleAgent, Any]]:
    """A RoleAgent for the Buyer keeping ``kept`` tasks, served on loopback, and
    an A2A client of it; a Seller quotes 4 for every RFQ."""
    purchase = LangshawProtocol.load(PURCHASE)
    syncserver = SyncServer.embedded([purchase], {"buyer": ["Buyer"], "seller": ["Seller"]})
    buyer = PeachAdapter("buyer", purchase, "Buyer", LocalExecutor(syncserver))
    seller = PeachAdapter("seller", purchase, "Seller", LocalExecutor(syncserver))

    @seller.on_enabled("Quote")
    async def quote(fa: Any) -> None:
        if fa.new_keys:
            await seller.attempt([fa.bind(price=4)])

    agent = RoleAgent(buyer, kept=kept)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(syncserver)
        await stack.enter_async_context(seller)
        await stack.enter_async_context(agent)
        agent.url = await stack.enter_async_context(serve(agent.app()))
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        card = await A2ACardResolver(http, agent.url).get_agent_card()
        yield agent, await create_client(card, ClientConfig(streaming=False, httpx_client=http))


async def stored(client: Any) -> set[str]:
    """The tasks the agent's store holds, by ListTasks (A2A 1.0)."""
    listed = await client.list_tasks(ListTasksRequest(page_size=100))
    return {t.id for t in listed.tasks}


async def rfq(client: Any) -> Task:
    task = await send(client, ask("RFQ", {"item": "ball", "budget": 10}))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    return task


def test_the_bound_is_documented_and_checked() -> None:
    assert KEPT_TASKS == 10_000
    with pytest.raises(ValueError, match="kept must be at least 1"):
        RoleAgent(object(), kept=0)  # type: ignore[arg-type]


async def test_many_tasks_stay_within_the_bound_and_a_forgotten_one_is_not_found() -> None:
    async with asyncio.timeout(90), buyer_agent() as (agent, client):
        tasks = []
        for _ in range(3 * KEPT):
            tasks.append(await rfq(client))
            assert len(agent._roots) <= KEPT
            assert len(await stored(client)) <= KEPT
        kept, forgotten = tasks[-KEPT:], tasks[:-KEPT]
        assert await stored(client) == {t.id for t in kept}
        assert set(agent._roots) == {t.id for t in kept}
        enactments = len(agent.adapter.enactments())
        assert enactments == 3 * KEPT  # each task's enactment goes on regardless

        # A forgotten task: not found, to tasks/get and to a message; the message
        # (an RFQ, which could open an enactment) starts nothing.
        old = forgotten[0]
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=old.id))
        with pytest.raises(TaskNotFoundError):
            await send(client, ask("RFQ", {"item": "ball", "budget": 10}, old))
        with pytest.raises(TaskNotFoundError):
            await send(client, ask("Reject", {"reason": "late"}, old))
        assert len(agent.adapter.enactments()) == enactments

        # A kept task goes on; once it ends (completed, canceled) its enactment
        # is no longer remembered, and a message to it is refused by the SDK.
        done = await send(client, ask("Reject", {"reason": "too dear"}, kept[-1]))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED, done
        canceled = await client.cancel_task(CancelTaskRequest(id=kept[-2].id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        assert set(agent._roots) == {t.id for t in kept[:-2]}
        with pytest.raises(Exception, match="terminal state"):
            await send(client, ask("RFQ", {"item": "ball", "budget": 10}, kept[-1]))
        assert len(agent.adapter.enactments()) == enactments


async def test_a_stored_task_whose_enactment_was_forgotten_starts_nothing() -> None:
    """The enactments are bounded on their own too: a task still in the store
    whose enactment the agent no longer knows is "not found", never acted in a
    new enactment (before the bound, it silently opened one)."""
    async with asyncio.timeout(60), buyer_agent() as (agent, client):
        task = await rfq(client)
        agent.forget(task.id)  # as the bound on _roots forgets the oldest
        before = len(agent.adapter.enactments())
        with pytest.raises(TaskNotFoundError, match="no longer followed"):
            await send(client, ask("RFQ", {"item": "ball", "budget": 10}, task))
        assert len(agent.adapter.enactments()) == before


async def test_a_task_waiting_for_input_is_released_and_brought_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK releases the live state of a task idle in input-required after
    IDLE_RELEASE seconds (else one per task for ever); a message rebuilds it."""
    monkeypatch.setattr(a2a_server, "IDLE_RELEASE", 0.05)
    async with asyncio.timeout(30), buyer_agent() as (agent, client):
        task = await rfq(client)
        [handler] = agent._handlers
        idle = handler._active_task_registry._active_tasks[task.id]
        await idle._is_finished.wait()  # released by the SDK's timer (fails: timeout)
        done = await send(client, ask("Reject", {"reason": "too dear"}, task))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED, done
