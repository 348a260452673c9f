"""How a long-running command stops: SIGINT (Ctrl-C) and SIGTERM (``docker
stop``, systemd, ``kill``) both ask for a graceful stop, and the exit status
says which one came.

A server run by a supervisor is stopped with SIGTERM, and a stop it asked for is
no failure: the command stops taking requests, finishes those in flight, closes
its stores and exits 0 (DONE). Ctrl-C is a person interrupting: the same
graceful stop, then 130 (INTERRUPTED), as every verb reports an interruption.
Python's defaults do neither: SIGTERM ends the process at once (status 143,
no ``finally`` run, no store closed), and uvicorn, once shut down, raises the
signal it caught again, which does the same.

``strabo syncserver``, ``strabo mcp``, ``strabo a2a`` and ``strabo agent`` (whose
run a stop ends, the agent saying why in its report) share this; ``strabo
merchant`` restates it (the merchant imports nothing of the engine).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator

from syncserver.options import DONE, INTERRUPTED

__all__ = ["STOP_SIGNALS", "Stopping", "stop_on_signals"]

#: The signals that ask a command to stop.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopping:
    """The stop signals received while :func:`stop_on_signals` was in force."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def status(self) -> int:
        """The exit status: 130 if Ctrl-C came, else 0 (done, or stopped by SIGTERM)."""
        return INTERRUPTED if signal.SIGINT in self.received else DONE


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[int], object]) -> Iterator[Stopping]:
    """While the block runs, SIGINT and SIGTERM call ``stop(signal)`` (which
    starts the graceful stop) instead of raising KeyboardInterrupt or ending the
    process; the :class:`Stopping` yielded records them.

    In a running event loop the handlers are the loop's (``stop`` runs in the
    loop, where it may set an event or cancel a task); elsewhere, or where the
    loop cannot have them (Windows), plain signal handlers. Outside the main
    thread signals cannot be caught, and nothing is installed."""
    stopping = Stopping()

    def handle(sig: int) -> None:
        stopping.received.append(sig)
        stop(sig)

    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None

    def caught(sig: int, _frame: object) -> None:
        if loop is not None:  # wake the loop, whatever it waits on
            loop.call_soon_threadsafe(handle, sig)
        else:
            handle(sig)

    in_loop: list[int] = []
    previous: dict[int, Callable[..., object] | int | None] = {}
    for sig in STOP_SIGNALS:
        if loop is not None:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, handle, sig)
                in_loop.append(sig)
                continue
        with contextlib.suppress(ValueError):  # not the main thread
            previous[sig] = signal.signal(sig, caught)
    try:
        yield stopping
    finally:
        for each in in_loop:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(each)  # type: ignore[union-attr]
        for each, handler in previous.items():
            signal.signal(each, handler if handler is not None else signal.SIG_DFL)
