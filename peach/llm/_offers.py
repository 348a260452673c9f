"""What the model is offered: the enabled actions an LLM agent may take now, as
tools, and the agent as ``strabo inspect`` shows it. Kept apart from
:mod:`peach.llm.agent`, which decides *when* to ask the model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from peach.adapter import PeachAdapter
from peach.feasible import FeasibleAction
from peach.inspection import MAX_LISTED, describe
from peach.llm.prompting import Offer, Redactor, tool_names
from peach.llm.report import AgentReport
from peach.llm.tools import Hooks


class _Offering:
    """Offers and inspection, mixed into :class:`peach.llm.LLMAgent` (which sets these)."""

    name: str
    adapters: list[PeachAdapter]
    hooks: Hooks
    tools: dict[str, Any]
    redactor: Redactor
    report: AgentReport
    goal: str
    provider: str
    model: str
    max_tools: int
    _several: bool
    _names: set[str]
    _mine: set[tuple[int, tuple[Any, ...]]]
    _reasons: list[str]
    _deciding: bool
    _waiting_for: set[str]
    _decision: int

    def _label(self, adapter: PeachAdapter, root: tuple[Any, ...]) -> str:
        raise NotImplementedError

    def offers(self) -> list[Offer]:
        """What the agent may do now, as tools (in a stable order): first in the
        enactments it is in, then in others open to it, then new enactments; at
        most ``max_tools``. In an enactment where another agent already plays the
        same role, only actions opening a scope of the agent's own are offered."""
        mine: list[tuple[PeachAdapter, FeasibleAction, str]] = []
        open_: list[tuple[PeachAdapter, FeasibleAction, str]] = []
        new: list[tuple[PeachAdapter, FeasibleAction, str]] = []
        for index, adapter in enumerate(self.adapters):
            coded = _coded(adapter)
            for root in adapter.enactments():
                enabled = [f for f in adapter.enabled(root) if f.name not in coded]
                if not enabled:
                    continue
                label = self._label(adapter, root)
                if (index, root) in self._mine:
                    mine.extend((adapter, feasible, label) for feasible in enabled)
                    continue
                # Another agent's enactment, unless it opens a scope of the agent's
                # own (a competing seller's quote, say).
                taken = self._taken(adapter, root)
                open_.extend(
                    (adapter, feasible, label)
                    for feasible in enabled
                    if feasible.new_keys or not taken
                )
            new.extend(
                (adapter, feasible, "new")
                for feasible in adapter.initiating()
                if feasible.name not in coded
            )
        found = [*mine, *open_][: max(self.max_tools - len(new), 0)] + new
        names = tool_names([(a, f) for a, f, _ in found], self._several)
        return [
            Offer(
                name,
                adapter,
                feasible,
                label,
                tuple(a for a in feasible.to_bind if a not in self.hooks.provided(feasible.name)),
            )
            for name, (adapter, feasible, label) in zip(names, found, strict=True)
        ]

    def inspect(self) -> dict[str, Any]:
        """The agent as ``strabo inspect`` shows it: each role (peach.inspection),
        and the decider's own state: model, goal, pending reasons to decide,
        what it waits for, tools, hooks and what the run has taken so far."""
        report = self.report
        return describe(
            self.name,
            self.adapters,
            {
                "decider": f"LLM ({self.provider}, {self.model})",
                "goal": self.redactor.text(self.goal),
                "status": report.status,
                "pending_decisions": self._reasons[-MAX_LISTED:],  # the latest
                "pending_count": len(self._reasons),
                "deciding": self._deciding,
                "waiting_for": sorted(self._waiting_for),
                "tools": sorted(self.tools),
                "hooks": sorted(self.hooks.actions),
                "counters": {
                    "decisions": self._decision,
                    "llm calls": report.llm_calls,
                    "failed calls": report.failed_calls,
                    "actions": report.actions,
                    "rejections": report.rejections,
                    "tokens": report.input_tokens + report.output_tokens,
                },
            },
        )

    def _taken(self, adapter: PeachAdapter, root: tuple[Any, ...]) -> bool:
        return any(
            instance.action.actor == adapter.role and who not in self._names
            for _, instance, who in adapter.history(root)
        )

    def _enactments(
        self, offers: Sequence[Offer]
    ) -> list[tuple[str, PeachAdapter, tuple[Any, ...]]]:
        """The enactments to show: those the agent is in, and any other where it may act."""
        shown: dict[str, tuple[str, PeachAdapter, tuple[Any, ...]]] = {}
        for index, root in sorted(self._mine, key=lambda m: self._label(self.adapters[m[0]], m[1])):
            adapter = self.adapters[index]
            shown[self._label(adapter, root)] = (self._label(adapter, root), adapter, root)
        for offer in offers:
            if offer.label != "new" and offer.label not in shown:
                root = offer.adapter.state.root_of(offer.feasible.keys)
                shown[offer.label] = (offer.label, offer.adapter, root)
        return sorted(shown.values(), key=lambda e: int(e[0][1:]))

def _coded(adapter: PeachAdapter) -> set[str]:
    """Actions the role's spec performs in code: not the model's to choose."""
    spec = adapter.spec
    return {n for n, a in spec.actions.items() if a.run is not None} if spec else set()
