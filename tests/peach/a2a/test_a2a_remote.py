"""RemoteAgent: a Peach agent, the Client of A2ATask, delegates to a remote A2A
agent through the proxy, and the exchange is an enactment of A2ATask.

The remote agents are real, on loopback: ``strabo a2a`` serving Purchase's Buyer
(RoleAgent, with a coded Seller and Shipper acting on its embedded SyncServer),
and a tiny agent written with the A2A SDK alone. The Client and the proxy join a
SyncServer of their own, in-process (LocalExecutor) or over HTTP (SyncExecutor).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers.proto_helpers import get_message_text, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    GetTaskRequest,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

from peach import PeachAdapter
from peach.a2a import RemoteAgent
from syncserver.serving import free_port, serve
from tests.conftest import load
from tests.harness import Harness, until
from tests.peach.a2a.test_a2a_server import PURCHASE, counterparts, strabo_a2a

A2ATASK = load("a2a-task.lsh")
AGENTS = {"client": ["Client"], "remote": ["Agent"]}


class Delegator:
    """The Client: a coded Peach agent that sends, replies and cancels, and waits
    (on each batch it sees, never on a clock) for what the Agent says."""

    def __init__(self, adapter: PeachAdapter) -> None:
        self.adapter = adapter
        self.changed = asyncio.Event()
        adapter.listeners.append(lambda batch, newly: self.changed.set())

    async def send(self, message: dict[str, Any]) -> tuple[Any, ...]:
        [send] = [f for f in self.adapter.initiating() if f.name == "Send"]
        [done] = await self.adapter.attempt([send.bind(message=message)])
        return (done.bindings["ctx"], done.bindings["task"])

    async def act(self, root: tuple[Any, ...], name: str, **bindings: Any) -> None:
        [feasible] = [f for f in self.adapter.enabled(root) if f.name == name]
        await self.adapter.attempt([feasible.bind(**bindings)])

    def names(self, root: tuple[Any, ...]) -> list[str]:
        return [i.name for _, i, _ in self.adapter.history(root)]

    def said(self, root: tuple[Any, ...], name: str) -> list[dict[str, Any]]:
        return [i.bindings for _, i, _ in self.adapter.history(root) if i.name == name]

    async def until(self, root: tuple[Any, ...], name: str, count: int = 1) -> dict[str, Any]:
        """The ``count``-th instance of ``name`` in the task, once it is there."""
        await until(lambda: self.names(root).count(name) >= count, self.changed, 30)
        return self.said(root, name)[count - 1]


@contextlib.asynccontextmanager
async def delegating(kind: str, url: str, **options: Any
                     ) -> AsyncIterator[tuple[Delegator, RemoteAgent]]:
    """A Client and a RemoteAgent for ``url``, on a SyncServer of their own."""
    async with Harness(kind, [A2ATASK], AGENTS) as h:
        proxy = RemoteAgent(h.adapter("remote", "Agent"), url, **options)
        client = Delegator(h.adapter("client", "Client"))
        async with proxy, client.adapter:
            yield client, proxy


@contextlib.asynccontextmanager
async def buyer() -> AsyncIterator[dict[str, str]]:
    """``strabo a2a`` serving Purchase's Buyer; a Seller quotes 4 for anything but a
    unicorn (it never answers those), a Shipper delivers."""
    async with strabo_a2a("--protocol", PURCHASE, "--role", "Buyer", "--embedded",
                          "--mas", "shop") as urls, contextlib.AsyncExitStack() as stack:
        for agent in counterparts(urls["syncserver"], "shop"):
            await stack.enter_async_context(agent)
        yield urls


async def remote_task(url: str, task_id: str) -> Task:
    """The task as the remote agent has it (tasks/get, with the SDK's own client)."""
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = await create_client(card, ClientConfig(streaming=False, httpx_client=http))
        return await client.get_task(GetTaskRequest(id=task_id))


def ask(action: str, **bindings: Any) -> dict[str, Any]:
    """A message for RoleAgent: one data part naming an action of the role."""
    return {"action": action, "bindings": bindings}


def data(message: dict[str, Any]) -> dict[str, Any]:
    """The data part of a message in A2A's JSON binding."""
    [part] = [p["data"] for p in message["parts"] if "data" in p]
    return part  # type: ignore[no-any-return]


# Against strabo a2a (RoleAgent) ---------------------------------------------------------------


@pytest.mark.parametrize(("kind", "streaming"), [("local", None), ("http", False)])
async def test_a_peach_client_delegates_a_purchase_to_a_remote_buyer(
    kind: str, streaming: bool | None
) -> None:
    async with asyncio.timeout(60), buyer() as urls, delegating(
            kind, urls["a2a"], streaming=streaming) as (client, proxy):
        task = await client.send(ask("RFQ", item="ball", budget=10))
        asked = await client.until(task, "InputRequired")
        offers = {o["action"] for o in data(asked["question"])["you_may"]}
        assert offers == {"Accept", "Reject"}
        assert proxy.card is not None and proxy.card.capabilities.streaming

        await client.act(task, "Reply", reply=ask("Reject", reason="too dear"))
        completed = await client.until(task, "Completed")
        assert client.names(task) == ["Send", "Submitted", "Working", "InputRequired",
                                      "Reply", "Resumed", "Completed"]
        [history] = [data(a)["history"] for a in completed["artifacts"]
                     if a.get("name") == "enactment"]
        assert [h["action"] for h in history] == ["RFQ", "Quote", "Reject"]
        assert client.adapter.is_complete(task)

        # Submitted's task_id is the remote agent's own taskId.
        [submitted] = client.said(task, "Submitted")
        remote = await remote_task(urls["a2a"], submitted["task_id"])
        assert remote.status.state == TaskState.TASK_STATE_COMPLETED


async def test_each_question_is_a_turn_and_each_reply_resumes_it() -> None:
    async with asyncio.timeout(60), buyer() as urls, delegating(
            "local", urls["a2a"]) as (client, _):
        task = await client.send(ask("RFQ", item="ball", budget=10))
        first = await client.until(task, "InputRequired")
        # An address that is no string: the remote Buyer refuses the Accept and
        # asks again, saying why: a second turn.
        await client.act(task, "Reply", reply=ask("Accept", address=42))
        second = await client.until(task, "InputRequired", 2)
        assert second["turn"] != first["turn"]
        assert "address" in data(second["question"])["error"]
        await client.act(task, "Reply", reply=ask("Reject", reason="changed my mind"))
        await client.until(task, "Completed")
        assert client.names(task) == [
            "Send", "Submitted", "Working", "InputRequired", "Reply", "Resumed",
            "InputRequired", "Reply", "Resumed", "Completed"]
        assert [r["turn"] for r in client.said(task, "Resumed")] == [
            first["turn"], second["turn"]]


@pytest.mark.parametrize("streaming", [None, False])
async def test_a_cancel_cancels_the_remote_task(streaming: bool | None) -> None:
    async with asyncio.timeout(60), buyer() as urls, delegating(
            "http", urls["a2a"], streaming=streaming) as (client, _):
        # Nobody quotes for a unicorn: the remote task works until canceled.
        task = await client.send(ask("RFQ", item="unicorn", budget=10))
        await client.until(task, "Working")
        await client.act(task, "Cancel")
        await client.until(task, "Canceled")
        assert client.names(task) == ["Send", "Submitted", "Working", "Cancel", "Canceled"]
        [submitted] = client.said(task, "Submitted")
        remote = await remote_task(urls["a2a"], submitted["task_id"])
        assert remote.status.state == TaskState.TASK_STATE_CANCELED


async def test_a_remote_agent_that_is_down_fails_the_task() -> None:
    down = f"http://127.0.0.1:{free_port()}"
    async with asyncio.timeout(60), delegating("local", down) as (client, _):
        task = await client.send({"parts": [{"text": "anyone there?"}]})
        failed = await client.until(task, "Failed")
        assert client.names(task) == ["Send", "Submitted", "Failed"]
        assert client.said(task, "Submitted") [0]["task_id"] == ""  # no remote task
        assert failed["error"]["remote"] == down
        assert f"the remote A2A agent at {down} did not answer" in failed["error"]["error"]
        assert client.adapter.is_complete(task)


async def test_a_remote_agent_that_never_answers_fails_the_task_when_it_times_out() -> None:
    hang = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await hang.wait()  # reads nothing, answers nothing
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with asyncio.timeout(60), delegating("local", url, timeout=0.5) as (client, _):
            task = await client.send({"parts": [{"text": "hello?"}]})
            failed = await client.until(task, "Failed")
            assert "timed out after 0.5s" in failed["error"]["error"]
    finally:
        hang.set()
        server.close()
        await server.wait_closed()


# Against a tiny agent written with the A2A SDK alone ------------------------------------------


class Echo(AgentExecutor):
    """Completes with an echo of the text; rejects "no..."; cancels "cancel..." on
    its own; asks once for a name when told "ask"."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        text = get_message_text(context.message)
        if text.startswith("no"):  # rejected at once, never submitted
            await event_queue.enqueue_event(Task(
                id=task_id, context_id=context_id, history=[context.message],
                status=TaskStatus(state=TaskState.TASK_STATE_REJECTED, message=(
                    updater.new_agent_message([new_text_part("I will not")])))))
            return
        if context.current_task is None:
            await event_queue.enqueue_event(Task(
                id=task_id, context_id=context_id, history=[context.message],
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
        await updater.start_work()
        if text.startswith("cancel"):
            await updater.cancel()
        elif text == "ask":
            await updater.requires_input(updater.new_agent_message([new_text_part("name?")]))
        else:
            await updater.add_artifact([new_text_part(f"echo: {text}")], name="echo")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, str(context.task_id), str(context.context_id)).cancel()


@contextlib.asynccontextmanager
async def echo_agent(streaming: bool) -> AsyncIterator[str]:
    card = AgentCard(name="echo", description="echoes", version="1.0.0",
                     capabilities=AgentCapabilities(streaming=streaming),
                     default_input_modes=["text/plain"], default_output_modes=["text/plain"],
                     skills=[AgentSkill(id="echo", name="echo", description="echoes",
                                        tags=["echo"])])
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore(),
                                    agent_card=card)

    async def with_url(served: AgentCard) -> AgentCard:
        served.supported_interfaces.append(
            AgentInterface(url=base, protocol_binding="JSONRPC", protocol_version="1.0"))
        return served

    app = Starlette(routes=[*create_agent_card_routes(card, card_modifier=with_url),
                            *create_jsonrpc_routes(handler, "/")])
    async with serve(app) as base:
        yield base
        await handler.aclose()


@pytest.mark.parametrize("streaming", [True, False])
async def test_an_sdk_agent_completes_rejects_and_asks(streaming: bool) -> None:
    async with asyncio.timeout(60), echo_agent(streaming) as url, delegating(
            "local", f"{url}/.well-known/agent-card.json") as (client, proxy):
        task = await client.send({"role": "user", "parts": [{"kind": "text", "text": "hi"}]})
        completed = await client.until(task, "Completed")
        assert client.names(task) == ["Send", "Submitted", "Working", "Completed"]
        [artifact] = completed["artifacts"]
        assert artifact["name"] == "echo" and artifact["parts"] == [{"text": "echo: hi"}]
        assert proxy.card is not None and proxy.card.capabilities.streaming is streaming

        task = await client.send({"parts": [{"text": "no way"}]})
        rejected = await client.until(task, "Rejected")
        assert client.names(task) == ["Send", "Rejected"]
        assert rejected["rejection"]["parts"] == [{"text": "I will not"}]

        task = await client.send({"parts": [{"text": "ask"}]})
        asked = await client.until(task, "InputRequired")
        assert asked["question"]["parts"] == [{"text": "name?"}]
        await client.act(task, "Reply", reply={"parts": [{"text": "Ada"}]})
        completed = await client.until(task, "Completed")
        assert completed["artifacts"][-1]["parts"] == [{"text": "echo: Ada"}]
        assert client.names(task)[-3:] == ["Reply", "Resumed", "Completed"]


async def test_a_remote_cancel_nobody_asked_for_fails_the_task_saying_why() -> None:
    """A2ATask has Canceled only after the Client's Cancel: the protocol refuses it,
    and the proxy reports the task as Failed instead of leaving the Client waiting."""
    async with asyncio.timeout(60), echo_agent(True) as url, delegating(
            "local", url) as (client, _):
        task = await client.send({"parts": [{"text": "cancel yourself"}]})
        failed = await client.until(task, "Failed")
        assert "canceled" in failed["error"]["error"]
        assert "Canceled is not enabled" in failed["error"]["error"]
        assert "Canceled" not in client.names(task)


async def test_only_the_agent_role_of_a2atask_can_be_proxied() -> None:
    async with Harness("local", [A2ATASK], AGENTS) as h:
        with pytest.raises(ValueError, match="not the Agent of A2ATask"):
            RemoteAgent(h.adapter("client", "Client"), "http://127.0.0.1:1")
        with pytest.raises(ValueError, match="not the Agent of A2ATask"):
            RemoteAgent(PeachAdapter("b", load("purchase.lsh"), "Buyer", h.executor("client")),
                        "http://127.0.0.1:1")


async def test_each_proxy_answers_the_sends_it_accepts() -> None:
    """Two agents play the Agent role, each a proxy of its own remote agent:
    ``accepts`` says which Sends are whose, so each task has one Agent."""
    def to(name: str) -> Any:
        return lambda send: send.bindings["message"].get("metadata", {}).get("to") == name

    down = f"http://127.0.0.1:{free_port()}"
    agents = {"client": ["Client"], "echo": ["Agent"], "down": ["Agent"]}
    async with asyncio.timeout(60), echo_agent(True) as url, Harness(
            "local", [A2ATASK], agents) as h:
        echo = RemoteAgent(h.adapter("echo", "Agent"), url, accepts=to("echo"))
        nobody = RemoteAgent(h.adapter("down", "Agent"), down, accepts=to("down"))
        client = Delegator(h.adapter("client", "Client"))
        async with echo, nobody, client.adapter:
            done = await client.send({"parts": [{"text": "hi"}], "metadata": {"to": "echo"}})
            failed = await client.send({"parts": [{"text": "hi"}], "metadata": {"to": "down"}})
            await client.until(done, "Completed")
            await client.until(failed, "Failed")
            by = {task: {who for _, i, who in client.adapter.history(task) if i.name != "Send"}
                  for task in (done, failed)}
            assert by == {done: {"echo"}, failed: {"down"}}


async def test_stopping_the_proxy_leaves_the_remote_task_running() -> None:
    """Stopping the proxy stops following the task (its stream is closed, the
    adapter stops), and the remote task goes on there."""
    async with asyncio.timeout(60), buyer() as urls, Harness(
            "local", [A2ATASK], AGENTS) as h:
        client = Delegator(h.adapter("client", "Client"))
        proxy = RemoteAgent(h.adapter("remote", "Agent"), urls["a2a"])
        async with client.adapter:
            async with proxy:
                task = await client.send(ask("RFQ", item="unicorn", budget=10))
                await client.until(task, "Working")
            assert not proxy.adapter.running
            [submitted] = client.said(task, "Submitted")
            remote = await remote_task(urls["a2a"], submitted["task_id"])
            assert remote.status.state == TaskState.TASK_STATE_WORKING
