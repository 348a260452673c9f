"""The handler tasks of one adapter: spawned per event, drained at stop, and what
a handler that raises does to the agent.

A handler runs as its own task, so one slow handler does not hold the others
back. But a task that raises is only noticed if someone looks: an agent whose
``on_enabled`` handler fails on a bad binding would otherwise log the error and
wait forever for a completion that will not come. So, by default, a handler
that raises stops the agent the way an error in a task group does: the block
``async with adapter:`` (or ``adapter.run()``) is cancelled and ends with
:class:`~peach.errors.HandlerError`, which carries the handler's exception.
An agent that means to go on after a handler fails sets
``adapter.handler_errors = "log"``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from peach.errors import ExecutorError, HandlerError

log = logging.getLogger("strabo.peach")

HandlerErrors = Literal["stop", "log"]


class Handlers:
    """The running handler tasks of one adapter (``describe()`` names it in logs)."""

    def __init__(self, describe: Callable[[], str], counters: Counter[str]) -> None:
        self.describe = describe
        self.counters = counters
        self.tasks: set[asyncio.Task[Any]] = set()
        self.policy: HandlerErrors = "stop"
        self.failure: HandlerError | None = None
        self._watched: asyncio.Task[Any] | None = None
        self._stopping = False

    def pending(self) -> list[str]:
        return sorted(t.get_name() for t in self.tasks if not t.done())

    def watch(self, task: asyncio.Task[Any] | None) -> None:
        """The task to cancel when a handler fails (the one in ``async with``)."""
        self.failure = None
        self._stopping = False
        self._watched = task

    def stopping(self) -> None:
        """The adapter stops: what its handlers fail with from now on is the stop's."""
        self._stopping = True

    def spawn(
        self,
        coroutine: Awaitable[Any],
        handler: Any,
        what: str,
        context: contextvars.Context | None = None,
    ) -> None:
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(
            coroutine,  # type: ignore[arg-type]
            context=context,
        )
        name = getattr(handler, "__qualname__", handler)
        task.set_name(f"{name} for {what}")
        self.tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, name, what))

    def _done(self, task: asyncio.Task[Any], name: Any, what: str) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        if self._stopping and isinstance(error, ExecutorError):
            log.info("%s: handler %s for %s ended with the adapter", self.describe(), name, what)
            return
        self.counters["handler errors"] += 1
        log.error("%s: handler %s for %s failed: %s", self.describe(), name, what, error,
                  exc_info=error)
        if self.policy != "stop" or self.failure is not None:
            return
        self.failure = HandlerError(f"{self.describe()}: handler {name} for {what} failed: "
                                    f"{type(error).__name__}: {error}")
        self.failure.__cause__ = error
        if self._watched is not None and not self._watched.done():
            self._watched.cancel(msg="a handler failed")

    def ended_by_failure(self) -> HandlerError | None:
        """The failure that cancelled the watched task, its cancellation taken back
        (so the error, not a cancellation, is what leaves the block)."""
        failure, task = self.failure, self._watched
        self._watched = None
        if failure is not None and task is not None and task.cancelling():
            task.uncancel()
            return failure
        return None

    async def drain(self, grace: float | None = None) -> None:
        """Wait until no handler task is running (with ``grace``, cancel those still
        running after that many seconds)."""
        while self.tasks:
            tasks = list(self.tasks)
            if grace is not None:
                pending: set[asyncio.Task[Any]] = set(tasks)
                if grace > 0:
                    _, pending = await asyncio.wait(tasks, timeout=grace)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
            else:
                await asyncio.gather(*tasks, return_exceptions=True)
