"""A hostile or careless A2A client against ``strabo a2a`` (RoleAgent).

The Purchase Buyer served on loopback (uvicorn), a coded Seller quoting on the
same in-process SyncServer (tests/peach/a2a/test_a2a_server_bounded.py's
``buyer_agent``), driven by the SDK's client where it serves and by raw
JSON-RPC over httpx where the input must be malformed. Each mistake gets a
precise answer (a JSON-RPC error with the right code, or a task saying why),
no traceback in the log, and the agent goes on serving; no client can drive a
task through a transition protocols/a2a-task.lsh forbids (a second terminal
state, a task left asking when its enactment is over).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import uuid
from typing import Any

import httpx
import pytest
from a2a.helpers.proto_helpers import get_data_parts
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Task,
    TaskNotFoundError,
    TaskState,
)

from peach.a2a import server as a2a_server
from peach.a2a._guard import MAX_BODY
from strabo.cli import main
from tests.peach.a2a.test_a2a_server import PURCHASE, ask, data, send
from tests.peach.a2a.test_a2a_server_bounded import buyer_agent, rfq, stored

V1 = {"A2A-Version": "1.0"}
V03: dict[str, str] = {}  # a 0.3 client sends no version header

COMPLETED, CANCELED = TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED, REJECTED = TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_REJECTED


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO)
    return caplog


def tracebacks(log: pytest.LogCaptureFixture) -> list[str]:
    """What was logged with a traceback, or as an error: none for a client's mistake.
    Left out: asyncio's report, at garbage collection, of a task an earlier test
    of the same worker left behind (an MCP SDK client's ``httpx2`` close, seen
    when tests/peach/mcp ran before): whenever the collector runs, it lands in
    whichever test runs then, and this file uses no ``httpx2``."""
    return [f"{r.name}: {r.getMessage()}" for r in log.records
            if (r.exc_info or r.levelno >= logging.ERROR)
            and not (r.name == "asyncio" and "httpx2" in r.getMessage())]


def rpc(method: str, params: Any, id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


def message(action: Any, bindings: Any, **more: Any) -> dict[str, Any]:
    """A 1.0 message in JSON with one data part."""
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
            "parts": [{"data": {"action": action, "bindings": bindings}}], **more}


async def post(url: str, body: bytes | dict[str, Any] | list[Any],
               headers: dict[str, str] = V1) -> dict[str, Any]:
    """One JSON-RPC call; the answer's JSON (HTTP 200, as JSON-RPC has it)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(url + "/", content=content,
                                 headers={"content-type": "application/json", **headers})
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def rfq_body(budget: bytes) -> bytes:
    """An RFQ whose budget is written as-is (NaN, Infinity: not JSON)."""
    return (b'{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":'
            b'{"messageId":"n","role":"ROLE_USER","parts":[{"data":{"action":"RFQ",'
            b'"bindings":{"item":"ball","budget":' + budget + b'}}}]}}}')


