"""What an LLM agent can use besides protocol actions: local tools, hooks, a budget.

Local tools are plain Python callables the model may call; their results come
back to it within the same decision. Hooks run around protocol actions, outside
the model: a ``before`` hook may supply attributes (credentials, say) that the
model then never sees, and an ``after`` hook sees every outcome.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

JSONSchema = dict[str, Any]
# What both model APIs accept as a tool name (ASCII only: str.isalnum would let
# "café" through, which they refuse).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class Tool:
    """A local tool: ``fn(**input)`` (sync or async) returns a JSON-able result.

    ``runs_hooks``: the tool runs the hooks named after it itself (an MCP tool
    from :mod:`peach.mcp` does), so an agent accepts hooks of that name.
    """

    name: str
    description: str
    input_schema: JSONSchema
    fn: Callable[..., Any]
    runs_hooks: bool = False

    def __post_init__(self) -> None:
        if not _TOOL_NAME.fullmatch(self.name):
            raise ValueError(
                f"tool name {self.name!r}: letters, digits, '_' and '-' only, 64 at most"
            )
        if self.input_schema.get("type") != "object":
            raise ValueError(
                f"tool {self.name!r}: input_schema must be a JSON schema of type object"
            )

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        result = self.fn(**arguments)
        if inspect.isawaitable(result):
            result = await result
        return result


def tool(
    name: str, description: str, input_schema: JSONSchema | None = None
) -> Callable[[Callable[..., Any]], Tool]:
    """Decorator: ``@tool("inventory", "What is in stock", schema)``."""

    def wrap(fn: Callable[..., Any]) -> Tool:
        return Tool(name, description, input_schema or {"type": "object", "properties": {}}, fn)

    return wrap


BeforeHook = Callable[[dict[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]]
AfterHook = Callable[[Any, str | None], Any]


@dataclass
class _ActionHooks:
    before: list[tuple[BeforeHook, tuple[str, ...]]] = field(default_factory=list)
    after: list[AfterHook] = field(default_factory=list)


class Hooks:
    """Hooks by action name (a typo is caught when the agent starts).

    ``@hooks.before("Complete", provides=["payment_data"])`` runs just before each
    attempt of Complete with the bindings the model chose, and returns them
    transformed; the attributes it ``provides`` are left out of what the model is
    asked for, and their values are secrets (never shown in a prompt or log).
    ``@hooks.after("Complete")`` is called with ``(instance, None)`` when the
    attempt succeeded and ``(instance_or_None, error_message)`` when it failed.
    """

    def __init__(self) -> None:
        self._by_action: dict[str, _ActionHooks] = {}

    def before(
        self, action: str, provides: Iterable[str] = ()
    ) -> Callable[[BeforeHook], BeforeHook]:
        def register(fn: BeforeHook) -> BeforeHook:
            self._by_action.setdefault(action, _ActionHooks()).before.append((fn, tuple(provides)))
            return fn

        return register

    def after(self, action: str) -> Callable[[AfterHook], AfterHook]:
        def register(fn: AfterHook) -> AfterHook:
            self._by_action.setdefault(action, _ActionHooks()).after.append(fn)
            return fn

        return register

    @property
    def actions(self) -> set[str]:
        return set(self._by_action)

    def provided(self, action: str) -> set[str]:
        hooks = self._by_action.get(action)
        return {a for _, provides in hooks.before for a in provides} if hooks else set()

    async def run_before(self, action: str, bindings: dict[str, Any]) -> dict[str, Any]:
        hooks = self._by_action.get(action)
        for fn, _ in hooks.before if hooks else ():
            result = fn(dict(bindings))
            if inspect.isawaitable(result):
                result = await result
            if not isinstance(result, Mapping):
                raise TypeError(
                    f"before hook {fn.__qualname__} for {action} must return the bindings"
                )
            bindings = dict(result)
        return bindings

    async def run_after(self, action: str, instance: Any, error: str | None) -> None:
        hooks = self._by_action.get(action)
        for fn in hooks.after if hooks else ():
            result = fn(instance, error)
            if inspect.isawaitable(result):
                await result


@dataclass(frozen=True)
class Budget:
    """Limits on one run: LLM calls, wall time (seconds), tokens (in + out).

    The token budget is kept before each call, not after it: a call is made only
    if its estimated prompt (:meth:`estimate_tokens`) and its answer fit in what
    is left, the answer's ``max_tokens`` lowered if need be, never under
    ``MIN_ANSWER`` (a tool call cut short is no call).
    """

    max_calls: int = 50
    max_seconds: float = 600.0
    max_tokens: int = 500_000

    # A token is about 4 characters of English or JSON; 3 errs on the safe side.
    CHARS_PER_TOKEN: ClassVar[int] = 3
    # What the API adds to a request with tools (Anthropic's tool-use preamble is
    # 346 tokens with tool_choice "any"): counted in every estimate.
    REQUEST_OVERHEAD: ClassVar[int] = 400
    MIN_ANSWER: ClassVar[int] = 256

    @classmethod
    def estimate_tokens(cls, *parts: Any) -> int:
        """A request's prompt size in tokens, estimated from its parts (text, the
        messages, the tools) as JSON: one token per ``CHARS_PER_TOKEN`` ASCII
        characters, one per other character (a CJK character, an emoji may be
        one token or more), plus the ``REQUEST_OVERHEAD``."""
        text = json.dumps(parts, ensure_ascii=False, default=_plain)
        ascii_chars = len(text.encode("ascii", "ignore"))
        return (
            -(-ascii_chars // cls.CHARS_PER_TOKEN)
            + (len(text) - ascii_chars)
            + cls.REQUEST_OVERHEAD
        )


def _plain(value: Any) -> Any:
    """A message or a tool call (dataclasses) as JSON can hold it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)
