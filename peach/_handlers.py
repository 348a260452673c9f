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
import inspect
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from peach.errors import ExecutorError, HandlerError

log = logging.getLogger("strabo.peach")

HandlerErrors = Literal["stop", "log"]

#: Seconds a handler cancelled at stop has to end before stop() gives up on it
#: (a handler that swallows CancelledError would otherwise hold stop() for good).
CANCEL_PATIENCE = 1.0


def checked(handler: Any, decorator: str) -> None:
    """Refuse what can never run as a handler, when it is registered rather than
    when the first event comes: ``on_completion("Created")`` registers a string."""
    if not callable(handler):
        raise TypeError(
            f"{decorator} registers a function (async def), not {type(handler).__name__} "
            f"{handler!r}"
        )


def named(actions: Sequence[Any], decorator: str) -> None:
    """``@adapter.on_enabled`` without parentheses passes the handler as the
    action name: say so, rather than that the protocol has no such action."""
    for name in actions:
        if callable(name):
            raise TypeError(
                f"{decorator} takes action names: write @adapter.{decorator}() or "
                f"@adapter.{decorator}('Action'), with the parentheses"
            )


def add(table: dict[str, list[Any]], names: Sequence[str], handler: Any) -> None:
    """Register ``handler`` under ``names``, once: registering it again (a handler
    that registers itself when it runs, say) adds no second call per event."""
    for name in names:
        handlers = table.setdefault(name, [])
        if handler not in handlers:
            handlers.append(handler)


def notify(listener: Any, args: tuple[Any, ...], agent: str, counters: Counter[str]) -> None:
    """Call a listener (a plain function, called synchronously). One that raises,
    or that is an ``async def`` (its body would never run: the coroutine is
    closed, so Python does not warn that it was never awaited), is logged and
    counted under ``listener errors``; the batch goes on, as with breach listeners."""
    try:
        result = listener(*args)
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()
            raise TypeError("it is a coroutine function: listeners are plain functions "
                            "(def), called synchronously")
    except Exception as exc:
        counters["listener errors"] += 1
        log.error("%s: listener %s failed: %s: %s", agent,
                  getattr(listener, "__qualname__", listener), type(exc).__name__, exc)


async def _invoke(handler: Any, args: tuple[Any, ...]) -> Any:
    """Call ``handler(*args)`` inside its task, so that what it raises before its
    first await, or a result that is not awaitable (a plain ``def``), is this
    handler's failure, never the batch's or the other handlers'."""
    result = handler(*args)
    if not inspect.isawaitable(result):
        raise TypeError(
            f"handler {getattr(handler, '__qualname__', handler)} returned "
            f"{type(result).__name__}, not an awaitable: handlers are coroutine "
            "functions (async def)"
        )
    return await result


async def _awaiting(awaitable: Any) -> Any:
    if not inspect.isawaitable(awaitable):
        raise TypeError(f"a handler gave {type(awaitable).__name__}, not an awaitable")
    return await awaitable


class Handlers:
    """The running handler tasks of one adapter (``describe()`` names it in logs)."""

    def __init__(self, describe: Callable[[], str], counters: Counter[str]) -> None:
        self.describe = describe
        self.counters = counters
        self.tasks: set[asyncio.Task[Any]] = set()
        self.policy: HandlerErrors = "stop"
        self.failure: HandlerError | None = None
        self._watched: asyncio.Task[Any] | None = None
        self._cancelled = False  # whether a failure cancelled the watched task
        self._stopping = False
        self._abandoned: set[asyncio.Task[Any]] = set()  # ignored their cancellation

    def pending(self) -> list[str]:
        return sorted(t.get_name() for t in self.tasks if not t.done())

    def watch(self, task: asyncio.Task[Any] | None) -> None:
        """The task to cancel when a handler fails (the one in ``async with``)."""
        self.failure = None
        self._stopping = False
        self._cancelled = False
        self._watched = task

    def stopping(self) -> None:
        """The adapter stops: what its handlers fail with from now on is the stop's."""
        self._stopping = True

    def call(
        self,
        handler: Any,
        args: tuple[Any, ...],
        what: str,
        context: contextvars.Context | None = None,
    ) -> None:
        """Run ``handler(*args)`` as its own task (see :func:`_invoke`)."""
        self.spawn(_invoke(handler, args), handler, what, context)

    def spawn(
        self,
        coroutine: Awaitable[Any],
        handler: Any,
        what: str,
        context: contextvars.Context | None = None,
    ) -> None:
        if not inspect.iscoroutine(coroutine):  # a plain def's result: its failure
            coroutine = _awaiting(coroutine)
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(
            coroutine, context=context
        )
        name = getattr(handler, "__qualname__", handler)
        task.set_name(f"{name} for {what}")
        self.tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, name, what))

    def _done(self, task: asyncio.Task[Any], name: Any, what: str) -> None:
        self.tasks.discard(task)
        self._abandoned.discard(task)
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
        # Stopping, the block is being left already (its stop drains the
        # handlers): cancelling it would end it with a bare CancelledError and
        # cut that drain short; its exit raises the failure instead.
        if not self._stopping and self._watched is not None and not self._watched.done():
            self._watched.cancel(msg="a handler failed")
            self._cancelled = True

    def ended_by_failure(self) -> HandlerError | None:
        """The failure that ended the watched task's block: the one that cancelled
        it, its cancellation taken back (so the error, not a cancellation, is what
        leaves the block), or one while it stopped."""
        failure, task, cancelled = self.failure, self._watched, self._cancelled
        self._watched, self._cancelled = None, False
        if failure is None or task is None:
            return None
        if not cancelled:
            return failure
        if task.cancelling():
            task.uncancel()
            return failure
        return None

    async def drain(self, grace: float | None = None) -> None:
        """Wait until no handler task is running (with ``grace``, cancel those still
        running after that many seconds). A handler that drains (it stopped its
        adapter) does not wait for itself; one that ignores its cancellation for
        ``CANCEL_PATIENCE`` seconds is logged and left running, not waited for."""
        me = asyncio.current_task()
        while True:
            tasks = [t for t in self.tasks if t is not me and t not in self._abandoned]
            if not tasks:
                return
            if grace is None:
                await asyncio.gather(*tasks, return_exceptions=True)
                continue
            pending: set[asyncio.Task[Any]] = set(tasks)
            if grace > 0:
                _, pending = await asyncio.wait(tasks, timeout=grace)
            if not pending:
                continue
            for task in pending:
                task.cancel()
            _, stubborn = await asyncio.wait(pending, timeout=CANCEL_PATIENCE)
            for task in stubborn:
                self._abandoned.add(task)
                log.error("%s: handler task %r ignored its cancellation; stop() no longer "
                          "waits for it", self.describe(), task.get_name())
