"""Scripted model APIs on a real local HTTP server, in either provider's wire format.

A :class:`FakeModel` serves Anthropic's Messages API (``POST /v1/messages``) and
OpenAI's Chat Completions (``POST /v1/chat/completions``) with uvicorn on a free
loopback port, so the SDKs' own transports, retries and timeouts are exercised,
not mocked. Answers are scripted in tests/fixtures/llm/*.json as Anthropic
content blocks (``text``, ``tool_use``); the OpenAI route sends the same answer
as an assistant message with ``tool_calls``. Each answer names the situation it
answers: the tools offered (``has``, ``lacks``) and words in the prompt
(``prompt_has``, ``prompt_lacks``, ``prompt_count``, ``system_has``). Each
request gets the first answer not used yet (or marked ``"reusable": true``) whose
situation matches; a request no answer fits gets an HTTP 400 and is kept in
``unanswered`` for the test to show.

An answer may also be ``{"error": status}`` (the API fails with that status;
``retry-after-ms: 1`` lets an SDK that retries do so at once) or ``{"timeout":
true}`` (no answer until the server stops: the client's timeout fires). A
``tool_use`` block may carry ``raw_input`` (text sent as the call's arguments as
is, for malformed JSON) instead of ``input``.

``requests`` holds each request in a neutral shape (``system``, ``tools`` as
name/description/input_schema, ``prompt``: the text after the model's last turn,
``results``: the tool results sent, ``error`` flagged) so that one assertion
reads the same for both providers; ``bodies``, ``raw`` and ``headers`` hold what
was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from strabo import serve

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llm"
PROVIDERS = ("anthropic", "openai")
ERROR_TYPES = {429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


def load(name: str) -> list[dict[str, Any]]:
    return json.loads((FIXTURES / f"{name}.json").read_text())["answers"]


class FakeModel:
    """Scripted answers behind a real HTTP server: ``async with fake.serving():``."""

    def __init__(self, answers: list[dict[str, Any]], provider: str = "anthropic") -> None:
        if provider not in PROVIDERS:
            raise ValueError(provider)
        self.provider = provider
        self.answers = answers
        self.used: set[int] = set()
        self.requests: list[dict[str, Any]] = []
        self.bodies: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.unanswered: list[str] = []
        self.url = ""
        self._ids = itertools.count(1)
        self._release: asyncio.Event | None = None

    def script(self, name: str) -> FakeModel:
        self.answers = load(name)
        return self

    # The server ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[FakeModel]:
        self._release = asyncio.Event()
        app = Starlette(routes=[
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
        ])
        async with serve(app) as url:
            self.url = url
            try:
                yield self
            finally:
                self._release.set()  # a request held to time out ends, so the server can stop

    def client(self, retries: int = 0) -> Any:
        """An SDK client of the fake's provider, pointed at it."""
        if self.provider == "openai":
            import openai

            return openai.AsyncOpenAI(
                api_key="sk-test", base_url=f"{self.url}/v1", max_retries=retries
            )
        import anthropic

        return anthropic.AsyncAnthropic(api_key="sk-test", base_url=self.url, max_retries=retries)

    async def _messages(self, request: Request) -> JSONResponse:
        body = await self._receive(request, _anthropic_view)
        return await self._answer(body, self._anthropic_message, _anthropic_error)

    async def _chat(self, request: Request) -> JSONResponse:
        body = await self._receive(request, _openai_view)
        return await self._answer(body, self._chat_completion, _openai_error)

    async def _receive(self, request: Request, view: Any) -> dict[str, Any]:
        raw = await request.body()
        body: dict[str, Any] = json.loads(raw)
        self.raw.append(raw)
        self.headers.append(dict(request.headers))
        self.bodies.append(body)
        self.requests.append(view(body))
        return body

    async def _answer(self, body: dict[str, Any], message: Any, error: Any) -> JSONResponse:
        seen = self.requests[-1]
        for index, answer in enumerate(self.answers):
            if index in self.used or not _fits(answer.get("when", {}), seen):
                continue
            if not answer.get("reusable"):
                self.used.add(index)
            if answer.get("timeout"):
                assert self._release is not None
                await self._release.wait()
                return JSONResponse({}, status_code=504)
            if "error" in answer:
                status = answer["error"]
                return JSONResponse(error(status, "scripted failure"), status_code=status,
                                    headers={"retry-after-ms": "1"})
            return JSONResponse(message(answer["content"], body["model"]))
        self.unanswered.append(seen["prompt"])
        tools = sorted(t["name"] for t in seen["tools"])
        return JSONResponse(error(400, f"no scripted answer for tools {tools}"), status_code=400)

    # Answers in each wire format -------------------------------------------------------

    def _anthropic_message(self, content: list[dict[str, Any]], model: str) -> dict[str, Any]:
        blocks = []
        for block in content:
            if block["type"] == "tool_use":
                block = {"id": f"toolu_{next(self._ids):03d}", **block}
                if "raw_input" in block:
                    block["input"] = block.pop("raw_input")
            blocks.append(block)
        calls = any(b["type"] == "tool_use" for b in blocks)
        return {
            "id": f"msg_{next(self._ids):03d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1000, "output_tokens": 50},
        }

    def _chat_completion(self, content: list[dict[str, Any]], model: str) -> dict[str, Any]:
        text = "\n".join(b["text"] for b in content if b["type"] == "text")
        calls = [
            {
                "id": f"call_{next(self._ids):03d}",
                "type": "function",
                "function": {
                    "name": b["name"],
                    "arguments": b["raw_input"] if "raw_input" in b else json.dumps(b["input"]),
                },
            }
            for b in content
            if b["type"] == "tool_use"
        ]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": f"chatcmpl-{next(self._ids):03d}",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050},
        }

    def prompts(self) -> list[str]:
        return [r["prompt"] for r in self.requests]


