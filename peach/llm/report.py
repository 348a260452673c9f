"""What an LLM agent's run leaves behind: a report, and a record of each decision."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from peach.llm._outcomes import Hide, Label, judge, success_names


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
    'stopped') and what it took; whether the goal was reached, judged on the
    protocols' log (``goal_reached``: None when no action was named as success),
    and the outcome in words (``outcome``: the terminal actions that occurred in
    the agent's enactments, or why there were none)."""

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
    goal_reached: bool | None = None
    outcome: str = ""
    success: tuple[str, ...] | None = None
    #: Rejected attempts by rule (``mandate``, ``nono``, ...), and the first
    #: message of each: why the run did not do what the model asked.
    rejected_by: dict[str, int] = field(default_factory=dict)
    first_rejection: dict[str, str] = field(default_factory=dict)

    def rejected(self, rule: str, message: str) -> None:
        """Count a rejected attempt (the model is told ``message`` too)."""
        self.rejections += 1
        self.rejected_by[rule] = self.rejected_by.get(rule, 0) + 1
        self.first_rejection.setdefault(rule, message)

    def expect(
        self, success: str | Iterable[str] | None, adapters: Sequence[Any]
    ) -> tuple[str, ...] | None:
        """Keep the actions that count as success, checked against the agent's
        protocols (ValueError for a name none of them has); returns them."""
        self.success = success_names(success, adapters)
        return self.success

    def judge(
        self,
        adapters: Sequence[Any],
        mine: Iterable[tuple[int, tuple[Any, ...]]],
        label: Label,
        hide: Hide | None = None,
    ) -> None:
        """Set ``goal_reached`` and ``outcome`` from the adapters' histories of the
        agent's enactments (``mine``), at the end of a run."""
        self.goal_reached, self.outcome = judge(adapters, mine, label, self.success, hide)

    @property
    def shortfall(self) -> str | None:
        """Why the run does not count as a success, on one line; None when it does.
        Not a success: a run that did not end as it should (budget, error,
        stopped), a goal not reached, and, when no success action was named, a
        run in which the agent performed no action (a model that calls done at
        once has achieved nothing the log can show)."""
        why = []
        if self.status not in ("done", "complete"):
            why.append(f"the run ended with {self.status}: {self.reason}")
        if self.goal_reached is False:
            wanted = " or ".join(self.success or ())
            why.append(f"goal not reached ({wanted} wanted): {self.outcome}")
        elif self.goal_reached is None and self.actions == 0:
            why.append("the agent performed no action")
            if self.status in ("done", "complete"):
                why[-1] += f" (the run ended with {self.status}: {self.reason})"
        return " ".join("; ".join(why).split()) or None

    @property
    def ok(self) -> bool:
        """The run counts as a success: see :attr:`shortfall`."""
        return self.shortfall is None

    def __str__(self) -> str:
        failed = f" (+{self.failed_calls} failed)" if self.failed_calls else ""
        rules = ", ".join(f"{n} {rule}" for rule, n in sorted(self.rejected_by.items()))
        text = (
            f"{self.status}: {self.reason} ({self.llm_calls} LLM calls{failed}, "
            f"{self.actions} actions, "
            f"{self.rejections} rejected{f' ({rules})' if rules else ''}, "
            f"{self.input_tokens + self.output_tokens} tokens, "
            f"{self.seconds:.1f} s)"
        )
        if self.goal_reached is True:
            return f"{text}; goal reached: {self.outcome}"
        if self.goal_reached is False:
            return f"{text}; goal NOT reached: {self.outcome}"
        return f"{text}; outcome: {self.outcome}" if self.outcome else text
