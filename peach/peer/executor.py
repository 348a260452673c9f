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
from peach.peer._sender import IN_FLIGHT, MIN_SHARE, Sending
from peach.peer._store import (
    PeerStore,
    PeerStoreError,
    Record,
    Refusal,
    Verdict,
    open_peer_store,
)
from peach.peer.directory import Directory
from peach.peer.transport import Transport, Unreachable
from peach.view import signature
from syncserver.acts_for import ActsFor
from syncserver.batch import Batch

__all__ = ["IN_FLIGHT", "MIN_SHARE", "PeerExecutor"]

log = logging.getLogger("strabo.peach.peer")

class PeerExecutor(Sending, Executor):
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
        self._loaded = False
        self._init_sending()
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
        if recipients:  # sent before the adapters hear of it: the peer works meanwhile
            self._post(ledger, record, recipients)
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
