"""What can go wrong when an adapter binds or attempts an action."""

from __future__ import annotations

from typing import Any

from langshaw import Violation


class BindError(ValueError):
    """An instance that cannot be built: names the attribute at fault."""

    def __init__(
        self,
        message: str,
        attribute: str | None = None,
        *,
        path: str | None = None,
        missing: bool = False,
        rule: str | None = None,
    ) -> None:
        super().__init__(message)
        self.attribute = attribute
        self.path = path  # for a type error: where in the value, e.g. "items[0].qty"
        self.missing = missing  # a required attribute was not given
        # For an action not enabled where it was asked for: the protocol rule it
        # would break there (nono, dependency, ...), as ActionRejected.rule names it.
        self.rule = rule


class ActionRejected(Exception):
    """The server refused an attempt: ``rule`` is the protocol rule it breaks."""

    def __init__(self, violation: Violation, instances: list[Any] | None = None) -> None:
        super().__init__(f"{violation.rule}: {violation.message}")
        self.violation = violation
        self.rule = violation.rule
        self.message = violation.message
        self.instances = instances or []


class ExecutorError(Exception):
    """The executor could not get an answer (server unreachable, refused, failing)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        # True when resending the same attempt (same attempt id) is safe and may work.
        self.retryable = retryable


class LogGapError(ExecutorError):
    """The server's log skips a batch. Applying what follows could apply an
    action before one it depends on, so the feed of that protocol stops: it does
    not reconnect, and every later attempt or sync through it raises this."""


class HandlerError(Exception):
    """A handler raised, and stopped its agent: ``async with adapter:`` (or
    ``adapter.run()``) ends with this error; ``__cause__`` is the handler's own
    exception. Set ``adapter.handler_errors = "log"`` to go on instead."""
