"""Rebuilding a shared ledger's state until the log can be read again
(``syncserver._shared``): a turn that failed after checking its attempts
leaves the replica holding attempts perhaps never recorded, so the state is
rebuilt from the log; while the log cannot be read, the rebuild is tried again
with back-off, and at once when the store is heard from again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from syncserver.retry import Backoff

log = logging.getLogger("strabo.syncserver")


class Rebuilding:
    """What :class:`syncserver._shared.SharedFinalizer` does while its ledger's
    state cannot be read from the log (its ``ledger``, ``_heard``, ``_closed``)."""

    #: Waits between tries to rebuild the state while the log cannot be read.
    REBUILD = Backoff(0.05, 2.0)

    ledger: Any
    _heard: asyncio.Event
    _closed: bool
    _repairing: asyncio.Task[None] | None

    def rebuild_failed(self, error: BaseException | None) -> None:
        """The state's rebuild failed (the log cannot be read): try again until
        it succeeds (attempts are answered 503 meanwhile)."""
        if self._repairing is None and not self._closed:
            self._repairing = asyncio.ensure_future(self._repair(error))

    async def _repair(self, error: BaseException | None) -> None:
        """Rebuild the state with back-off, and at once when the store is heard
        from again, until it succeeds or the server closes. Logged when it
        starts and when it ends, not at every try."""
        ledger = self.ledger
        name = f"{ledger.mas}/{ledger.protocol.name}"
        log.error(
            "cannot rebuild %s from the log: %s; its attempts get 503 while it is tried again",
            name,
            error or "the last rebuild failed",
        )
        tries = 0
        try:
            while ledger.stale and not self._closed:
                if ledger.rebuilding is None:
                    tries += 1
                    self._heard.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._heard.wait(), self.REBUILD.delay(tries))
                    if self._closed or not ledger.stale:
                        break
                    if ledger.rebuilding is None:
                        ledger.begin_rebuild()
                rebuilding = ledger.rebuilding
                if rebuilding is not None:
                    await asyncio.wait([rebuilding])
                    if not rebuilding.cancelled() and rebuilding.exception() is not None:
                        log.debug("cannot rebuild %s yet: %s", name, rebuilding.exception())
            if not ledger.stale:
                log.warning("%s: the state is rebuilt from the log (%d more tries)", name, tries)
        finally:
            self._repairing = None
