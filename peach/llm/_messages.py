"""Shaping the conversation with the model: tool results as a message, the
scrubbing of secrets from what is sent, and the shape the transcript keeps.

Everything here is provider-neutral (:mod:`peach.llm._model`): each provider
translates the result to its own wire format, so a secret scrubbed here is
scrubbed for every provider.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from peach.llm._model import Message, ModelTurn, ToolResult

log = logging.getLogger("strabo.llm")

# Sent when an answer called no tool (text only): nothing is parsed from text.
NUDGE = "Answer with tool calls only: an action, wait, or done."


class _Stop(Exception):
    """Ends the agent's run with a status and a reason."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _InvalidCall(Exception):
    """A tool call the agent cannot carry out as given (fed back to the model)."""


def hide(redactor: Any, value: Any) -> None:
    """Make ``value`` a secret of ``redactor``: the agent's own code supplied it
    (a hook). The redactor scrubs it in the forms a server may echo it in too
    (URL-encoded, JSON-escaped, base64: :func:`peach.llm._redact.forms`)."""
    redactor.add_value(value)


def _scrub_message(message: Message, redactor: Any) -> Message:
    """A message with secrets replaced in its text, tool arguments and results
    (never in roles, ids or tool names, which the API needs intact)."""
    return replace(
        message,
        text=redactor.text(message.text),
        tool_calls=tuple(
            replace(c, arguments={k: redactor.scrub(v) for k, v in c.arguments.items()})
            for c in message.tool_calls
        ),
        results=tuple(replace(r, content=redactor.text(r.content)) for r in message.results),
    )


def _results_message(results: list[dict[str, Any]]) -> Message:
    """The answers to the model's tool calls, or the nudge when it called none."""
    if not results:
        return Message("user", text=NUDGE)
    return Message(
        "user", results=tuple(ToolResult(r["id"], r["content"], r["error"]) for r in results)
    )


def _shown_message(message: Message) -> Any:
    """What the transcript keeps of a message sent: its text, or its results."""
    if not message.results:
        return message.text
    shown: list[dict[str, Any]] = [
        {
            "type": "tool_result",
            "tool_use_id": r.id,
            "content": r.content,
            **({"is_error": True} if r.error else {}),
        }
        for r in message.results
    ]
    if message.text:
        shown.append({"type": "text", "text": message.text})
    return shown


def _shown_turn(turn: ModelTurn, redactor: Any) -> list[dict[str, Any]]:
    """What the transcript keeps of an answer, in the same shape for every
    provider: a text block, then one ``tool_use`` block per call (secret
    attributes replaced; an unreadable call with its ``error``)."""
    blocks: list[dict[str, Any]] = []
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    for call in turn.tool_calls:
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": redactor.bindings(call.arguments),
        }
        if call.error:
            block["error"] = call.error
        blocks.append(block)
    return blocks
