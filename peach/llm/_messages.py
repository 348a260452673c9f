"""Shaping the messages exchanged with the model: tool results, echoes of its
own content, and the scrubbing of secrets from what is kept."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("strabo.llm")

class _Stop(Exception):
    """Ends the agent's run with a status and a reason."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _InvalidCall(Exception):
    """A tool call the agent cannot carry out as given (fed back to the model)."""


def _scrub_message(message: dict[str, Any], redactor: Any) -> dict[str, Any]:
    """A message with secrets replaced in its text and tool inputs only (never in
    roles, block types, ids or names, which the API needs intact)."""
    content = message["content"]
    if isinstance(content, str):
        return {**message, "content": redactor.text(content)}
    blocks = []
    for block in content:
        block = dict(block)
        if block.get("type") == "text":
            block["text"] = redactor.text(block["text"])
        elif block.get("type") == "tool_result" and isinstance(block.get("content"), str):
            block["content"] = redactor.text(block["content"])
        elif block.get("type") == "tool_use":
            block["input"] = redactor.scrub(block.get("input") or {})
        blocks.append(block)
    return {**message, "content": blocks}


def _tool_results(results: list[dict[str, Any]]) -> list[dict[str, Any]] | str:
    if not results:
        return "Answer with tool calls only: an action, wait, or done."
    return [
        {
            "type": "tool_result",
            "tool_use_id": r["id"],
            "content": r["content"],
            **({"is_error": True} if r["error"] else {}),
        }
        for r in results
    ]


def _echo(content: list[Any]) -> list[dict[str, Any]]:
    """The model's answer as message params, to send back with the tool results."""
    blocks = []
    for block in map(_block, content):
        if block.get("type") == "tool_use":
            blocks.append({k: block[k] for k in ("type", "id", "name", "input")})
        elif block.get("type") == "text" and block.get("text"):
            blocks.append({"type": "text", "text": block["text"]})
    return blocks


def _block(block: Any) -> dict[str, Any]:
    if isinstance(block, dict):
        return dict(block)
    if hasattr(block, "model_dump"):
        dumped: dict[str, Any] = block.model_dump(exclude_none=True)
        return dumped
    return {"type": getattr(block, "type", "unknown")}
