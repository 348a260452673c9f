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

from peach.llm._model import Message, Model, ModelError, ModelTurn, ToolCall, ToolSpec, failure


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
                exc, (anthropic.APITimeoutError,), (anthropic.APIStatusError,)
            ) from exc
        return turn(response)


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


def turn(response: Any) -> ModelTurn:
    """A Messages API response as a :class:`ModelTurn`. Blocks other than text
    and tool use (thinking, server tools) are not the agent's business."""
    content = getattr(response, "content", None)
    if not isinstance(content, list):
        raise ModelError(f"the answer is not a Messages API message: {str(response)[:200]}")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text" and getattr(block, "text", ""):
            texts.append(block.text)
        elif kind == "tool_use":
            arguments = getattr(block, "input", None)
            if isinstance(arguments, dict):
                calls.append(ToolCall(block.id, block.name, dict(arguments)))
            else:
                calls.append(ToolCall(block.id, block.name, {},
                                      error="its input is not a JSON object"))
    usage = getattr(response, "usage", None)
    return ModelTurn(
        text="\n".join(texts),
        tool_calls=tuple(calls),
        input_tokens=getattr(usage, "input_tokens", 0) or 0,
        output_tokens=getattr(usage, "output_tokens", 0) or 0,
        stop_reason=getattr(response, "stop_reason", None),
    )
