"""Places for requests under way: a semaphore that can be taken without waiting.

The lean HTTP client (``syncserver.http1``) bounds the requests it has under way
with it; a request written before its caller yields (``Client.start``) takes its
place at once or not at all, which :class:`asyncio.Semaphore` cannot say."""

from __future__ import annotations

import asyncio
from collections import deque


class Places:
    """At most ``count`` requests under way at once, waited for in turn. A
    semaphore that can also be taken without waiting (:meth:`take_now`), for a
    request written before its caller yields (:meth:`Client.start`)."""

    def __init__(self, count: int) -> None:
        self.free = count
        self._waiting: deque[asyncio.Future[None]] = deque()

    def take_now(self) -> bool:
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        if self.take_now():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a place as it was cancelled: pass it on
            else:
                self._waiting.remove(waiter)
            raise

    def give(self) -> None:
        """A place back: to the first still waiting, or free."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1
