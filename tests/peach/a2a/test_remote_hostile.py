"""RemoteAgent against hostile remote A2A agents: a hand-written JSON-RPC server on
loopback (A2A 1.0's wire, as the SDK's client speaks it) that says what a
misbehaving or malicious agent would: a card sending the proxy to another host,
a task id that is not the one asked, artifacts without end, states out of order.
The proxy must end the Client's task as Failed, saying why, and keep nothing
unbounded; it must never follow the remote agent where it was not sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from syncserver.serving import serve
from tests.peach.a2a.test_a2a_remote import Delegator, delegating

Script = Callable[[str, dict[str, Any]], Any]
"""(method, params) -> a JSON-RPC result (dict), or a list of results to stream."""


def card(url: str, *, streaming: bool) -> dict[str, Any]:
    return {"name": "hostile", "description": "misbehaves", "version": "1.0.0",
            "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC",
                                     "protocolVersion": "1.0"}],
            "capabilities": {"streaming": streaming},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "x", "name": "x", "description": "x", "tags": ["x"]}]}


def task(task_id: str, state: str, **extra: Any) -> dict[str, Any]:
    return {"task": {"id": task_id, "contextId": "ctx", "status": {"state": state}, **extra}}


class Hostile:
    """A remote agent whose answers a test scripts; it records each call."""

    def __init__(self, script: Script, *, streaming: bool = False,
                 card_url: str | None = None) -> None:
        self.script, self.streaming, self.card_url = script, streaming, card_url
        self.calls: list[str] = []
        self.base = ""

    async def card(self, request: Request) -> Response:
        return JSONResponse(card(self.card_url or self.base, streaming=self.streaming))

    async def rpc(self, request: Request) -> Response:
        body = await request.json()
        self.calls.append(body["method"])
        result = self.script(body["method"], body.get("params") or {})
        if isinstance(result, list):
            async def events() -> AsyncIterator[str]:
                for each in result:
                    yield "data: " + json.dumps({"jsonrpc": "2.0", "id": body["id"],
                                                 "result": each}) + "\n\n"
            return StreamingResponse(events(), media_type="text/event-stream")
        # json.dumps, not JSONResponse: a hostile agent writes NaN too
        return Response(json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result}),
                        media_type="application/json")

    @contextlib.asynccontextmanager
    async def served(self) -> AsyncIterator[str]:
        app = Starlette(routes=[Route("/.well-known/agent-card.json", self.card),
                                Route("/", self.rpc, methods=["POST"])])
        async with serve(app) as base:
            self.base = base
            yield base


async def failed(client: Delegator, message: dict[str, Any] | None = None) -> dict[str, Any]:
    root = await client.send(message or {"parts": [{"text": "hi"}]})
    error = await client.until(root, "Failed")
    assert "Completed" not in client.names(root)
    assert client.adapter.is_complete(root)
    return error


async def test_a_card_pointing_at_another_host_is_not_followed() -> None:
    """The card names an endpoint on another origin (an internal address, say): the
    proxy does not send the Client's message there, and says why."""
    elsewhere = Hostile(lambda method, params: task("t-1", "TASK_STATE_COMPLETED"))
    async with asyncio.timeout(30), elsewhere.served() as other:
        liar = Hostile(lambda method, params: task("t-1", "TASK_STATE_COMPLETED"),
                       card_url=other)
        async with liar.served() as url, delegating("local", url) as (client, _):
            error = await failed(client)
            assert other in error["error"]["error"] and url in error["error"]["error"]
            assert elsewhere.calls == [] and liar.calls == []


async def test_a_task_answered_for_another_id_fails_the_task() -> None:
    """tasks/get for t-1 answered with t-2, completed: not t-1's outcome."""
    def script(method: str, params: dict[str, Any]) -> Any:
        if method == "SendMessage":
            return task("t-1", "TASK_STATE_WORKING")
        return task("t-2", "TASK_STATE_COMPLETED",  # GetTask's result is the task itself
                    artifacts=[{"artifactId": "a", "parts": [{"text": "someone else's"}]}]
                    )["task"]

    hostile = Hostile(script)
    async with asyncio.timeout(30), hostile.served() as url, delegating(
            "local", url, poll_max=0.1) as (client, _):
        error = await failed(client)
        assert "t-2" in error["error"]["error"] and "t-1" in error["error"]["error"]


async def test_a_stream_switching_task_ids_fails_the_task() -> None:
    def script(method: str, params: dict[str, Any]) -> Any:
        return [task("t-1", "TASK_STATE_WORKING"),
                {"statusUpdate": {"taskId": "t-9", "contextId": "ctx",
                                  "status": {"state": "TASK_STATE_COMPLETED"}}}]

    hostile = Hostile(script, streaming=True)
    async with asyncio.timeout(30), hostile.served() as url, delegating(
            "local", url) as (client, _):
        error = await failed(client)
        assert "t-9" in error["error"]["error"]


