"""Each provider against a model server that misbehaves, on a real loopback port.

The scripted server of tests/peach/llm/fake.py answers like a well-behaved API; this
one answers what a broken proxy, a half-compatible local server or a hostile
endpoint may send: bodies that are not JSON, a stream though none was asked,
401/403/404 (echoing the key), answers of the wrong shape, tool calls with
repeated or missing ids and names, NaN arguments, thousands of calls, token
counts that are negative, text or huge, and an answer trickled a byte at a time.
Each must become a :class:`ModelError` that says what and where (the base URL
and the model, never the key), or be read soundly; the SDKs' own clients make
every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

# anthropic and openai are imported in the tests that use them: at the top, every
# pytest-xdist worker paid their import (1.3 s of CPU) at collection.
import pytest
import pytest_asyncio

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from peach.llm import PROVIDERS, Budget, LLMAgent
from peach.llm._anthropic import AnthropicModel
from peach.llm._model import MAX_TOOL_CALLS, Message, Model, ModelError
from peach.llm._openai import OpenAIModel
from strabo import serve
from syncserver import SyncServer
from syncserver.serving import free_port
from tests.conftest import PROTOCOLS

pytestmark = pytest.mark.asyncio(loop_scope="module")
BOTH = pytest.mark.parametrize("provider", PROVIDERS)
KEY = "sk-hostile-7QX2-secret"
TOOLS = [{"name": "RFQ", "description": "ask", "input_schema": {"type": "object"}}]


class Hostile:
    """An ASGI app answering each request with the next scripted raw answer (the
    last one for every request after it): ``(status, content type, body)``, or
    ``"trickle"`` (a byte every 50 ms, until the server stops). It records every
    request body."""

    def __init__(self) -> None:
        self.answers: list[Any] = []
        self.requests: list[dict[str, Any]] = []
        self.stopping = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.requests.append(json.loads(body))
        answer = self.answers[0] if len(self.answers) == 1 else self.answers.pop(0)
        if answer == "trickle":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            for _ in range(200):  # 10 s at most: far past any deadline of the tests
                if self.stopping.is_set():
                    break
                await send({"type": "http.response.body", "body": b" ", "more_body": True})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), 0.05)
            await send({"type": "http.response.body", "body": b"{}"})
            return
        status, kind, content = answer
        raw = content if isinstance(content, str) else json.dumps(content)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", kind.encode())]})
        await send({"type": "http.response.body", "body": raw.encode()})


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def server() -> AsyncIterator[tuple[Hostile, str]]:
    """One server for the module (starting one per test would double its time)."""
    app = Hostile()
    async with serve(app, timeout_graceful_shutdown=1) as url:
        try:
            yield app, url
        finally:
            app.stopping.set()


@pytest.fixture
def hostile(server: tuple[Hostile, str]) -> tuple[Hostile, str]:
    """The module's server, with no answer scripted and no request recorded."""
    app, url = server
    app.answers, app.requests = [], []
    return app, url


def model_for(provider: str, url: str, retries: int = 0, name: str = "tiny-model") -> Model:
    import anthropic
    import openai

    if provider == "openai":
        return OpenAIModel(openai.AsyncOpenAI(api_key=KEY, base_url=f"{url}/v1",
                                              max_retries=retries), name)
    return AnthropicModel(anthropic.AsyncAnthropic(api_key=KEY, base_url=url,
                                                   max_retries=retries), name)


async def ask(model: Model, request_timeout: float = 5.0) -> Any:
    async with asyncio.timeout(30):
        return await model.complete("system", [Message("user", text="hi")], TOOLS,
                                    max_tokens=64, request_timeout=request_timeout)