MALFORMED: list[tuple[str, bytes | dict[str, Any] | list[Any], dict[str, str], int]] = [
    ("not JSON", b"{not json", V1, -32700),
    ("not UTF-8", rfq_body(b'"\xff\xfe"'), V1, -32700),
    ("NaN", rfq_body(b"NaN"), V1, -32700),
    ("Infinity", rfq_body(b"Infinity"), V1, -32700),
    ("-Infinity", rfq_body(b"-Infinity"), V1, -32700),
    ("nested past the JSON parser", rfq_body(b"[" * 100_000 + b"]" * 100_000), V1, -32700),
    ("past MAX_BODY", rfq_body(b'"' + b"x" * MAX_BODY + b'"'), V1, -32600),
    ("nested past protobuf", rfq_body(b"[" * 200 + b"]" * 200), V1, -32602),
    ("a batch", [rpc("GetTask", {"id": "x"})], V1, -32600),
    ("no method", {"jsonrpc": "2.0", "id": 1}, V1, -32600),
    ("JSON-RPC 1.0", {**rpc("GetTask", {"id": "x"}), "jsonrpc": "1.0"}, V1, -32600),
    ("an unknown method", rpc("message/sendd", {}), V1, -32601),
    ("a message that is a number", rpc("SendMessage", {"message": 5}), V1, -32602),
    ("params that are a list", rpc("SendMessage", [1, 2]), V1, -32602),
    ("a message without parts", rpc("SendMessage", {"message": {
        "messageId": "p", "role": "ROLE_USER", "parts": []}}), V1, -32602),
    ("historyLength a word", rpc("GetTask", {"id": "x", "historyLength": "x"}), V1, -32602),
    ("historyLength negative", rpc("GetTask", {"id": "x", "historyLength": -1}), V1, -32602),
    ("historyLength past int32", rpc("GetTask", {"id": "x", "historyLength": 2**40}), V1,
     -32602),
    ("a task id that is a number (0.3)", rpc("tasks/get", {"id": 5}), V03, -32600),
    ("a 1.0 message to 0.3's message/send", rpc("message/send", {
        "message": message("RFQ", {"item": "ball", "budget": 1})}), V03, -32600),
    ("0.3's method with 1.0's header", rpc("tasks/get", {"id": "x"}), V1, -32603),
    ("1.0's method without the header", rpc("GetTask", {"id": "x"}), V03, -32009),
]


async def test_malformed_requests_get_their_json_rpc_error_and_no_traceback(
    log: pytest.LogCaptureFixture,
) -> None:
    async with asyncio.timeout(30), buyer_agent() as (agent, client):
        for name, body, headers, code in MALFORMED:
            answer = await post(agent.url, body, headers)
            assert answer.get("error", {}).get("code") == code, (name, answer)
        assert not agent.adapter.enactments()  # NaN, Infinity: nothing attempted
        assert not await stored(client)
        assert tracebacks(log) == []
        await rfq(client)  # and it serves the next client


async def test_a_message_the_role_cannot_read_rejects_its_task_and_attempts_nothing(
    log: pytest.LogCaptureFixture,
) -> None:
    unreadable = [
        {"messageId": "t", "role": "ROLE_USER", "parts": [{"text": "buy me a ball"}]},
        {"messageId": "two", "role": "ROLE_USER", "parts": [
            {"data": {"action": "RFQ", "bindings": {}}}] * 2},
        message(5, {}), message(None, {}), message("Quote", {"price": 1}),
        message("RFQ", [1, 2]), message("RFQ", "ball"),
        {"messageId": "x", "role": "ROLE_USER", "parts": [
            {"data": {"action": "RFQ", "bindings": {}, "extra": 1}}]},
        {"messageId": "l", "role": "ROLE_USER", "parts": [{"data": [1, 2]}]},
    ]
    async with asyncio.timeout(30), buyer_agent() as (agent, _):
        for body in unreadable:
            answer = await post(agent.url, rpc("SendMessage", {"message": body}))
            status = answer["result"]["task"]["status"]
            assert status["state"] == "TASK_STATE_REJECTED", (body, answer)
            assert status["message"]["parts"][1]["data"]["rule"] == "request", answer
        assert not agent.adapter.enactments()
        # Huge and many parts are read: the one data part names the action.
        many = {"messageId": "many", "role": "ROLE_USER", "parts": [
            *[{"text": "hi"}] * 1000,
            {"data": {"action": "RFQ", "bindings": {"item": "b" * 1_000_000, "budget": 3}}}]}
        answer = await post(agent.url, rpc("SendMessage", {"message": many}))
        assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert tracebacks(log) == []


