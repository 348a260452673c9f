"""Asking the principal at the terminal (``strabo agent``'s approver).

A question can be given up on while the terminal still waits for its answer:
the adapter waits for an approval only ``approve_timeout`` seconds
(peach/_mandate.py), and the line the principal types afterwards must not
approve whatever is asked next. Reading a line cannot be cancelled (it runs in
a thread, blocked in ``readline``), so the read outlives its question: a line
that arrives while no question waits is an answer to one given up on, and is
dropped with a word; a line that arrives while a question waits answers that
question, which the principal has on the screen. Questions are asked one at a
time, so that one "y" never approves two attempts.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable


class Terminal:
    """Questions at a terminal, one at a time, each answered by a line read
    after it was asked."""

    def __init__(
        self,
        readline: Callable[[], str] = sys.stdin.readline,
        write: Callable[[str], object] | None = None,
    ) -> None:
        self.readline = readline
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
                self._read = asyncio.ensure_future(asyncio.to_thread(self.readline))
            line = await asyncio.shield(self._read)
            self._read = None
            return _line(line)


def _result(future: asyncio.Future[str]) -> str:
    if future.cancelled() or future.exception() is not None:
        return ""
    return future.result()


def _line(text: str) -> str:
    return text.rstrip("\r\n")


def _print(text: str) -> None:
    print(text, end="", flush=True)