def completion(provider: str, calls: list[dict[str, Any]], usage: Any = None) -> dict[str, Any]:
    """An answer in the provider's format; ``calls`` as ``{"id", "name", "args"}``
    (each left out where absent), ``usage`` as (input, output) or absent."""
    if provider == "openai":
        tool_calls = [
            {**({"id": c["id"]} if "id" in c else {}), "type": "function",
             "function": {**({"name": c["name"]} if "name" in c else {}),
                          "arguments": c.get("args", "{}")}}
            for c in calls
        ]
        body: dict[str, Any] = {
            "id": "cmpl", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "tool_calls": tool_calls}}],
        }
        if usage is not None:
            body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
        return body
    blocks = [
        {"type": "tool_use", **({"id": c["id"]} if "id" in c else {}),
         **({"name": c["name"]} if "name" in c else {}),
         "input": json.loads(c.get("args", "{}"), parse_constant=float)}
        for c in calls
    ]
    body = {"id": "msg", "type": "message", "role": "assistant", "model": "m",
            "content": blocks, "stop_reason": "tool_use"}
    if usage is not None:
        body["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
    return body


def where(provider: str, url: str) -> str:
    return f"{url}/v1/ (model 'tiny-model')" if provider == "openai" else (
        f"{url} (model 'tiny-model')")


# Bodies that are not an answer ---------------------------------------------------------------

NO_ANSWERS = [  # (content type, body, what the error says)
    ("application/json", "this is not JSON", "is not JSON (Expecting value"),
    ("text/event-stream", 'data: {"type": "message_start"}\n\n',
     "answered with an event stream, though none was asked"),
    ("text/html", "<html>a login page</html>", "is not a"),
    ("application/json", "[1, 2]", "is not a"),
    ("application/json", {"id": "x", "object": "chat.completion", "choices": []}, "is not a"),
    ("application/json", {"id": "m", "type": "message", "content": None}, "is not a"),
]


@BOTH
async def test_a_body_that_is_no_answer_is_an_error_naming_the_endpoint(hostile, provider):
    app, url = hostile
    app.answers = [(200, kind, body) for kind, body, _ in NO_ANSWERS]
    model = model_for(provider, url)
    for kind, body, says in NO_ANSWERS:
        with pytest.raises(ModelError) as failed:
            await ask(model)
        assert says in str(failed.value), (kind, body, failed.value)
        assert where(provider, url) in str(failed.value)


# Errors no retry mends ---------------------------------------------------------------------------


@BOTH
async def test_401_403_404_say_where_and_what_to_check_without_the_key(hostile, provider):
    """Not retried (one request each, though the client may retry twice); the
    key the server echoes is not in the message."""
    app, url = hostile
    model = model_for(provider, url, retries=2)
    for status, hint in [(401, "check the API key"), (403, "check the API key"),
                         (404, "check the base URL")]:
        app.answers = [(status, "application/json",
                        {"type": "error", "error": {"type": "x", "message": f"bad key {KEY}"}})]
        app.requests.clear()
        with pytest.raises(ModelError) as failed:
            await ask(model)
        message = str(failed.value)
        assert message.startswith(f"HTTP {status} (")
        assert where(provider, url) in message and hint in message
        assert KEY not in message and "bad key [secret]" in message
        assert failed.value.permanent
        assert failed.value.__suppress_context__  # a traceback would show the SDK's error
        assert len(app.requests) == 1


@BOTH
async def test_a_stopped_run_names_the_endpoint_and_never_the_key(hostile, provider):
    """Through the agent: the reason of the run, its report and its log."""
    app, url = hostile
    app.answers = [(401, "application/json", {"error": {"message": f"who is {KEY}?"}})]
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    async with SyncServer.embedded([protocol], {"buyer": ["Buyer"]}) as server:
        buyer = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
        model = model_for(provider, url, retries=2)
        report = await LLMAgent([buyer], "buy a pen", client=model.client, model="tiny-model",
                                provider=provider, budget=Budget(max_seconds=30)).run()
    assert report.status == "error"
    assert where(provider, url) in report.reason and KEY not in report.reason
    assert len(app.requests) == 1


async def test_a_connection_error_shows_no_password_nor_query_of_the_url():
    import openai

    port = free_port()
    client = openai.AsyncOpenAI(api_key=KEY, max_retries=0,
                                base_url=f"http://user:pa55word@127.0.0.1:{port}/v1?key=Q-K3Y")
    with pytest.raises(ModelError) as failed:
        await ask(OpenAIModel(client, "tiny-model"))
    message = str(failed.value)
    assert f"(http://127.0.0.1:{port}/v1/" in message
    assert "pa55word" not in message and "Q-K3Y" not in message


# Tool calls a server gets wrong ----------------------------------------------------------------


@BOTH
async def test_tool_call_ids_repeated_or_left_out_are_made_unique(hostile, provider):
    app, url = hostile
    app.answers = [(200, "application/json", completion(provider, [
        {"id": "c1", "name": "RFQ"}, {"id": "c1", "name": "RFQ"}, {"name": "RFQ"},
        {"id": "call_3", "name": "RFQ"}, {"id": "c9"},
    ], usage=(10, 5)))]
    turn = await ask(model_for(provider, url))
    ids = [c.id for c in turn.tool_calls]
    assert len(set(ids)) == 5 and ids[0] == "c1" and ids[3] == "call_3"
    assert all(isinstance(i, str) and i for i in ids)
    assert turn.tool_calls[4].name == "?"  # no name: a call to no tool, answered so


@BOTH
async def test_the_agent_answers_each_of_repeated_ids_once(hostile, provider):
    """The model calls an unknown tool twice under one id: the next request
    echoes two calls with different ids, each answered by its own result."""
    app, url = hostile
    app.answers = [
        (200, "application/json", completion(provider, [
            {"id": "dup", "name": "nope"}, {"id": "dup", "name": "nope"}], usage=(10, 5))),
        (200, "application/json", completion(provider, [
            {"id": "end", "name": "done", "args": '{"summary": "gave up"}'}], usage=(10, 5))),
    ]
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    async with SyncServer.embedded([protocol], {"buyer": ["Buyer"]}) as server:
        buyer = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
        model = model_for(provider, url)
        report = await LLMAgent([buyer], "buy a pen", client=model.client, model="tiny-model",
                                provider=provider, budget=Budget(max_seconds=30)).run()
    assert report.status == "done", report
    second = app.requests[1]["messages"]
    if provider == "openai":
        echoed = [c["id"] for c in second[-3]["tool_calls"]]
        answered = [m["tool_call_id"] for m in second[-2:]]
    else:
        echoed = [b["id"] for b in second[-2]["content"] if b["type"] == "tool_use"]
        answered = [b["tool_use_id"] for b in second[-1]["content"]]
    assert echoed == answered and len(set(echoed)) == 2


@BOTH
async def test_nan_arguments_are_an_invalid_call_not_a_crash(hostile, provider):
    app, url = hostile
    app.answers = [(200, "application/json", completion(provider, [
        {"id": "c1", "name": "RFQ", "args": '{"budget": NaN}'}], usage=(10, 5)))]
    [call] = (await ask(model_for(provider, url))).tool_calls
    assert call.arguments == {} and "NaN" in (call.error or "")


@BOTH
async def test_thousands_of_tool_calls_are_refused(hostile, provider):
    app, url = hostile
    calls = [{"id": f"c{i}", "name": "RFQ"} for i in range(MAX_TOOL_CALLS * 50)]
    app.answers = [(200, "application/json", completion(provider, calls, usage=(10, 5)))]
    with pytest.raises(ModelError, match=f"has {MAX_TOOL_CALLS * 50} tool calls"):
        await ask(model_for(provider, url))


@BOTH
async def test_token_counts_a_server_cannot_use_to_dodge_the_budget(hostile, provider):
    app, url = hostile
    cases = [(None, (0, 0)), ((-1000, -5), (0, 0)), (("lots", 1.5), (0, 1)),
             ((10**15, 7), (10**15, 7))]
    app.answers = [
        (200, "application/json", completion(provider, [{"id": "c1", "name": "RFQ"}], usage))
        for usage, _ in cases
    ]
    model = model_for(provider, url)
    for usage, counted in cases:
        turn = await ask(model)
        assert (turn.input_tokens, turn.output_tokens) == counted, usage


@BOTH
async def test_a_huge_token_count_ends_the_run_on_its_budget(hostile, provider):
    app, url = hostile
    app.answers = [(200, "application/json", completion(
        provider, [{"id": "c1", "name": "nope"}], usage=(10**15, 1)))]
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    async with SyncServer.embedded([protocol], {"buyer": ["Buyer"]}) as server:
        buyer = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
        model = model_for(provider, url)
        report = await LLMAgent([buyer], "buy a pen", client=model.client, model="tiny-model",
                                provider=provider, budget=Budget(max_seconds=30)).run()
    assert report.status == "budget" and "token budget" in report.reason
    assert len(app.requests) == 1


# A server too slow to finish -----------------------------------------------------------------


@BOTH
async def test_an_answer_trickled_a_byte_at_a_time_is_cut_at_the_deadline(hostile, provider):
    """The SDKs' timeouts bound each read; a server sending a byte every 50 ms
    would hold a request for ever without the deadline on the whole. (Each read
    may take 1 s, twenty bytes' time: on a busy machine a read of 0.2 s timed
    out by itself, before the deadline.)"""
    app, url = hostile
    app.answers = ["trickle"]
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"did not finish its answer within 2 s"):
        await ask(model_for(provider, url), request_timeout=1.0)
    assert time.monotonic() - started < 5