async def test_artifacts_without_end_are_bounded() -> None:
    """A stream appending to an artifact past ``max_artifact_bytes``: the task fails,
    saying so, and the proxy keeps no more of it."""
    chunk = {"artifactUpdate": {"taskId": "t-1", "contextId": "ctx", "append": True,
                                "artifact": {"artifactId": "a",
                                             "parts": [{"text": "x" * 10_000}]}}}

    def script(method: str, params: dict[str, Any]) -> Any:
        return [task("t-1", "TASK_STATE_WORKING"), *[chunk] * 50,
                {"statusUpdate": {"taskId": "t-1", "contextId": "ctx",
                                  "status": {"state": "TASK_STATE_COMPLETED"}}}]

    hostile = Hostile(script, streaming=True)
    async with asyncio.timeout(30), hostile.served() as url, delegating(
            "local", url, max_artifact_bytes=100_000) as (client, proxy):
        error = await failed(client)
        assert "100000 bytes" in error["error"]["error"]
        assert proxy._tasks == {}


async def test_states_out_of_order_change_nothing_once_completed() -> None:
    """completed, then working, then failed: the Client sees Completed, once."""
    def script(method: str, params: dict[str, Any]) -> Any:
        return [task("t-1", "TASK_STATE_COMPLETED"), task("t-1", "TASK_STATE_WORKING"),
                task("t-1", "TASK_STATE_FAILED")]

    hostile = Hostile(script, streaming=True)
    async with asyncio.timeout(30), hostile.served() as url, delegating(
            "local", url) as (client, _):
        root = await client.send({"parts": [{"text": "hi"}]})
        await client.until(root, "Completed")
        assert client.names(root) == ["Send", "Submitted", "Working", "Completed"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "1e400"])
async def test_a_number_json_cannot_carry_fails_the_task_saying_so(literal: str) -> None:
    """A data part with NaN (Python's json writes and reads it): the task fails with
    a sentence, not a protobuf error."""
    def script(method: str, params: dict[str, Any]) -> Any:
        return {"message": {"messageId": "m", "role": "ROLE_AGENT", "contextId": "ctx",
                            "parts": [{"data": {"total": float(literal)}}]}}

    hostile = Hostile(script)
    async with asyncio.timeout(30), hostile.served() as url, delegating(
            "local", url) as (client, _):
        error = await failed(client)
        assert error["error"]["error"].startswith(
            "the remote agent sent what JSON cannot hold"), error


class ErrorAgent(Hostile):
    """Answers every call with a JSON-RPC error whose message is ``size`` long."""

    def __init__(self, size: int) -> None:
        super().__init__(lambda method, params: None)
        self.size = size

    async def rpc(self, request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"],
                             "error": {"code": -32603, "message": "x" * self.size}})


async def test_a_huge_error_message_is_cut_short() -> None:
    """The remote agent's words go into the Client's Rejected: a bounded excerpt."""
    hostile = ErrorAgent(2_000_000)
    async with asyncio.timeout(30), hostile.served() as url, delegating(
            "local", url) as (client, _):
        root = await client.send({"parts": [{"text": "hi"}]})
        rejected = await client.until(root, "Rejected")
        assert 0 < len(json.dumps(rejected)) < 10_000


async def test_a_huge_question_is_bounded_as_artifacts_are() -> None:
    def script(method: str, params: dict[str, Any]) -> Any:
        return task("t-1", "TASK_STATE_INPUT_REQUIRED", status={
            "state": "TASK_STATE_INPUT_REQUIRED", "message": {
                "messageId": "q", "role": "ROLE_AGENT", "parts": [{"text": "?" * 300_000}]}})

    hostile = Hostile(script)
    async with asyncio.timeout(30), hostile.served() as url, delegating(
            "local", url, max_artifact_bytes=100_000) as (client, _):
        root = await client.send({"parts": [{"text": "hi"}]})
        error = await client.until(root, "Failed")
        assert "100000 bytes" in error["error"]["error"]
        assert "InputRequired" not in client.names(root)


@pytest.mark.parametrize("task_id", ["", "t" * 100_000])
async def test_a_task_id_that_cannot_be_followed_fails_the_task(task_id: str) -> None:
    """A working task without an id cannot be asked about (tasks/get needs it), and one
    of 100 kB would go into the enactment: either fails the task at once, rather
    than leaving the Client waiting for ever."""
    hostile = Hostile(lambda method, params: task(task_id, "TASK_STATE_WORKING"))
    async with asyncio.timeout(30), hostile.served() as url, delegating(
            "local", url, poll_max=0.1) as (client, _):
        error = await failed(client)
        assert "task id" in error["error"]["error"], error
        assert len(json.dumps(error)) < 10_000
