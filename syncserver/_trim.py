"""Giving memory back to the system after bursts of closed connections.

Each connection's buffers are small but many; once freed, the C allocator keeps
the pages for reuse, so a burst of slow clients would leave the server's
resident size at its peak. ``trimmer`` counts closes (the connection guard,
``syncserver._guard``, tells it of each) and, after a burst and once closes
stop, returns the freed pages (``malloc_trim``, where glibc has it).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
from typing import Any


class Trimmer:
    """Trims the C heap after a burst of closes, once they stop."""

    BURST = 256  # closes that make a burst
    SETTLE = 1.0  # seconds without a close before trimming

    def __init__(self) -> None:
        self.count = 0
        self.handle: asyncio.TimerHandle | None = None
        self.trim = _malloc_trim()

    def closed(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.trim is None:
            return
        self.count += 1
        if self.count >= self.BURST:
            if self.handle is not None:
                self.handle.cancel()
            self.handle = loop.call_later(self.SETTLE, self._run)

    def _run(self) -> None:
        self.count = 0
        self.handle = None
        gc.collect()
        if self.trim is not None:
            self.trim(0)


def _malloc_trim() -> Any:
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: its allocator may behave otherwise
        return None


trimmer = Trimmer()
