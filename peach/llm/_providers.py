"""Which provider a model is reached through, and the SDK client to reach it.

The provider is named (``provider="openai"``) or read from the client given: an
``anthropic.AsyncAnthropic`` means Anthropic, an ``openai.AsyncOpenAI`` means
OpenAI-compatible. Without a client one is made from the environment, so that
the key never has to pass through code: ``ANTHROPIC_API_KEY`` (or the SDK's
``ANTHROPIC_AUTH_TOKEN``), or ``OPENAI_API_KEY``, which a local server (given by
its base URL) does not need.
"""

from __future__ import annotations

import os
from typing import Any

from peach.llm._model import Model
from peach.llm.report import LLMError

PROVIDERS = ("anthropic", "openai")
DEFAULT_MODEL = "claude-sonnet-4-6"
# The OpenAI SDK refuses to start without a key; local servers ignore it.
PLACEHOLDER_KEY = "not-needed"


def provider_of(client: Any, provider: str | None) -> str:
    """The provider named, or the one the client belongs to: its SDK, or what it
    has (``chat.completions.create`` alone: OpenAI); Anthropic by default."""
    if provider is not None and provider not in PROVIDERS:
        raise ValueError(f"provider {provider!r}: use one of {', '.join(PROVIDERS)}")
    found: str | None = None
    if isinstance(client, Model):
        found = client.provider
    elif client is not None:
        package = type(client).__module__.partition(".")[0]
        found = package if package in PROVIDERS else None
        if found is None and not _has(client, "messages", "create") and _has(
            client, "chat", "completions", "create"
        ):
            found = "openai"  # another SDK's client (a gateway's): known by what it has
    if provider is not None and found is not None and found != provider:
        raise ValueError(f"the client is an {found} client, but provider={provider!r}")
    return provider or found or "anthropic"


def _has(client: Any, *path: str) -> bool:
    for name in path:
        client = getattr(client, name, None)
        if client is None:
            return False
    return callable(client)


def default_model(provider: str, model: str | None) -> str:
    """The model to ask for; OpenAI-compatible servers have no common default."""
    if model:
        return model
    if provider == "anthropic":
        return DEFAULT_MODEL
    raise ValueError(
        "provider 'openai' needs a model: the name the endpoint serves "
        "(e.g. model='llama3.1' for Ollama)"
    )


def missing_key(provider: str, base_url: str | None) -> str | None:
    """Why no client can be made from the environment, or None when one can."""
    anthropic_key = os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
    if provider == "anthropic" and not anthropic_key:
        return (
            "no Anthropic API key: set ANTHROPIC_API_KEY to the key the agent should use "
            "(https://console.anthropic.com/settings/keys)"
        )
    if provider == "openai" and not (
        os.environ.get("OPENAI_API_KEY") or base_url or os.environ.get("OPENAI_BASE_URL")
    ):
        return (
            "no OpenAI API key: set OPENAI_API_KEY, or give the base URL of an "
            "OpenAI-compatible server that needs none (e.g. http://127.0.0.1:11434/v1 "
            "for Ollama)"
        )
    return None


def connect(
    provider: str,
    client: Any,
    model: str,
    *,
    base_url: str | None,
    timeout: float,
    retries: int,
) -> Model:
    """The :class:`Model` for ``client`` (made from the environment when None).
    ``retries`` is the SDK's own retry count for 429, 5xx and timeouts."""
    if isinstance(client, Model):
        return client
    if client is None:
        problem = missing_key(provider, base_url)
        if problem:
            raise LLMError(problem + " (or pass client=...)")
        client = _client(provider, base_url, timeout, retries)
    if provider == "openai":
        from peach.llm._openai import OpenAIModel

        return OpenAIModel(client, model)
    from peach.llm._anthropic import AnthropicModel

    return AnthropicModel(client, model)


def _client(provider: str, base_url: str | None, timeout: float, retries: int) -> Any:
    if provider == "openai":
        import openai

        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        return openai.AsyncOpenAI(
            api_key=os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_KEY,
            base_url=base_url,
            timeout=timeout,
            max_retries=retries,
        )
    import anthropic

    return anthropic.AsyncAnthropic(base_url=base_url, timeout=timeout, max_retries=retries)