async def test_a_client_acts_only_in_its_own_task(log: pytest.LogCaptureFixture) -> None:
    async with asyncio.timeout(30), buyer_agent() as (agent, client):
        mine, theirs = await rfq(client), await rfq(client)
        # A forged task id, and a task id with another context: refused by the SDK.
        forged = await post(agent.url, rpc("SendMessage", {"message": message(
            "Reject", {"reason": "x"}, taskId="forged")}))
        assert forged["error"]["code"] == -32001, forged
        foreign = await post(agent.url, rpc("SendMessage", {"message": message(
            "Reject", {"reason": "x"}, taskId=theirs.id, contextId=mine.context_id)}))
        assert foreign["error"]["code"] == -32602, foreign
        # Naming the other task's enactment in a message to mine acts in mine.
        keys = data(theirs.status.message)["keys"]
        done = await send(client, ask("Reject", {"reason": "x", **keys}, mine))
        assert done.status.state == COMPLETED, done
        still = await client.get_task(GetTaskRequest(id=theirs.id))
        assert still.status.state == INPUT_REQUIRED
        assert [i.name for _, i, _ in agent.adapter.history(agent._roots[theirs.id])] == [
            "RFQ", "Quote"]
        assert tracebacks(log) == []


async def test_a_task_whose_enactment_another_task_ended_completes_on_its_next_message(
) -> None:
    """A new task naming an enactment's keys acts in it (docs/a2a.md): the task
    that followed it was left asking, offering nothing, for ever."""
    async with asyncio.timeout(30), buyer_agent() as (agent, client):
        task = await rfq(client)
        keys = data(task.status.message)["keys"]
        other = await send(client, ask("Reject", {"reason": "too dear", **keys}))
        assert other.status.state == COMPLETED, other
        task = await send(client, ask("Reject", {"reason": "late"}, task))
        assert task.status.state == COMPLETED, task  # was: input-required, you_may []
        [history] = [get_data_parts(a.parts)[0]["history"] for a in task.artifacts
                     if a.name == "enactment"]
        assert [h["action"] for h in history] == ["RFQ", "Quote", "Reject"]
        assert task.id not in agent._roots


async def ended(client: Any, agent: Any) -> dict[str, Task]:
    """Tasks completed, canceled and rejected."""
    done = await send(client, ask("Reject", {"reason": "no"}, await rfq(client)))
    canceled = await client.cancel_task(CancelTaskRequest(id=(await rfq(client)).id))
    rejected = await send(client, ask("RFQ", {"item": "ball", "budget": "cheap"}))
    assert (done.status.state, canceled.status.state, rejected.status.state) == (
        COMPLETED, CANCELED, REJECTED)
    return {"completed": done, "canceled": canceled, "rejected": rejected}


async def test_an_ended_task_takes_no_message_and_no_cancel_in_either_version(
    log: pytest.LogCaptureFixture,
) -> None:
    async with asyncio.timeout(30), buyer_agent(kept=8) as (agent, client):
        tasks = await ended(client, agent)
        before = len(agent.adapter.enactments())
        for state, task in tasks.items():
            for headers, send_method, cancel_method, shape in (
                (V1, "SendMessage", "CancelTask", message("RFQ", {"item": "b", "budget": 1},
                                                          taskId=task.id)),
                (V03, "message/send", "tasks/cancel", {
                    "kind": "message", "messageId": "o", "role": "user", "taskId": task.id,
                    "parts": [{"kind": "data", "data": {"action": "RFQ", "bindings": {}}}]}),
            ):
                answer = await post(agent.url, rpc(send_method, {"message": shape}), headers)
                assert answer["error"]["code"] == -32004, (state, answer)
                assert "terminal state" in answer["error"]["message"]
                answer = await post(agent.url, rpc(cancel_method, {"id": task.id}), headers)
                assert answer["error"]["code"] == -32002, (state, answer)
            streamed = await post(agent.url, rpc("SendStreamingMessage", {"message": message(
                "RFQ", {"item": "b", "budget": 1}, taskId=task.id)}))
            assert streamed["error"]["code"] == -32004, (state, streamed)
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == task.status.state
        assert len(agent.adapter.enactments()) == before
        assert tracebacks(log) == []


