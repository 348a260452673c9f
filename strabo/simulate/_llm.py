"""LLM agents in a scenario: a persona and a goal, handed to ``peach.llm.LLMAgent``.

Deliberately thin: the scenario's words become the agent's goal, its provider
and model settings go to the public constructor as they are, and everything
else (prompts, tools, retries, budgets) is ``peach.llm``'s (docs/llm-agents.md).
The adapter enforces the protocol, so an LLM seller can no more act out of turn
than a coded one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from peach import PeachAdapter
from strabo.simulate.scenario import AgentSpec, Scenario

if TYPE_CHECKING:
    from peach.llm import LLMAgent


def goal_of(spec: AgentSpec, name: str, scenario: Scenario,
            population: Mapping[str, Sequence[str]]) -> str:
    """The goal an LLM agent is given: who it is, what it wants, and the facts of
    the scenario a coded policy would get as a Move (its name, the round
    limit, who else plays)."""
    protocol = scenario.protocol
    parts = [f"You are {name}, playing {spec.role} in {protocol.name}."]
    if spec.persona:
        parts.append(spec.persona.strip())
    parts.append(f"Your goal: {(spec.goal or '').strip()}")
    others = "; ".join(f"{role}: {', '.join(names)}" for role, names in population.items())
    parts.append(f"Who plays what: {others}.")
    parts.append(
        f"Where a key names an agent (a seller, a buyer, a queue), act only where it names "
        f"you, {name}."
    )
    if scenario.rounds and scenario.rounds.limit:
        parts.append(f"The simulation runs {scenario.rounds.limit} rounds "
                     f"(key {scenario.rounds.key!r}).")
    return "\n\n".join(parts)


def llm_agent(spec: AgentSpec, adapter: PeachAdapter, scenario: Scenario,
              population: Mapping[str, Sequence[str]]) -> LLMAgent:
    """An LLMAgent for one agent of ``spec`` (it needs the provider's API key
    in the environment when it runs, not now)."""
    from peach.llm import Budget, LLMAgent

    settings: dict[str, Any] = {
        key: value
        for key, value in (("provider", spec.provider), ("model", spec.model),
                           ("base_url", spec.base_url))
        if value
    }
    if spec.max_calls:
        settings["budget"] = Budget(max_calls=spec.max_calls)
    goal = goal_of(spec, adapter.name, scenario, population)
    return LLMAgent([adapter], goal, name=adapter.name, **settings)
