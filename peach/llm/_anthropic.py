"""Anthropic's Messages API as a :class:`~peach.llm._model.Model`.

The neutral conversation maps one to one: a user turn's tool results become
``tool_result`` blocks (``is_error`` for invalid calls and refusals), an
assistant turn becomes ``text`` and ``tool_use`` blocks, and ``tool_choice:
any`` makes the model call a tool. The SDK (``anthropic``, imported only when a
request is made) retries 429, 5xx (529 included) and timeouts itself; what still
fails comes back as a :class:`~peach.llm._model.ModelError`.
"""

from __future__ import annotations

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
    tokens,
)


class AnthropicModel(Model):
    provider = "anthropic"

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        max_tokens: int,
        request_timeout: float,
    ) -> ModelTurn:
        import anthropic

        try:
            async with self.bounded(request_timeout):
                response = await self.client.messages.create(
                    model=self.model,
                    max_tokens=max_tokens,
                    system=system,
                    messages=[wire_message(m) for m in messages],
                    tools=list(tools),
                    tool_choice={"type": "any"},
                    timeout=request_timeout,
                )
        except anthropic.AnthropicError as exc:
            raise failure(
                exc, (anthropic.APITimeoutError,), (anthropic.APIStatusError,), self
            ) from None  # the SDK's error may quote the key
        except ValueError as exc:  # a body that is not JSON, though it says it is
            raise self.not_json(exc) from None
        return self.turn(response)

    def turn(self, response: Any) -> ModelTurn:
        """A Messages API response as a :class:`ModelTurn`. Blocks other than text
        and tool use (thinking, server tools) are not the agent's business; ids
        left out or repeated, and missing usage, are read all the same."""
        content = getattr(response, "content", None)
        if not isinstance(content, list):
            raise self.unreadable(response, "a Messages API message")
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in content:
            kind = getattr(block, "type", None)
            if kind == "text" and isinstance(getattr(block, "text", None), str):
                if block.text:
                    texts.append(block.text)
            elif kind == "tool_use":
                call_id = string(getattr(block, "id", None))
                name = string(getattr(block, "name", None))
                arguments = getattr(block, "input", None)
                if isinstance(arguments, dict):
                    calls.append(ToolCall(call_id, name, dict(arguments)))
                else:
                    calls.append(ToolCall(call_id, name, {},
                                          error="its input is not a JSON object"))
        usage = getattr(response, "usage", None)
        stop = getattr(response, "stop_reason", None)
        return ModelTurn(
            text="\n".join(texts),
            tool_calls=read_calls(calls, self.where()),
            input_tokens=tokens(getattr(usage, "input_tokens", 0)),
            output_tokens=tokens(getattr(usage, "output_tokens", 0)),
            stop_reason=stop if isinstance(stop, str) else None,
        )


def wire_message(message: Message) -> dict[str, Any]:
    """A neutral message as a Messages API message param."""
    blocks: list[dict[str, Any]] = []
    if message.role == "assistant":
        if message.text:
            blocks.append({"type": "text", "text": message.text})
        blocks.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
            for c in message.tool_calls
        )
        return {"role": "assistant", "content": blocks}
    if not message.results:
        return {"role": "user", "content": message.text}
    blocks.extend(
        {
            "type": "tool_result",
            "tool_use_id": r.id,
            "content": r.content,
            **({"is_error": True} if r.error else {}),
        }
        for r in message.results
    )
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    return {"role": "user", "content": blocks}
