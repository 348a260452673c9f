"""LLM agents that enact any Langshaw protocol, programming-free.

An :class:`LLMAgent` takes a goal in natural language and adapters for the roles
it plays; the protocols constrain it, a language model chooses among the enabled
actions and binds their attributes: Claude through the Anthropic API, or any
model behind an OpenAI-compatible Chat Completions endpoint (OpenAI, Ollama,
vLLM, llama.cpp's server), one of the ``PROVIDERS``.
"""

from peach.llm._base_url import check_base_url
from peach.llm._providers import PROVIDERS
from peach.llm.agent import DEFAULT_MODEL, LLMAgent
from peach.llm.report import AgentReport, DecisionRecord, LLMError
from peach.llm.tools import Budget, Hooks, Tool, tool

__all__ = [
    "DEFAULT_MODEL",
    "PROVIDERS",
    "AgentReport",
    "Budget",
    "DecisionRecord",
    "Hooks",
    "LLMAgent",
    "LLMError",
    "Tool",
    "check_base_url",
    "tool",
]
