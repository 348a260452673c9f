"""LLM agents that enact any Langshaw protocol, programming-free.

An :class:`LLMAgent` takes a goal in natural language and adapters for the roles
it plays; the protocols constrain it, a language model (Claude, through the
Anthropic API) chooses among the enabled actions and binds their attributes.
"""

from peach.llm.agent import DEFAULT_MODEL, LLMAgent
from peach.llm.report import AgentReport, DecisionRecord, LLMError
from peach.llm.tools import Budget, Hooks, Tool, tool

__all__ = [
    "DEFAULT_MODEL",
    "AgentReport",
    "Budget",
    "DecisionRecord",
    "Hooks",
    "LLMAgent",
    "LLMError",
    "Tool",
    "tool",
]
