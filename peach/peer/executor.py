"""PeerExecutor: agents enact a protocol peer to peer, with no SyncServer.

Each agent keeps its own state: the instances it performed or received. An
attempt is checked against that state alone, written to the agent's log and
returned; it never waits for a global decision. Then it is sent, with its
context (what the agent knew of those enactments), to every other agent that
plays a role in the protocol, and sent again until each acknowledges it.

A receiver authenticates the sender, and accepts a message only once it holds
the whole context and ``langshaw.decentralized.receivable`` says yes: the
sender could have performed it on what it knew, and it agrees with what the
receiver knows. A refused message is logged with the rule, kept in the
receiver's log of refusals, and reported to the sender, which keeps it too.
A refusal is final: the receiver gives the same verdict if the message comes
again, after a restart too, and refuses what follows it; the sender stops
sending it and tells its ``refusal_listeners``. A value that is no JSON (NaN,
an infinity) is refused by both: ``attempt()`` raises before keeping it, a
receiver refuses it (``bad-json``) rather than answering "busy" for ever.
Duplicates are recognized by instance identity, so delivery may repeat and
reorder messages freely. docs/peach.md says what ``attempt()`` guarantees here
and what it does on a SyncServer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from langshaw import ActionInstance, LangshawProtocol
from langshaw.decentralized import decode_identity
from langshaw.values import json_copy
from peach.errors import ActionRejected, ExecutorError
from peach.executor import Executor, Member, _Feed
from peach.peer import _wire as wire
from peach.peer._inbox import Inbox
from peach.peer._ledger import Ledger
from peach.peer._store import (
    PeerStore,
    PeerStoreError,
    Record,
    Refusal,
    Verdict,
    open_peer_store,
)
from peach.peer.directory import AGENT_HEADER, SIGNATURE_HEADER, Directory, sign
from peach.peer.transport import Transport, Unreachable
from peach.view import signature
from syncserver.acts_for import ActsFor
from syncserver.batch import Batch
from syncserver.retry import Backoff

log = logging.getLogger("strabo.peach.peer")

#: Requests to one peer under way at once. With one, an agent sends nothing
#: while its peer handles the last request, and the two take turns being busy.
IN_FLIGHT = 4
#: The fewest messages a request carries when there are more to send.
MIN_SHARE = 8


class PeerExecutor(Executor):
    """Runs the adapters of the agent ``agent`` peer to peer.

    ``directory`` names the agents, their roles, addresses and secrets;
    ``store`` is where this agent's log is kept (a SQLite path, or None for
    memory); ``transport`` is how it reaches peers (HTTP on the directory's
    ``url`` by default, or a :class:`MemoryNetwork`). Resending backs off from
    ``retry_initial`` to ``retry_max`` seconds; at most ``max_waiting``
    received messages wait for their context at once.
    """

    streams = False

    def __init__(
        self,
        agent: str,
        directory: Directory,
        *,
        store: str | Path | PeerStore | None = None,
        transport: Transport | None = None,
        retry_initial: float = 0.05,
        retry_max: float = 2.0,
        max_waiting: int = 10_000,
    ) -> None:
        super().__init__(directory.mas)
        self.agent = agent
        self.directory = directory
        self.me = directory.peer(agent)
        self.store = open_peer_store(store)
        self._transport = transport
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.max_waiting = max_waiting
        self._ledgers: dict[str, Ledger] = {}
        self._outbox: dict[str, set[tuple[str, int]]] = {}  # peer -> (protocol, seq)
        self._loaded = False
        self._senders: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        # Per peer: the messages requests under way carry, those requests (the
        # loop's and catch-ups'), and how those that ended went (for the loop).
        self._sending: dict[str, set[tuple[str, int]]] = {}
        self._in_flight: dict[str, set[asyncio.Task[bool]]] = {}
        self._outcomes: dict[str, list[bool]] = {}
        self._body_limit: dict[str, int] = {}  # a peer that answered 413: less per request
        # What a peer's request brings is written in one transaction, when the
        # inbox is done with it and before it answers (``_keep``).
        self._inbox = Inbox(
            agent,
            directory,
            self._ledgers,
            lambda ledger, record, items: self._commit(ledger, record, items, [], now=False),
            lambda refusal, verdict: self._refused(refusal, verdict, now=False),
            self._keep,
            self._flush_to,
            max_waiting,
        )
        self.progress = asyncio.Event()  # set on every acknowledgement or acceptance
        self.refusal_listeners: list[Callable[[Refusal], None]] = []

    # Reading --------------------------------------------------------------------

    def refusals(self) -> list[Refusal]:
        """Every refusal so far: of this agent's messages by peers, and of peers'
        messages by this agent (``incoming``)."""
        return self.store.refusals()

    def outstanding(self) -> int:
        """Messages of this agent some peer has not acknowledged yet."""
        return sum(len(items) for items in self._outbox.values())

    def waiting(self) -> int:
        """Received messages still waiting for part of their context."""
        return self._inbox.waiting()

    # Life cycle -------------------------------------------------------------------

    def _ledger(self, protocol: str) -> Ledger:
        ledger = self._ledgers.get(protocol)
        if ledger is None:
            raise ExecutorError(
                f"the directory of {self.mas!r} has no protocol {protocol!r} "
                f"(it has {', '.join(self.directory.protocols)})"
            )
        return ledger

    def _load(self) -> None:
        """Rebuild every protocol's state from the log, and the outbox."""
        try:
            self.store.open(self.agent)
        except PeerStoreError as exc:
            raise ExecutorError(str(exc)) from None
        try:
            self._rebuild()
        except BaseException:
            self.store.close()  # and its lock: a start that failed holds nothing
            raise

    def _rebuild(self) -> None:
        try:
            records = self.store.load()
            outbox = self.store.outbox()
            verdicts = self.store.verdicts()
        except PeerStoreError as exc:
            raise ExecutorError(str(exc)) from None
        if self._loaded:
            return
        self._ledgers.update({n: Ledger(p) for n, p in self.directory.protocols.items()})
        by_seq = {}
        for record in records:
            ledger = self._ledger(record.protocol)
            ledger.view.apply(ledger.apply(record, ledger.instances(record)))
            by_seq[record.protocol, record.seq] = record
        for protocol, seq, peer in outbox:
            self._ledger(protocol).unsent[seq] = by_seq[protocol, seq]
            self._outbox.setdefault(peer, set()).add((protocol, seq))
        for verdict in verdicts:  # what it refused, it refuses again, and what follows
            ledger = self._ledger(verdict.protocol)
            ledger.verdicts[verdict.sender, verdict.seq] = verdict.answer
            ledger.refused.update(
                ident for ident in map(decode_identity, verdict.identities) if ident is not None
            )
        self._loaded = True
        if records:
            log.info(
                "%s: resumed from its log (%d messages, %d not acknowledged by some peer)",
                self.agent,
                len(records),
                len(outbox),
            )

    async def _connect(self) -> None:
        self._load()
        if self._transport is None:
            from peach.peer.transport import HTTPTransport

            self._transport = HTTPTransport()
        try:
            await self.transport.listen(self.me, self._inbox.endpoint)
        except Unreachable as exc:
            self.store.close()
            raise ExecutorError(str(exc)) from None
        for peer in self.directory.peers:
            if peer != self.agent:
                self._start_sender(peer)
        await self._catch_up()

    async def _disconnect(self) -> None:
        tasks = list(self._senders.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._senders.clear()
        await self.transport.close()
        disconnect = getattr(self.transport, "disconnect", None)
        if disconnect is not None:
            disconnect(self.agent)
        self.store.close()

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            raise ExecutorError("the executor is not started: start an adapter first")
        return self._transport

    async def _admit(self, adapter: Member) -> None:
        if adapter.name != self.agent:
            raise ExecutorError(
                f"the adapter is named {adapter.name!r} but this executor speaks for agent "
                f"{self.agent!r}: name the adapter after the agent it speaks for"
            )
        name = adapter.protocol.name
        mine = self.directory.protocols.get(name)
        if mine is None:
            raise ExecutorError(
                f"the directory of {self.mas!r} has no protocol {name} "
                f"(it has {', '.join(self.directory.protocols)})"
            )
        if signature(mine) != signature(adapter.protocol):
            raise ExecutorError(
                f"{adapter!r} loads a {name} that differs from the directory's "
                f"({mine.source}): every peer must enact the same protocol"
            )
        played = self.me.plays(name)
        if adapter.role not in played:
            raise ExecutorError(
                f"agent {self.agent!r} does not play {adapter.role} in {name} "
                f"(it plays {', '.join(sorted(played)) or 'nothing'})"
            )

    def acts_for(self, adapter: Member) -> ActsFor:
        return self.me.acts_for

    def _new_feed(self, protocol: LangshawProtocol) -> _Feed:
        ledger = self._ledger(protocol.name)
        return _Feed(self, protocol, view=ledger.view, applied=ledger.seq)

    async def _read(self, adapter: Member, after: int, limit: int) -> list[Batch]:
        return []  # a feed starts on the ledger's own, current view

    # Acting -----------------------------------------------------------------------

    async def attempt(
        self, adapter: Member, instances: Sequence[ActionInstance]
    ) -> list[ActionInstance]:
        """Check against this agent's state, keep, and send: never waits for peers."""
        self._started(adapter)
        ledger = self._ledger(adapter.protocol.name)
        problem = wire.not_json(i.bindings for i in instances)  # as the receiver checks
        if problem is not None:  # (bind() refuses one; an instance built by hand may hold it)
            raise ExecutorError(
                f"the attempt cannot be sent: it is not valid JSON: {problem}",
                status=400,
                code="bad-json",
            )
        # A copy is what this agent keeps and sends: a list it changes after
        # attempting would otherwise change its view and memory log, not its peers'.
        items = [ActionInstance(i.action, json_copy(i.bindings)) for i in instances]
        violation = self.me.acts_for.check(self.agent, items) or ledger.view.state.check(
            items, self.me.plays(ledger.protocol.name)
        )
        if violation is not None:
            raise ActionRejected(violation, items)
        recipients = self.directory.recipients(ledger.protocol.name, self.agent)
        record = ledger.record(self.agent, items, ledger.context(items))
        problem = wire.too_large(self.mas, self.agent, record) if recipients else None
        if problem is not None:
            raise ExecutorError(
                f"the attempt cannot be sent to its peers: {problem}",
                status=413,
                code="too-large",
            )
        self._commit(ledger, record, items, recipients)
        if recipients:
            ledger.unsent[record.seq] = record
            for peer in recipients:
                self._outbox.setdefault(peer, set()).add((record.protocol, record.seq))
                self._wake[peer].set()
        return items

    def _commit(
        self,
        ledger: Ledger,
        record: Record,
        items: list[ActionInstance],
        recipients: list[str],
        now: bool = True,
    ) -> None:
        """Write a record, then apply it: to the state and to the adapters. A
        peer's message (``now`` False) is queued for the transaction of its
        request, which :meth:`_keep` commits before the peer hears of it."""
        try:
            self.store.append(record, recipients, now=now)
        except Exception as exc:  # the disk is full, the file went away...
            raise ExecutorError(f"{self.agent}: cannot write its log: {exc}") from None
        batch = ledger.apply(record, items)
        feed = self._feeds.get(ledger.protocol.name)
        if feed is not None:
            feed._apply(batch)
        else:
            ledger.view.apply(batch)
        self.progress.set()

    async def sync(self, adapter: Member) -> None:
        """Ask every peer to send what it has not delivered to this agent yet, and
        wait for it (peers that do not answer are skipped, and logged)."""
        if adapter not in self._adapters:
            raise ExecutorError(f"{adapter!r} is not started")
        await self._catch_up(peers=self.directory.recipients(adapter.protocol.name, self.agent))

    async def _catch_up(self, peers: list[str] | None = None) -> None:
        names = peers if peers is not None else [p for p in self.directory.peers if p != self.agent]
        body = wire.flush(self.mas, self.agent)
        headers = self._headers(body)

        async def ask(name: str) -> None:
            try:
                status, answer = await self.transport.post(
                    self.directory.peers[name], "flush", body, headers
                )
            except Unreachable as exc:
                log.info("%s: %s did not answer a catch-up request (%s)", self.agent, name, exc)
                return
            if status != 200:
                log.warning(
                    "%s: %s refused a catch-up request: %s %s",
                    self.agent,
                    name,
                    status,
                    answer.get("error", {}).get("message", ""),
                )

        await asyncio.gather(*(ask(n) for n in names))

    def _headers(self, body: bytes) -> dict[str, str]:
        return {AGENT_HEADER: self.agent, SIGNATURE_HEADER: sign(self.me.secret, body)}

    # Sending ----------------------------------------------------------------------

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
                    if unsent <= 0 or not self._start_round(peer, share):
                        break
                await wake.wait()
        finally:
            for task in list(rounds):
                task.cancel()
            await asyncio.gather(*rounds, return_exceptions=True)

    def _start_round(self, peer: str, share: int = wire.MAX_MESSAGES) -> bool:
        """Start a request of what ``peer`` has not acknowledged and no other
        request carries (up to ``share`` messages and a request's worth); False
        if there is none. The loop hears how it ended, a failure included."""
        sending = self._sending[peer]
        items = sorted(self._outbox[peer] - sending)[: min(share, wire.MAX_MESSAGES)]
        if not items:
            return False
        records = [self._ledgers[p].unsent[seq] for p, seq in items]
        limit = self._body_limit.get(peer, wire.MAX_BODY)
        body, carried = wire.pack(self.mas, self.agent, records, limit)
        items = items[:carried]
        sending.update(items)
        task = asyncio.create_task(self._round(peer, items, body), name=f"round to {peer}")
        self._in_flight[peer].add(task)

        def finished(task: asyncio.Task[bool]) -> None:
            # Here, not in the round: a round cancelled before it ran has no finally.
            self._in_flight[peer].discard(task)
            sending.difference_update(items)
            if not task.cancelled():
                error = task.exception()
                if error is not None:
                    log.error("%s: sending to %s failed: %r", self.agent, peer, error)
                self._outcomes[peer].append(error is None and task.result())
            self._wake[peer].set()  # what failed is sent again, after the back-off

        task.add_done_callback(finished)
        return True

    async def _round(self, peer: str, items: list[tuple[str, int]], body: bytes) -> bool:
        """Send ``items`` (in ``body``); True when every one got a final answer."""
        carried = len(items)
        try:
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

    def _keep(self) -> None:
        """Commit what the inbox queued for the request it is answering."""
        try:
            self.store.commit()
        except Exception as exc:  # the disk is full, the file went away...
            raise ExecutorError(f"{self.agent}: cannot write its log: {exc}") from None

    def _refused(
        self, refusal: Refusal, verdict: Verdict | None = None, now: bool = True
    ) -> None:
        """Keep a refusal (with this agent's verdict, for a peer's message: queued
        for its request's transaction), then tell the listeners."""
        try:
            self.store.refused(refusal, verdict, now=now)
        except Exception as exc:  # the disk is full, the file went away...
            raise ExecutorError(f"{self.agent}: cannot write its log: {exc}") from None
        for listener in self.refusal_listeners:
            try:
                listener(refusal)
            except Exception:  # the refusal stands: a listener cannot undo it
                log.exception("%s: a refusal listener failed on %s", self.agent, refusal)
        self.progress.set()
