"""The Anthropic Messages API, mocked at the HTTP level with pytest-httpx.

Answers are recorded messages (tool_use blocks) in tests/fixtures/llm/*.json,
each with the situation it answers: the tools offered (``has``, ``lacks``) and
words in the prompt (``prompt_has``, ``system_has``). Each request gets the first
answer not used yet (or marked ``"reusable": true``) whose situation matches; a
request no answer fits gets an HTTP 400 and is kept in ``unanswered`` for the
test to show. An answer may also be ``{"error": status}`` (the API fails) or
``{"timeout": true}`` (the connection times out).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
from pytest_httpx import HTTPXMock

URL = "https://api.anthropic.com/v1/messages"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "llm"


def client() -> Any:
    import anthropic

    return anthropic.AsyncAnthropic(api_key="sk-test", max_retries=0)


def load(name: str) -> list[dict[str, Any]]:
    return json.loads((FIXTURES / f"{name}.json").read_text())["answers"]


class FakeModel:
    """Recorded answers, served to pytest-httpx (``install``) or to an
    ``httpx.MockTransport`` (``client``: for the evaluation harness offline)."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.used: set[int] = set()
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.unanswered: list[str] = []
        self._ids = itertools.count(1)

    def install(self, httpx_mock: HTTPXMock) -> FakeModel:
        httpx_mock.add_callback(self.respond, url=URL, is_reusable=True)
        return self

    def client(self) -> Any:
        import anthropic

        transport = httpx.MockTransport(self.respond)
        return anthropic.AsyncAnthropic(
            api_key="sk-test", max_retries=0, http_client=httpx.AsyncClient(transport=transport)
        )

    def respond(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.raw.append(request.content)
        self.requests.append(body)
        tools = {t["name"] for t in body.get("tools", [])}
        prompt = _text(body["messages"][-1]["content"])
        for index, answer in enumerate(self.answers):
            if index in self.used or not _fits(answer.get("when", {}), tools, prompt, body):
                continue
            if not answer.get("reusable"):
                self.used.add(index)
            if answer.get("timeout"):
                raise httpx.ReadTimeout("scripted timeout", request=request)
            if "error" in answer:
                return httpx.Response(answer["error"], json={"type": "error", "error": {
                    "type": "api_error", "message": "scripted failure"}})
            return httpx.Response(200, json=self.message(answer["content"], body["model"]))
        self.unanswered.append(prompt)
        return httpx.Response(400, json={"type": "error", "error": {
            "type": "invalid_request_error",
            "message": f"no scripted answer for tools {sorted(tools)}"}})

    def message(self, content: list[dict[str, Any]], model: str) -> dict[str, Any]:
        blocks = []
        for block in content:
            if block["type"] == "tool_use":
                block = {"id": f"toolu_{next(self._ids):03d}", **block}
            blocks.append(block)
        return {
            "id": f"msg_{next(self._ids):03d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1000, "output_tokens": 50},
        }

    def prompts(self) -> list[str]:
        return [_text(r["messages"][-1]["content"]) for r in self.requests]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(c.get("text") or c.get("content") or "") for c in content)


def _fits(when: dict[str, Any], tools: set[str], prompt: str, body: dict[str, Any]) -> bool:
    return (
        all(t in tools for t in when.get("has", []))
        and not any(t in tools for t in when.get("lacks", []))
        and all(w in prompt for w in when.get("prompt_has", []))
        and not any(w in prompt for w in when.get("prompt_lacks", []))
        and all(w in body.get("system", "") for w in when.get("system_has", []))
        and all(prompt.count(w) >= n for w, n in when.get("prompt_count", {}).items())
    )