async def test_concurrent_cancels_all_see_it_canceled(log: pytest.LogCaptureFixture) -> None:
    """Cancels in flight at once: each answers the task canceled (as the SDK does
    for a cancel that lost the race to another), or, once it is, not cancelable."""
    async with asyncio.timeout(30), buyer_agent() as (agent, client):
        task = await rfq(client)
        answers = await asyncio.gather(*[
            post(agent.url, rpc("CancelTask", {"id": task.id}, id=n)) for n in range(6)])
        assert all(a["result"]["status"]["state"] == "TASK_STATE_CANCELED" if "result" in a
                   else a["error"]["code"] == -32002 for a in answers), answers
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == CANCELED
        assert data(got.status.message) == {"canceled": True}
        assert tracebacks(log) == []


async def test_two_messages_at_once_to_one_task_act_once(log: pytest.LogCaptureFixture) -> None:
    """The SDK runs them one after the other: the second comes to a completed task,
    and is refused as such (it was answered "no longer followed", with tracebacks)."""
    async with asyncio.timeout(30), buyer_agent() as (agent, client):
        task = await rfq(client)
        root = agent._roots[task.id]
        answers = await asyncio.gather(*[
            post(agent.url, rpc("SendMessage", {"message": message(
                "Reject", {"reason": reason}, taskId=task.id)})) for reason in ("a", "b")])
        assert all(a["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
                   for a in answers), answers
        assert [i.name for _, i, _ in agent.adapter.history(root)] == ["RFQ", "Quote", "Reject"]
        assert tracebacks(log) == []


async def test_a_cancel_racing_the_completion_leaves_the_task_completed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cancel that comes while the completion is on its way to the store: the
    task was made canceled after completed (two terminal states, A2ATask's nono)."""
    at_store, go_on, cancel_called = asyncio.Event(), asyncio.Event(), asyncio.Event()
    save, cancel = a2a_server._KeptTasks.save, a2a_server._Executor.cancel

    async def held_save(self: Any, task: Task, context: Any) -> None:
        if task.status.state == COMPLETED and not go_on.is_set():
            at_store.set()
            await go_on.wait()
        await save(self, task, context)

    async def watched_cancel(self: Any, context: Any, queue: Any) -> None:
        await cancel(self, context, queue)
        cancel_called.set()

    monkeypatch.setattr(a2a_server._KeptTasks, "save", held_save)
    monkeypatch.setattr(a2a_server._Executor, "cancel", watched_cancel)
    async with asyncio.timeout(30), buyer_agent() as (agent, client):
        task = await rfq(client)
        [handler] = agent._handlers
        active = handler._active_task_registry._active_tasks[task.id]
        rejecting = asyncio.create_task(send(client, ask("Reject", {"reason": "no"}, task)))
        await at_store.wait()
        canceling = asyncio.create_task(client.cancel_task(CancelTaskRequest(id=task.id)))
        await cancel_called.wait()
        go_on.set()
        done, canceled = await rejecting, await canceling
        consumer = active._consumer_task
        assert consumer is not None
        await asyncio.wait({consumer})  # every event it had, saved
        assert done.status.state == COMPLETED, done
        assert canceled.status.state == COMPLETED, canceled  # the cancel came too late
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == COMPLETED, got


async def test_a_task_the_store_keeps_is_still_followed() -> None:
    """The store orders tasks by their last update, the enactments by their last
    action: a refused message moved a task up in one and not the other, and the
    agent then answered a task it still listed "no longer followed" (and failed it)."""
    async with asyncio.timeout(30), buyer_agent(kept=2) as (agent, client):
        first, second = await rfq(client), await rfq(client)
        asked = await send(client, ask("Accept", {"price": "free"}, first))
        assert asked.status.state == INPUT_REQUIRED, asked  # refused: a type
        third = await rfq(client)  # the store forgets the second, least recently updated
        assert await stored(client) == {first.id, third.id}
        assert set(agent._roots) == {first.id, third.id}
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=second.id))
        done = await send(client, ask("Reject", {"reason": "no"}, first))
        assert done.status.state == COMPLETED, done


STREAMS = {
    "1.0": (rpc("SendStreamingMessage", {"message": message(
        "RFQ", {"item": "ball", "budget": 10})}), V1),
    "0.3": (rpc("message/stream", {"message": {
        "kind": "message", "messageId": "s", "role": "user", "parts": [{
            "kind": "data", "data": {"action": "RFQ", "bindings": {"item": "b", "budget": 1}}}]}}),
            V03),
}


