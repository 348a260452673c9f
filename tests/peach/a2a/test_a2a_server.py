"""``strabo a2a``: the Purchase Buyer served as an A2A agent, driven by the A2A
SDK's own client over HTTP on loopback, against an embedded SyncServer with a
coded Seller and Shipper joining it over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers.proto_helpers import get_data_parts, new_data_part
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskNotCancelableError,
    TaskState,
)

from langshaw import LangshawProtocol
from peach import PeachAdapter, SyncExecutor
from peach.a2a.cli import run_a2a
from strabo.cli import build_parser
from tests.conftest import PROTOCOLS

PURCHASE = str(PROTOCOLS / "purchase.lsh")


def counterparts(url: str, mas: str) -> list[PeachAdapter]:
    """A Seller that quotes 4 for anything but a "unicorn" (it never answers
    those), ships what was bought from it, and a Shipper that delivers."""
    protocol = LangshawProtocol.load(PURCHASE)
    seller = PeachAdapter("seller", protocol, "Seller",
                          SyncExecutor(url, token="seller-secret", mas=mas))
    shipper = PeachAdapter("shipper", protocol, "Shipper",
                           SyncExecutor(url, token="shipper-secret", mas=mas))

    @seller.on_enabled("Quote")
    async def quote(fa):
        if fa.new_keys and fa.fixed.get("item") != "unicorn":
            await seller.attempt([fa.bind(price=4)])

    @seller.on_enabled("Ship")
    async def ship(fa):
        await seller.attempt([fa.bind(delivery_date="monday")])

    @shipper.on_enabled("Deliver")
    async def deliver(fa):
        await shipper.attempt([fa.bind(outcome="delivered")])

    return [seller, shipper]


@contextlib.asynccontextmanager
async def strabo_a2a(*options: str) -> AsyncIterator[dict[str, str]]:
    """``strabo a2a ...`` in this process; yields its URLs."""
    args = build_parser().parse_args(["a2a", *options])
    ready: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_a2a(args, on_ready=ready.set_result, stop=stop))
    done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # it ended before serving: show why
    try:
        yield ready.result()
    finally:
        stop.set()
        assert await task == 0


def ask(action: str, bindings: dict[str, Any], task: Task | None = None) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=f"m-{action}-{id(bindings)}",
                      parts=[new_data_part({"action": action, "bindings": bindings})])
    if task is not None:
        message.task_id, message.context_id = task.id, task.context_id
    return SendMessageRequest(message=message)


async def send(client: Any, request: SendMessageRequest) -> Task:
    """message/send: the task as it stands when the call returns."""
    tasks = [r.task async for r in client.send_message(request) if r.HasField("task")]
    assert tasks, "no task came back"
    return tasks[-1]


def data(message: Message) -> dict[str, Any]:
    [part] = get_data_parts(message.parts)
    return part  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def served_buyer(
    streaming: bool = False, *options: str
) -> AsyncIterator[tuple[Any, dict[str, str]]]:
    async with strabo_a2a("--protocol", PURCHASE, "--role", "Buyer", "--embedded",
                          "--mas", "shop", *options) as urls, contextlib.AsyncExitStack() as stack:
        for agent in counterparts(urls["syncserver"], "shop"):
            await stack.enter_async_context(agent)
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        card = await A2ACardResolver(http, urls["a2a"]).get_agent_card()
        client = await create_client(card, ClientConfig(streaming=streaming, httpx_client=http))
        yield client, {**urls, "card": card}


async def test_an_a2a_client_enacts_purchase_as_the_buyer():
    async with asyncio.timeout(60), served_buyer() as (client, urls):
        card = urls["card"]
        assert card.capabilities.streaming
        assert {s.name for s in card.skills} == {
            "RFQ", "Accept", "Reject", "PreferDate", "Cancel", "Completed"}
        assert "Buyer" in card.description and "Purchase" in card.description
        assert card.supported_interfaces[0].url == urls["a2a"]

        # RFQ opens the task; the Seller quotes, and the Buyer may act again.
        task = await send(client, ask("RFQ", {"item": "ball", "budget": 10}))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
        offers = {o["action"] for o in data(task.status.message)["you_may"]}
        assert offers == {"Accept", "Reject"}
        [done] = [get_data_parts(a.parts)[0] for a in task.artifacts if a.name == "RFQ"]
        assert done["bindings"]["budget"] == 10

        # tasks/get says the same.
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

        # Reject ends the enactment: the task completes, with its history.
        task = await send(client, ask("Reject", {"reason": "too dear"}, task))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
        [history] = [get_data_parts(a.parts)[0]["history"] for a in task.artifacts
                     if a.name == "enactment"]
        assert [h["action"] for h in history] == ["RFQ", "Quote", "Reject"]

        # A completed task cannot be canceled.
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))


async def test_a_running_task_is_canceled_and_a_refusal_rejects_the_task():
    async with asyncio.timeout(60), served_buyer() as (client, _):
        # Nobody quotes for a unicorn: the task keeps working, until canceled.
        request = ask("RFQ", {"item": "unicorn", "budget": 10})
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        task = await send(client, request)
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_WORKING
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_CANCELED

        # A budget that is no number: refused by the protocol's types, before any
        # attempt, so the task is rejected, naming the rule.
        task = await send(client, ask("RFQ", {"item": "ball", "budget": "cheap"}))
        assert task.status.state == TaskState.TASK_STATE_REJECTED, task
        assert data(task.status.message)["rule"] == "type"
        assert "budget" in data(task.status.message)["error"]

        # Accept where no quote came: not enabled, with the semantics' reason.
        unicorn = got.artifacts[0]
        keys = get_data_parts(unicorn.parts)[0]["keys"]
        task = await send(client, ask("Accept", {**keys, "address": "here"}))
        assert task.status.state == TaskState.TASK_STATE_REJECTED, task
        assert "not enabled" in data(task.status.message)["error"]


async def test_message_stream_reports_each_state():
    async with asyncio.timeout(60), served_buyer(streaming=True) as (client, _):
        states, actions = [], []
        async for response in client.send_message(ask("RFQ", {"item": "ball", "budget": 10})):
            if response.HasField("status_update"):
                status = response.status_update.status
                states.append(status.state)
                if status.state == TaskState.TASK_STATE_WORKING and status.message.parts:
                    actions.append(data(status.message).get("action"))
        assert states[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
        assert TaskState.TASK_STATE_WORKING in states
        assert "Quote" in actions  # the Seller's quote, as it came


async def test_kept_bounds_the_tasks_the_command_keeps():
    """``strabo a2a --kept 1``: a second task makes the agent forget the first."""
    from a2a.types import TaskNotFoundError

    async with asyncio.timeout(60), served_buyer(False, "--kept", "1") as (client, _):
        first = await send(client, ask("RFQ", {"item": "ball", "budget": 10}))
        await send(client, ask("RFQ", {"item": "bat", "budget": 10}))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=first.id))


def test_kept_must_be_a_positive_whole_number(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["a2a", "--protocol", "purchase", "--role", "Buyer",
                                   "--embedded", "--kept", "0"])
    assert exit.value.code == 2
    assert "--kept: 0: must be a positive whole number" in capsys.readouterr().err
