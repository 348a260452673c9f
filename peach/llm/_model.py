"""The one interface the agent has to a language model, whatever its provider.

The agent's logic (when to decide, what to offer, how to check and carry out
calls) is written once against :class:`Model`; each provider (Anthropic's
Messages API, OpenAI-compatible Chat Completions) is a small translation of
these provider-neutral messages to its wire format and back. A conversation is a
list of :class:`Message`; an answer is a :class:`ModelTurn`: text, tool calls and
the tokens it took. What a provider cannot express (malformed tool arguments
from an OpenAI-compatible server, say) arrives as a :class:`ToolCall` with an
``error``, which the agent answers as an invalid call, never as a crash.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

ToolSpec = dict[str, Any]  # {"name", "description", "input_schema"}: provider-neutral


@dataclass(frozen=True)
class ToolCall:
    """One tool call of the model. ``error`` says why its arguments could not be
    read (not JSON, not an object); ``arguments`` is then empty."""

    id: str
    name: str
    arguments: dict[str, Any]
    error: str | None = None


@dataclass(frozen=True)
class ToolResult:
    """The answer to one :class:`ToolCall`; ``error`` for invalid calls and refusals."""

    id: str
    content: str
    error: bool = False


@dataclass(frozen=True)
class Message:
    """One turn of the conversation. A user turn carries text, tool results or
    both; an assistant turn, the model's text and tool calls (echoed back)."""

    role: Literal["user", "assistant"]
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()


@dataclass(frozen=True)
class ModelTurn:
    """What the model answered, and what it cost."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None

    def message(self) -> Message:
        return Message("assistant", text=self.text, tool_calls=self.tool_calls)


class ModelError(Exception):
    """The model could not answer: an HTTP error or a timeout after the SDK's own
    retries, or an answer that is not the API's format. The message is short and
    says which (the status code, 'timed out'), for the report and the fallback."""


class Model(ABC):
    """A chat model with native tool calling, behind one provider's SDK client.

    ``complete`` sends the whole conversation and must make the model call a tool
    (Anthropic's ``tool_choice: any``, OpenAI's ``required``): nothing is parsed
    from text. It raises :class:`ModelError` for every failure of the API.
    """

    provider: ClassVar[str]

    def __init__(self, client: Any, model: str) -> None:
        self.client = client
        self.model = model

    @abstractmethod
    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        max_tokens: int,
        request_timeout: float,
    ) -> ModelTurn:
        """One request: the model's answer to the conversation so far, within
        ``request_timeout`` seconds (each try, the SDK's retries included)."""


def failure(exc: Exception, timeout_types: tuple[type[Exception], ...],
            status_types: tuple[type[Exception], ...]) -> ModelError:
    """An SDK exception as a :class:`ModelError` whose message says what failed:
    ``HTTP 529 (OverloadedError): ...``, ``the request timed out``, or the
    connection error with the URL (a local server not started, say), so that a
    report reads the same for every provider."""
    if isinstance(exc, timeout_types):
        return ModelError(f"the request timed out ({type(exc).__name__})")
    if isinstance(exc, status_types):
        status = getattr(exc, "status_code", "?")
        body = getattr(exc, "body", None)
        detail = _error_message(body) or str(exc)
        return ModelError(f"HTTP {status} ({type(exc).__name__}): {detail}"[:500])
    url = getattr(getattr(exc, "request", None), "url", None)
    where = f" ({url})" if url else ""
    return ModelError(f"{type(exc).__name__}: {exc}{where}"[:500])


def _error_message(body: Any) -> str | None:
    """The human message in an API error body: ``{"error": {"message": ...}}``
    (both providers), or ``{"message": ...}``, or plain text."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    if isinstance(body, str) and body:
        return body
    return None