@pytest.mark.parametrize("version", list(STREAMS))
async def test_a_stream_client_that_goes_away_leaves_the_task_going_on(
    version: str, log: pytest.LogCaptureFixture,
) -> None:
    body, headers = STREAMS[version]
    async with asyncio.timeout(30), buyer_agent() as (agent, client):
        async with httpx.AsyncClient(timeout=30) as http, http.stream(
                "POST", agent.url + "/", json=body, headers=headers) as stream:
            lines = stream.aiter_lines()
            first = await anext(line async for line in lines if line.startswith("data:"))
        result = json.loads(first[5:])["result"]
        task = Task(id=result.get("task", result)["id"])
        # The task went on without the client: a message to it waits for its
        # question (the SDK runs one message at a time), then acts.
        done = await send(client, ask("Reject", {"reason": "no"}, task))
        assert done.status.state == COMPLETED, done
        assert [a.name for a in done.artifacts] == ["RFQ", "Reject", "enactment"]
    left = [t.get_name() for t in asyncio.all_tasks()
            if t.get_name().startswith(("producer:", "consumer:"))]
    assert left == []
    assert tracebacks(log) == []


async def test_a_flood_of_tasks_in_one_context_stays_within_kept(
    log: pytest.LogCaptureFixture,
) -> None:
    async with asyncio.timeout(30), buyer_agent(kept=4) as (agent, client):
        def rfq_in(context: str, budget: Any, n: int) -> dict[str, Any]:
            return rpc("SendMessage", {"message": message(
                "RFQ", {"item": f"ball {n}", "budget": budget}, contextId=context)}, id=n)

        answers = await asyncio.gather(*[
            post(agent.url, rfq_in("flood", 10 if n % 2 else "cheap", n)) for n in range(40)])
        states = {a["result"]["task"]["status"]["state"] for a in answers}
        assert states == {"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_REJECTED"}, states
        assert len(await stored(client)) <= 4
        assert len(agent._roots) <= 4 and len(agent._ended) <= 4
        # The SDK's live state of each task asking for input: a forgotten one's goes
        # at once (it stayed IDLE_RELEASE seconds, one per task of the flood).
        [handler] = agent._handlers
        live = handler._active_task_registry._active_tasks.values()
        assert len([a for a in live if not a.is_finished]) <= 4
        assert len(agent.adapter.enactments()) == 20  # each accepted RFQ's goes on
        forgotten = answers[0]["result"]["task"]["id"]
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=forgotten))
        await rfq(client)
        assert tracebacks(log) == []


def strabo(capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, str]:
    code = main(["a2a", *options])
    return code, capsys.readouterr().err


def test_the_command_refuses_what_it_cannot_serve(
    capsys: pytest.CaptureFixture[str], tmp_path: Any,
) -> None:
    broken = tmp_path / "broken.lsh"
    broken.write_text("Broken\nwho Buyer\ndo\n  Buyer : RFQ(ID\n")
    code, err = strabo(capsys, "--protocol", str(broken), "--role", "Buyer", "--embedded")
    assert code == 2 and "broken.lsh" in err and "Traceback" not in err, err
    code, err = strabo(capsys, "--protocol", PURCHASE, "--role", "Auctioneer", "--embedded")
    assert code == 2 and "no role 'Auctioneer'" in err and "Buyer" in err, err
    code, err = strabo(capsys, "--protocol", PURCHASE, "--role", "Buyer", "--embedded",
                       "--kept", "many")
    assert code == 2 and "--kept" in err, err
    code, err = strabo(capsys, "--protocol", PURCHASE, "--role", "Buyer", "--embedded",
                       "--port", "-1")
    assert code == 2 and "--port" in err, err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        code, err = strabo(capsys, "--protocol", PURCHASE, "--role", "Buyer", "--embedded",
                           "--port", port)
    assert code == 2 and f"cannot serve on 127.0.0.1:{port}" in err, err
    assert "Traceback" not in err
