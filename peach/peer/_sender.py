"""The sending half of a :class:`~peach.peer.executor.PeerExecutor`: its outbox
delivered to each peer.

A message is sent to every recipient until each answers for it: accepted (or a
duplicate), refused (kept, and told to the refusal listeners), or not at all
(sent again after a back-off). Per peer, a loop keeps up to ``IN_FLIGHT``
requests under way, each carrying messages no other one carries, and shares a
wave of attempts out among them. Over HTTP the first message for a peer in a
turn of the event loop does not wait for the loop: its request is written on a
kept connection right after the log's commit (``_post``), and what follows it
in the same turn waits for its answer, or until ``MIN_SHARE`` are ready.

A mixin: its state is the executor's (the outbox is also what a restart
rebuilds and what ``outstanding()`` counts); it only keeps the sending code in
a module of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from peach.errors import ExecutorError
from peach.peer import _wire as wire
from peach.peer._ledger import Ledger
from peach.peer._store import PeerStore, Record, Refusal
from peach.peer.directory import AGENT_HEADER, SIGNATURE_HEADER, Directory, Peer, sign
from peach.peer.transport import HTTPTransport, Transport, Unreachable
from syncserver.retry import Backoff

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("strabo.peach.peer")

#: Requests to one peer under way at once. With one, an agent sends nothing
#: while its peer handles the last request, and the two take turns being busy.
IN_FLIGHT = 4
#: The fewest messages a request carries when there are more to send.
MIN_SHARE = 8


class Sending:
    """The outbox and the requests to each peer (mixed into ``PeerExecutor``)."""

    agent: str
    mas: str
    directory: Directory
    me: Peer
    store: PeerStore
    progress: asyncio.Event
    retry_initial: float
    retry_max: float
    _ledgers: dict[str, Ledger]
    _refused: Callable[..., None]

    @property
    def transport(self) -> Transport:
        raise NotImplementedError  # the executor's

    def _init_sending(self) -> None:
        self._outbox: dict[str, set[tuple[str, int]]] = {}  # peer -> (protocol, seq)
        self._senders: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        # Per peer: the messages requests under way carry, those requests (the
        # loop's and catch-ups'), and how those that ended went (for the loop).
        self._sending: dict[str, set[tuple[str, int]]] = {}
        self._in_flight: dict[str, set[asyncio.Task[bool]]] = {}
        self._outcomes: dict[str, list[bool]] = {}
        self._body_limit: dict[str, int] = {}  # a peer that answered 413: less per request
        self._backing_off: dict[str, bool] = {}  # a peer whose last request failed
        self._sent_now: set[str] = set()  # peers sent a request by _post in this loop turn
        self._sent_alone: dict[str, asyncio.Task[bool]] = {}  # the last request _post sent

    def _headers(self, body: bytes) -> dict[str, str]:
        return {AGENT_HEADER: self.agent, SIGNATURE_HEADER: sign(self.me.secret, body)}

    def _post(self, ledger: Ledger, record: Record, recipients: list[str]) -> None:
        """Put a logged record in each recipient's outbox. The first for a peer in
        a turn of the loop goes at once, in a request written on a kept
        connection before this returns (``HTTPTransport.start``), if a request
        may start (fewer than ``IN_FLIGHT`` under way, none failing); the loop
        shares out the rest of a wave among the requests that may start."""
        ledger.unsent[record.seq] = record
        for peer in recipients:
            self._outbox.setdefault(peer, set()).add((record.protocol, record.seq))
            rounds = self._in_flight.get(peer)
            may = (
                rounds is not None
                and len(rounds) < IN_FLIGHT
                and peer not in self._sent_now
                and not self._backing_off.get(peer)
                and self._sends_to(peer)
            )
            if may and self._send_now(peer):
                if not self._sent_now:
                    asyncio.get_running_loop().call_soon(self._sent_now.clear)
                self._sent_now.add(peer)
            else:
                self._wake[peer].set()

    def _send_now(self, peer: str) -> bool:
        """:meth:`_start_round` at once; a failure to is the loop's to meet (the
        record is kept already: an error here must not reach ``attempt()``)."""
        try:
            return self._start_round(peer, now=True)
        except Exception:
            log.exception("%s: sending to %s at once failed; the loop sends it", self.agent, peer)
            return False

    def _start_sender(self, peer: str) -> None:
        self._wake.setdefault(peer, asyncio.Event())
        self._sending.setdefault(peer, set())
        self._in_flight.setdefault(peer, set())
        self._outcomes.setdefault(peer, [])
        self._outbox.setdefault(peer, set())
        if self._outbox[peer]:
            self._wake[peer].set()
        self._senders[peer] = asyncio.create_task(self._send_loop(peer), name=f"to {peer}")

    async def _send_loop(self, peer: str) -> None:
        """Keep up to ``IN_FLIGHT`` requests to ``peer`` under way, each carrying
        messages no other one carries; back off after a request that failed."""
        backoff = Backoff(self.retry_initial, self.retry_max)
        failures = 0
        wake = self._wake[peer]
        rounds = self._in_flight[peer]
        outcomes = self._outcomes[peer]
        try:
            while True:
                wake.clear()
                if outcomes:
                    failures = 0 if all(outcomes) else failures + 1
                    outcomes.clear()
                self._backing_off[peer] = failures > 0
                if failures:
                    # Back off before sending again; new messages (or a request
                    # under way that ends) wake the loop sooner. (Not wait_for: on
                    # 3.11 it loses a cancel that comes as the event is set, and
                    # stopping then waits for this loop for ever.)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(backoff.delay(failures)):
                            await wake.wait()
                    wake.clear()
                    if outcomes:
                        continue
                while len(rounds) < IN_FLIGHT:
                    unsent = len(self._outbox[peer]) - len(self._sending[peer])
                    # Shared out among the requests that may start: a wave of
                    # attempts goes as several requests, so that the peer handles
                    # the first while this agent still sends (or handles answers).
                    # A few go as one: a request costs more than a message. Each
                    # takes its messages as it starts, and none ends before the
                    # last starts (which would free its messages for the next one).
                    share = max(MIN_SHARE, -(-unsent // (IN_FLIGHT - len(rounds))))
                    if unsent < MIN_SHARE and self._sent_alone.get(peer) in rounds:
                        break  # what came after a message sent alone waits for it, or for more
                    if unsent <= 0 or not self._start_round(peer, share):
                        break
                await wake.wait()
        finally:
            for task in list(rounds):
                task.cancel()
            await asyncio.gather(*rounds, return_exceptions=True)

    def _start_round(
        self, peer: str, share: int = wire.MAX_MESSAGES, now: bool = False
    ) -> bool:
        """Start a request of what ``peer`` has not acknowledged and no other
        request carries (up to ``share`` messages and a request's worth); False
        if there is none. The loop hears how it ended, a failure included.
        ``now``: only a request written before this returns (False if the
        transport cannot write now: the loop sends it)."""
        sending = self._sending[peer]
        transport = self.transport if now else None
        if now and not (
            isinstance(transport, HTTPTransport) and transport.ready(self.directory.peers[peer])
        ):
            return False
        items = sorted(self._outbox[peer] - sending)[: min(share, wire.MAX_MESSAGES)]
        if not items:
            return False
        records = [self._ledgers[p].unsent[seq] for p, seq in items]
        limit = self._body_limit.get(peer, wire.MAX_BODY)
        body, carried = wire.pack(self.mas, self.agent, records, limit)
        items = items[:carried]
        started = None
        if isinstance(transport, HTTPTransport):  # (if it cannot after all, a round posts it)
            started = transport.start(
                self.directory.peers[peer], "messages", body, self._headers(body)
            )
        sending.update(items)
        task = asyncio.create_task(
            self._round(peer, items, body, started), name=f"round to {peer}"
        )
        self._in_flight[peer].add(task)
        if now:
            self._sent_alone[peer] = task

        def finished(task: asyncio.Task[bool]) -> None:
            # Here, not in the round: a round cancelled before it ran has no finally.
            if started is not None and task.cancelled():
                started.cancel()  # (or it reads the answer on its own)
                if started.done() and not started.cancelled():
                    started.exception()  # it ended as the round was cancelled: retrieved
            self._in_flight[peer].discard(task)
            sending.difference_update(items)
            if not task.cancelled():
                error = task.exception()
                if error is not None:
                    log.error("%s: sending to %s failed: %r", self.agent, peer, error)
                ok = error is None and task.result()
                self._outcomes[peer].append(ok)
                if not ok:  # nothing more at once until the loop has backed off
                    self._backing_off[peer] = True
            self._wake[peer].set()  # what failed is sent again, after the back-off

        task.add_done_callback(finished)
        return True

    async def _round(
        self,
        peer: str,
        items: list[tuple[str, int]],
        body: bytes,
        started: asyncio.Future[Any] | None = None,
    ) -> bool:
        """Send ``items`` (in ``body``), or await their request ``started``
        already; True when every one got a final answer."""
        carried = len(items)
        try:
            if started is not None:
                assert isinstance(self.transport, HTTPTransport)  # (only it starts one)
                status, answer = await self.transport.finish(self.directory.peers[peer], started)
            else:
                status, answer = await self.transport.post(
                    self.directory.peers[peer], "messages", body, self._headers(body)
                )
        except Unreachable as exc:
            log.debug("%s: %s unreachable (%s); sending again later", self.agent, peer, exc)
            return False
        results = answer.get("results")
        if status == 413 and carried > 1:
            # The peer reads less than this agent would send (an older
            # version, another limit): send smaller requests from now on. (Never
            # larger: a request packed before another's 413 may get one after it.)
            limit = min(self._body_limit.get(peer, wire.MAX_BODY), len(body) // 2)
            self._body_limit[peer] = max(1, limit)
            log.warning(
                "%s: %s refused a request of %d bytes as too large; sending at most %d",
                self.agent, peer, len(body), self._body_limit[peer],
            )  # fmt: skip
            return False
        if status == 413:  # one message the peer will never read: it refuses it
            status, results = 200, [{
                "status": wire.REFUSED, "rule": "too-large",
                "message": f"{peer} reads no request of {len(body)} bytes",
            }]  # fmt: skip
        if status != 200 or not isinstance(results, list) or len(results) != len(items):
            message = answer.get("error", {}).get("message", "") if answer else ""
            log.warning(
                "%s: %s did not take %d messages: %s %s; sending again later",
                self.agent,
                peer,
                len(items),
                status,
                message,
            )
            return False
        final = True
        for (protocol, seq), result in zip(items, results, strict=True):
            verdict = result.get("status") if isinstance(result, dict) else None
            if verdict in (wire.ACCEPTED, wire.DUPLICATE):
                self._acknowledged(protocol, seq, peer)
            elif verdict == wire.REFUSED:
                refusal = Refusal(
                    protocol,
                    seq,
                    peer,
                    str(result.get("rule", "")),
                    str(result.get("message", "")),
                    incoming=False,
                )
                log.warning(
                    "%s: %s refused %s (%s): %s",
                    self.agent,
                    peer,
                    self._ledgers[protocol].unsent[seq].describe(),
                    refusal.rule,
                    refusal.message,
                )
                try:
                    self._refused(refusal)
                except ExecutorError as exc:  # kept next time: the peer answers the same
                    log.error("%s", exc)
                    final = False
                    continue
                self._acknowledged(protocol, seq, peer, stored=True)
            else:
                final = False
        return final

    async def _flush_to(self, peer: str) -> int:
        """Send ``peer`` what it lacks now (it asked), after what is under way;
        how much is still unsent. Its request is one the loop hears of (sent
        again if it fails) and stopping cancels; the answer waits for it and for
        those started meanwhile, which may carry what was owed (no more: a wait
        of a request or two, not for as long as this agent sends)."""
        rounds = self._in_flight.get(peer)
        if rounds is None or not self._sends_to(peer):  # not a peer, or stopped
            return len(self._outbox.get(peer, ()))
        if rounds:
            await asyncio.wait(set(rounds))  # (which a cancelled wait does not cancel)
        if self._sends_to(peer):
            self._start_round(peer)
        if rounds:
            await asyncio.wait(set(rounds))
        return len(self._outbox.get(peer, ()))

    def _sends_to(self, peer: str) -> bool:
        """Whether the loop sending to ``peer`` runs, neither stopped nor stopping:
        a request started once it was cancelled (its rounds being cancelled, or
        stop() waiting for the other loops) would outlive stop()."""
        sender = self._senders.get(peer)
        return sender is not None and not sender.done() and not sender.cancelling()

    def _acknowledged(self, protocol: str, seq: int, peer: str, stored: bool = False) -> None:
        if not stored:
            self.store.acknowledged(protocol, seq, peer)
        self._outbox[peer].discard((protocol, seq))
        self._sending.get(peer, set()).discard((protocol, seq))  # (kept within the outbox)
        if not any((protocol, seq) in items for items in self._outbox.values()):
            self._ledgers[protocol].unsent.pop(seq, None)
        self.progress.set()