def _anthropic_error(status: int, message: str) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _openai_error(status: int, message: str) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# Requests in a neutral shape ---------------------------------------------------------------


def _anthropic_view(body: dict[str, Any]) -> dict[str, Any]:
    content = body["messages"][-1]["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return {
        "system": body.get("system", ""),
        "tools": body.get("tools", []),
        "prompt": "\n".join(str(b.get("text") or b.get("content") or "") for b in blocks),
        "results": [
            {"id": b["tool_use_id"], "content": b["content"], "error": bool(b.get("is_error"))}
            for b in blocks
            if b.get("type") == "tool_result"
        ],
        "messages": len(body["messages"]),
    }


def _openai_view(body: dict[str, Any]) -> dict[str, Any]:
    messages = body["messages"]
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=0)
    after = messages[last + 1:]
    results = []
    for m in after:
        if m["role"] == "tool":
            error = m["content"].startswith("error: ")
            content = m["content"].removeprefix("error: ")
            results.append({"id": m["tool_call_id"], "content": content, "error": error})
    return {
        "system": next((m["content"] for m in messages if m["role"] == "system"), ""),
        "tools": [
            {"name": t["function"]["name"], "description": t["function"].get("description", ""),
             "input_schema": t["function"].get("parameters", {})}
            for t in body.get("tools", [])
        ],
        "prompt": "\n".join(str(m.get("content") or "") for m in after),
        "results": results,
        "messages": len(messages),
    }


def _fits(when: dict[str, Any], seen: dict[str, Any]) -> bool:
    tools = {t["name"] for t in seen["tools"]}
    prompt = seen["prompt"]
    return (
        all(t in tools for t in when.get("has", []))
        and not any(t in tools for t in when.get("lacks", []))
        and all(w in prompt for w in when.get("prompt_has", []))
        and not any(w in prompt for w in when.get("prompt_lacks", []))
        and all(w in seen["system"] for w in when.get("system_has", []))
        and all(prompt.count(w) >= n for w, n in when.get("prompt_count", {}).items())
    )
