"""Simulations of multiagent interaction patterns: ``strabo simulate``.

A scenario (TOML, :mod:`strabo.simulate.scenario`) names a Langshaw protocol,
the agents that play it (coded policies, :mod:`strabo.simulate.move`, or LLM
agents with a persona and a goal), how rounds are counted and when to stop.
:func:`simulate` runs it on an embedded SyncServer; :func:`write_report` writes
the trace, the per-round outcomes table and a chart. The pattern protocols and
their scenarios are in ``protocols/patterns/``; docs/patterns.md explains them.
"""

from strabo.simulate.move import Move, Occurrence, Policy
from strabo.simulate.report import write_report
from strabo.simulate.runner import ENDINGS, SimulationResult, simulate
from strabo.simulate.scenario import (
    AgentSpec,
    Scenario,
    ScenarioError,
    bundled_scenario,
    load_scenario,
    parse_scenario,
)

__all__ = [
    "ENDINGS",
    "AgentSpec",
    "Move",
    "Occurrence",
    "Policy",
    "Scenario",
    "ScenarioError",
    "SimulationResult",
    "bundled_scenario",
    "load_scenario",
    "parse_scenario",
    "simulate",
    "write_report",
]
