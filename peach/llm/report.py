"""What an LLM agent's run leaves behind: a report, and a record of each decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class LLMError(Exception):
    """The model could not be used (no key, API failures) and there is no fallback."""


@dataclass
class DecisionRecord:
    """One decision and what it did. ``kind`` is 'llm' (the model decided),
    'fallback' (the coded policy did, after the model failed) or 'hook' (before
    hooks ran on an action); ``number`` is the decision it belongs to."""

    number: int
    kind: str
    reasons: list[str]
    calls: int = 0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)


@dataclass
class AgentReport:
    """How a run ended (``status``: 'done', 'complete', 'budget', 'error',
    'stopped') and what it took."""

    status: str
    reason: str
    llm_calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    actions: int = 0
    rejections: int = 0
    seconds: float = 0.0
    decisions: list[DecisionRecord] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in ("done", "complete")

    def __str__(self) -> str:
        failed = f" (+{self.failed_calls} failed)" if self.failed_calls else ""
        return (
            f"{self.status}: {self.reason} ({self.llm_calls} LLM calls{failed}, "
            f"{self.actions} actions, "
            f"{self.rejections} rejected, {self.input_tokens + self.output_tokens} tokens, "
            f"{self.seconds:.1f} s)"
        )