async def test_after_a_permanent_failure_later_decisions_go_to_the_fallback_unasked(hostile):
    """A wrong key stays wrong: the model is not asked again, the fallback decides."""
    app, url = hostile
    app.answers = [(401, "application/json", {"error": {"message": "no such key"}})]
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    reasons: list[str] = []

    async def fallback(agent: LLMAgent, reason: str) -> None:
        reasons.append(reason)
        if len(reasons) == 1:
            await agent.inject("the user asks again")
        else:
            agent.stop("seen enough")

    async with SyncServer.embedded([protocol], {"buyer": ["Buyer"]}) as server:
        buyer = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
        model = model_for("anthropic", url, retries=0)
        report = await LLMAgent([buyer], "buy a pen", client=model.client, model="tiny-model",
                                fallback=fallback, budget=Budget(max_seconds=30)).run()
    assert len(reasons) == 2 and reasons[0] == reasons[1] and "401" in reasons[0]
    assert len(app.requests) == 1
    assert report.status == "stopped" and report.failed_calls == 1


async def test_tools_that_would_shadow_actions_or_that_apis_refuse_are_refused() -> None:
    from peach.llm import tool

    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    async with SyncServer.embedded([protocol], {"buyer": ["Buyer"]}) as server:
        buyer = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
        for name in ("RFQ", "Accept_2"):
            shadow = tool(name, "looks like an action")(lambda: None)
            with pytest.raises(ValueError, match=f"local tool names \\['{name}'\\] are those"):
                LLMAgent([buyer], "buy a pen", model="m", tools=[shadow])
        LLMAgent([buyer], "buy a pen", model="m", tools=[tool("RFQ_x", "fine")(lambda: None)])
    with pytest.raises(ValueError, match="letters, digits"):
        tool("café", "not ASCII")(lambda: None)
