"""Asking the principal at the terminal (``strabo agent``'s approver).

A question can be given up on while the terminal still waits for its answer:
the adapter waits for an approval only ``approve_timeout`` seconds
(peach/_mandate.py), and the line the principal types afterwards must not
approve whatever is asked next. Reading a line cannot be cancelled (it runs in
a thread, blocked in ``readline``), so the read outlives its question: a line
that arrives while no question waits is an answer to one given up on, and is
dropped with a word; a line that arrives while a question waits answers that
question, which the principal has on the screen. Questions are asked one at a
time, so that one "y" never approves two attempts. The read runs in a daemon
thread of its own, not the event loop's executor: the end of ``asyncio.run``
waits for that executor's threads, and the program would not end until
someone typed a line for a question nobody waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Callable


class Terminal:
    """Questions at a terminal, one at a time, each answered by a line read
    after it was asked."""

    def __init__(
        self,
        readline: Callable[[], str] | None = None,
        write: Callable[[str], object] | None = None,
    ) -> None:
        # By default the stdin of the time of asking (as ``input`` reads), not
        # the one there was when this module was imported.
        self.readline = readline or (lambda: sys.stdin.readline())
        self.write = write or _print
        self._read: asyncio.Future[str] | None = None  # the line being read, if any
        self._turn = asyncio.Lock()

    async def ask(self, question: str) -> str:
        """The line answering ``question`` (without its end of line; "" at the
        end of input). Cancelled, it leaves the read going for the next question."""
        async with self._turn:
            read = self._read
            if read is not None and read.done():  # typed after its question was given up
                self._read = None
                stale = _line(_result(read))
                if stale:
                    self.write(f"(ignored {stale!r}: its question was no longer waiting)\n")
            self.write(question)
            if self._read is None:
                self._read = _reading(self.readline)
            line = await asyncio.shield(self._read)
            self._read = None
            return _line(line)


def _reading(readline: Callable[[], str]) -> asyncio.Future[str]:
    """The line ``readline`` returns, read in a daemon thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    def settle(line: str | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(line or "")

    def read() -> None:
        try:
            line, error = readline(), None
        except BaseException as exc:  # handed to the question waiting for it
            line, error = None, exc
        # RuntimeError: the loop closed meanwhile, and nobody waits for the line.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, line, error)

    threading.Thread(target=read, name="strabo-terminal", daemon=True).start()
    return future


def _result(future: asyncio.Future[str]) -> str:
    if future.cancelled() or future.exception() is not None:
        return ""
    return future.result()


def _line(text: str) -> str:
    return text.rstrip("\r\n")


def _print(text: str) -> None:
    print(text, end="", flush=True)
