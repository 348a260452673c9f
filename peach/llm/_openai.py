"""OpenAI-compatible Chat Completions as a :class:`~peach.llm._model.Model`.

One implementation for OpenAI itself and for the servers that speak its wire
format (Ollama, vLLM, llama.cpp's server, LM Studio...), through the ``openai``
SDK pointed at their base URL. The neutral conversation maps to a ``system``
message, ``assistant`` messages with ``tool_calls``, one ``tool`` message per
result (an error is marked in its text: the format has no flag for it), and
``tool_choice: required``. Tool arguments arrive as text: text that is not a JSON
object becomes a :class:`~peach.llm._model.ToolCall` with an ``error``, which the
agent returns to the model like any invalid call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from peach.llm._model import (
    Message,
    Model,
    ModelTurn,
    ToolCall,
    ToolSpec,
    failure,
    read_calls,
    string,
    text_of,
    tokens,
)


class OpenAIModel(Model):
    provider = "openai"

    def __init__(self, client: Any, model: str) -> None:
        super().__init__(client, model)
        # OpenAI's own API wants max_completion_tokens (its reasoning models refuse
        # max_tokens); the compatible servers all take max_tokens, not all the other.
        host = str(getattr(getattr(client, "base_url", None), "host", "") or "")
        self._limit = "max_completion_tokens" if host.endswith("openai.com") else "max_tokens"

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        max_tokens: int,
        request_timeout: float,
    ) -> ModelTurn:
        import openai

        wire: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for message in messages:
            wire.extend(wire_messages(message))
        try:
            async with self.bounded(request_timeout):
                response = await self.client.chat.completions.create(
                    model=self.model,
                    messages=wire,
                    tools=[wire_tool(t) for t in tools],
                    tool_choice="required",
                    timeout=request_timeout,
                    **{self._limit: max_tokens},
                )
        except openai.OpenAIError as exc:
            raise failure(
                exc, (openai.APITimeoutError,), (openai.APIStatusError,), self
            ) from None  # the SDK's error may quote the key
        except ValueError as exc:  # a body that is not JSON, though it says it is
            raise self.not_json(exc) from None
        return self.turn(response)

    def turn(self, response: Any) -> ModelTurn:
        """A chat completion as a :class:`ModelTurn` (its first choice). Servers
        that leave out ids, repeat them, or send no usage are read all the same."""
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            if isinstance(response, str) or choices is None:
                raise self.unreadable(response, "a chat completion")
            raise self.unreadable(response, "a chat completion with choices")
        choice = choices[0]
        message = getattr(choice, "message", None)
        raw = getattr(message, "tool_calls", None)
        calls = read_calls(
            [_call(c) for c in raw] if isinstance(raw, list) else [], self.where()
        )
        usage = getattr(response, "usage", None)
        stop = getattr(choice, "finish_reason", None)
        return ModelTurn(
            text=text_of(getattr(message, "content", None)),
            tool_calls=calls,
            input_tokens=tokens(getattr(usage, "prompt_tokens", 0)),
            output_tokens=tokens(getattr(usage, "completion_tokens", 0)),
            stop_reason=stop if isinstance(stop, str) else None,
        )


def _call(call: Any) -> ToolCall:
    """One tool call as sent; its id and name are made sound by ``read_calls``."""
    call_id = string(getattr(call, "id", None))
    function = getattr(call, "function", None)
    if function is None:
        kind = getattr(call, "type", "unknown")
        return ToolCall(call_id, "?", {}, error=f"a tool call of type {kind!r} is not supported")
    name = string(getattr(function, "name", None))
    return ToolCall(call_id, name, *arguments(getattr(function, "arguments", None)))


def arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """The arguments of a tool call, or ``({}, why not)``."""
    if isinstance(raw, dict):  # a server that sends an object where text is due
        return dict(raw), None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None  # no arguments at all: a tool that takes none
    if not isinstance(raw, str):
        return {}, f"its arguments are not a JSON object: {str(raw)[:100]}"
    try:
        parsed = json.loads(raw, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        return {}, f"its arguments are not valid JSON ({exc.msg} at character {exc.pos})"
    except ValueError as exc:
        return {}, f"its arguments are not valid JSON ({exc})"
    if not isinstance(parsed, dict):
        return {}, f"its arguments are not a JSON object but {type(parsed).__name__} {raw[:100]}"
    return parsed, None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def wire_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool["description"],
            "parameters": tool["input_schema"],
        },
    }


def wire_messages(message: Message) -> list[dict[str, Any]]:
    """A neutral message as Chat Completions messages (one per tool result)."""
    if message.role == "assistant":
        wire: dict[str, Any] = {"role": "assistant", "content": message.text}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in message.tool_calls
            ]
        return [wire]
    found: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": r.id,
            "content": f"error: {r.content}" if r.error else r.content,
        }
        for r in message.results
    ]
    if message.text or not message.results:
        found.append({"role": "user", "content": message.text})
    return found
