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

import asyncio
import contextlib
import math
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
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
    says which (the status code, 'timed out'), for the report and the fallback.
    ``permanent``: no later request will do better (401, 403, 404: a wrong key,
    base URL or model name), so asking again is pointless."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


# More tool calls than this in one answer is no model's decision (a model given
# max_tokens ~1000 writes a handful): a server that sends thousands is refused
# rather than carried out, call by call, and echoed back.
MAX_TOOL_CALLS = 64
# The most an SDK waits before one retry (both honour a retry-after up to 60 s).
RETRY_WAIT = 60.0


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

    def where(self) -> str:
        """The endpoint and model, for error messages: ``http://host/v1 (model 'm')``
        (never a password or query string of the URL)."""
        base = getattr(self.client, "base_url", None)
        return f"{safe_url(base) if base else self.provider} (model {self.model!r})"

    def deadline(self, request_timeout: float) -> float:
        """How long one request may take in all, its retries included. The SDKs'
        timeouts bound each read, so a server trickling its answer a byte at a
        time would otherwise hold the agent for ever."""
        retries = getattr(self.client, "max_retries", 0)
        retries = retries if isinstance(retries, int) and retries >= 0 else 0
        return request_timeout * (retries + 1) + RETRY_WAIT * retries + 1.0

    def secrets(self) -> tuple[str, ...]:
        """What an error message must never show: the client's API key or token
        (some servers echo it in a 401)."""
        keys = (getattr(self.client, "api_key", None), getattr(self.client, "auth_token", None))
        return tuple(k for k in keys if isinstance(k, str) and len(k) >= 4)

    @contextlib.asynccontextmanager
    async def bounded(self, request_timeout: float) -> AsyncIterator[None]:
        """The request within :meth:`deadline`; a server that answers too slowly
        is a :class:`ModelError`."""
        limit = self.deadline(request_timeout)
        try:
            async with asyncio.timeout(limit):
                yield
        except TimeoutError:
            raise ModelError(
                f"{self.where()} did not finish its answer within {limit:g} s "
                "(it sends it too slowly, or not at all)"
            ) from None

    def not_json(self, exc: ValueError) -> ModelError:
        """An answer whose body is not JSON (the SDK's own parser failed)."""
        return ModelError(
            f"the answer of {self.where()} is not JSON ({exc}): is the base URL that "
            "of the API?"[:500]
        )

    def unreadable(self, response: Any, expected: str) -> ModelError:
        """An answer the SDK parsed but that is not ``expected``; a stream answered
        to a request that asked for none says so."""
        text = response if isinstance(response, str) else repr(response)
        if isinstance(response, str) and response.lstrip().startswith(("data:", "event:")):
            return ModelError(
                f"{self.where()} answered with an event stream, though none was asked: "
                "the server seems to stream only, and the agent needs whole answers"
            )
        return ModelError(f"the answer of {self.where()} is not {expected}: {text[:200]}")


def safe_url(url: Any) -> str:
    """A URL without its user, password, query or fragment (which may hold keys)."""
    parts = urllib.parse.urlsplit(str(url))
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def tokens(value: Any) -> int:
    """A token count as the API reported it, or 0 when it is not one (absent,
    text, negative, not finite): a server cannot lower the budget used."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return max(int(value), 0)


def string(value: Any) -> str:
    """A field that must be text (an id, a name), or "" when it is not."""
    return value if isinstance(value, str) else ""


def text_of(value: Any) -> str:
    """The text of an answer: a string, or the text parts of a list of parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [
            part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
            for part in value
        ]
        return "\n".join(p for p in parts if isinstance(p, str) and p)
    return ""


def finite(value: Any) -> bool:
    """Whether a parsed JSON value holds no NaN or infinity (which Python's parser
    accepts, and no API takes back)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite(v) for v in value.values())
    if isinstance(value, list):
        return all(finite(v) for v in value)
    return True


def read_calls(calls: Sequence[ToolCall], where: str) -> tuple[ToolCall, ...]:
    """The calls of one answer with an id each, all different (the results name
    their calls by id: a server repeating an id, or leaving it out, would make
    the next request one the API refuses), and a name that is text."""
    if len(calls) > MAX_TOOL_CALLS:
        raise ModelError(
            f"the answer of {where} has {len(calls)} tool calls; more than "
            f"{MAX_TOOL_CALLS} in one answer are not carried out"
        )
    given = {c.id for c in calls if c.id}  # kept as sent, when not repeated
    seen: set[str] = set()
    found = []
    for number, call in enumerate(calls, 1):
        call_id = call.id or f"call_{number}"
        if call_id in seen or (not call.id and call_id in given):
            base, suffix = call_id, 2
            while f"{base}_{suffix}" in seen | given:
                suffix += 1
            call_id = f"{base}_{suffix}"
        seen.add(call_id)
        name = call.name or "?"
        arguments, error = call.arguments, call.error
        if error is None and not finite(arguments):
            arguments, error = {}, "its arguments hold NaN or Infinity, which is not JSON"
        found.append(ToolCall(call_id, name, arguments, error))
    return tuple(found)


def failure(
    exc: Exception,
    timeout_types: tuple[type[Exception], ...],
    status_types: tuple[type[Exception], ...],
    model: Model | None = None,
) -> ModelError:
    """An SDK exception as a :class:`ModelError` whose message says what failed,
    where and what to do: ``HTTP 401 (AuthenticationError) from http://host/v1
    (model 'm'): ...; check the API key``, ``the request timed out``, or the
    connection error with the URL (a local server not started, say), so that a
    report reads the same for every provider. The client's API key, should the
    server echo it, and a URL's password or query are never shown."""
    where = model.where() if model is not None else "the API"
    if isinstance(exc, timeout_types):
        message = f"the request to {where} timed out ({type(exc).__name__})"
    elif isinstance(exc, status_types):
        status = getattr(exc, "status_code", "?")
        body = getattr(exc, "body", None)
        detail = " ".join((_error_message(body) or str(exc)).split())[:300]
        hint = _hint(status, model.provider if model is not None else "")
        message = f"HTTP {status} ({type(exc).__name__}) from {where}: {detail}{hint}"
    else:
        url = getattr(getattr(exc, "request", None), "url", None)
        at = f" ({safe_url(url)})" if url else ""
        message = f"{type(exc).__name__}: {exc}{at}"
    for secret in model.secrets() if model is not None else ():
        message = message.replace(secret, "[secret]")
    permanent = getattr(exc, "status_code", None) in (401, 403, 404)
    return ModelError(message[:600], permanent=permanent)


def _hint(status: Any, provider: str) -> str:
    """What to check for an error no retry will mend."""
    if status in (401, 403):
        return "; check the API key (and that it may use this model)"
    if status == 404:
        ends = " (an OpenAI-compatible one ends in /v1)" if provider == "openai" else ""
        return f"; check the base URL{ends} and the model name"
    return ""


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
