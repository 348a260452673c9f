"""What an agent does with what its peers send: authenticate, read, wait, check.

A request is authenticated (the sender is in the directory and signed the body
with its secret) and parsed; then each message in it is, in turn, recognized
as a duplicate, kept waiting until its whole context is here, or checked with
``langshaw.decentralized.receivable`` and accepted or refused. A message that
waits is released as soon as the last instance of its context is accepted.

A refusal is final: its verdict is written to the store before the sender
hears of it, and given again if the message comes again, after a restart too;
a message that follows a refused instance is refused in turn. A message that
no log could hold (a NaN, an infinity, a key that is a list) is refused at
once, never answered ``busy``, which would have its sender send it forever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from langshaw import ActionInstance
from langshaw.decentralized import (
    Identity,
    decode_identity,
    encode_identity,
    identity,
    missing,
    receivable,
)
from langshaw.values import json_equal, valid_key_value
from peach.errors import ExecutorError
from peach.peer import _wire as wire
from peach.peer._ledger import Ledger, Waiting
from peach.peer._store import Record, Refusal, Verdict
from peach.peer.directory import AGENT_HEADER, SIGNATURE_HEADER, Directory
from syncserver.errors import describe

log = logging.getLogger("strabo.peach.peer")

NOT_JSON = "the message is not valid JSON: "


class Inbox:
    """The receiving side of one agent; ``commit`` keeps an accepted message and
    applies it, ``refused`` records a refusal (with the verdict, for a peer's
    message), both queued for the request's transaction, which ``keep`` writes
    before the answer (each raising ExecutorError if it cannot); ``flush``
    sends a peer what it lacks."""

    def __init__(
        self,
        agent: str,
        directory: Directory,
        ledgers: Mapping[str, Ledger],
        commit: Callable[[Ledger, Record, list[ActionInstance]], None],
        refused: Callable[[Refusal, Verdict | None], None],
        keep: Callable[[], None],
        flush: Callable[[str], Any],
        max_waiting: int,
    ) -> None:
        self.agent = agent
        self.mas = directory.mas
        self.directory = directory
        self.ledgers = ledgers
        self.commit = commit
        self.refused = refused
        self.keep = keep
        self.flush = flush
        self.max_waiting = max_waiting

    def waiting(self) -> int:
        return sum(len(ledger.waiting) for ledger in self.ledgers.values())

    async def endpoint(
        self, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        """Every request a peer makes, whatever carried it."""
        sender = headers.get(AGENT_HEADER, "")
        signed = headers.get(SIGNATURE_HEADER, "")
        if not sender or not signed:
            return 401, wire.error(
                "unsigned", f"say who sends ({AGENT_HEADER}) and sign ({SIGNATURE_HEADER})"
            )
        if sender not in self.directory.peers or sender == self.agent:
            log.warning("%s: refused a request from unknown agent %r", self.agent, sender)
            return 401, wire.error(
                "unknown-peer", f"the directory of {self.mas!r} has no peer {sender!r}"
            )
        if not self.directory.authentic(sender, body, signed):
            log.warning("%s: refused a request from %r: bad signature", self.agent, sender)
            return 401, wire.error(
                "bad-signature", f"the signature does not verify with {sender!r}'s secret"
            )
        model: type[wire.EnvelopeIn] | type[wire.FlushIn]
        if path == "messages":
            model = wire.EnvelopeIn
        elif path == "flush":
            model = wire.FlushIn
        else:
            return 404, wire.error("not-found", f"no such request: {path!r}")
        try:
            request = model.model_validate_json(body)
        except ValidationError as exc:
            # As the SyncServer answers: bad-json for a body that is not JSON (a
            # number out of range, nesting past the parser's depth), bad-request else.
            return 400, wire.error(*describe(exc))
        if request.mas != self.mas or request.sender != sender:
            return 400, wire.error(
                "bad-request",
                f"this is agent {self.agent!r} of {self.mas!r}; the body says it is for "
                f"{request.mas!r} from {request.sender!r}",
            )
        if isinstance(request, wire.FlushIn):
            return 200, {"outstanding": await self.flush(sender)}
        results = [self._receive(sender, message) for message in request.messages]
        # One turn of the loop before the commit: the handlers these messages
        # enabled start now, and an attempt one of them makes commits this
        # request's rows with its own, in one transaction instead of two (the
        # answer waits for the commit either way, and the queue keeps the log in
        # order: what was received is written before what was done about it).
        await asyncio.sleep(0)
        try:
            self.keep()
        except ExecutorError as exc:
            # Nothing of this request is written: no final answer (an accepted
            # message would be acknowledged, a refused one forgotten). What was
            # applied stays queued, written first by the next commit; until then
            # every answer that needs it is "busy" too, and senders send again.
            log.error("%s", exc)
            results = [
                {"seq": r["seq"], "status": wire.BUSY} if r.get("status") in wire.DONE else r
                for r in results
            ]
        return 200, {"results": results}

    def _receive(self, sender: str, message: wire.MessageIn) -> dict[str, Any]:
        head: dict[str, Any] = {"seq": message.seq}
        ledger = self.ledgers.get(message.protocol)
        if ledger is None:
            return self._refuse_now(
                head,
                message,
                sender,
                "unknown-protocol",
                f"the directory of {self.mas!r} has no protocol {message.protocol!r}",
            )
        key = (sender, message.seq)
        if key in ledger.verdicts:
            return {**head, **ledger.verdicts[key]}
        if key in ledger.waiting:
            return {**head, "status": wire.PENDING}
        actions = ledger.protocol.actions
        instances = []
        for item in message.instances:
            action = actions.get(item.action)
            if action is None:
                return self._refuse_now(
                    head,
                    message,
                    sender,
                    "unknown-action",
                    f"{message.protocol} has no action {item.action!r}",
                )
            instances.append(ActionInstance(action, item.bindings))
        context: list[Identity] = []
        for value in message.context:
            ident = decode_identity(value)
            if ident is None or ident[0] not in actions:
                return self._refuse_now(
                    head,
                    message,
                    sender,
                    "context",
                    f"the context names {value!r}, which is not an instance's identity",
                )
            context.append(ident)
        record = Record(
            message.protocol,
            message.seq,
            sender,
            [{"action": i.action, "bindings": i.bindings} for i in message.instances],
            message.context,
        )
        waiting = Waiting(sender, message.seq, instances, context, record)
        problem = wire.not_json(i.bindings for i in instances)
        if problem is not None:  # no log can hold it: refused for good, at once
            return {**head, **self._refuse(ledger, waiting, "bad-json", NOT_JSON + problem)}
        bad_key = _bad_key(instances)
        if bad_key is not None:  # (a list or an object would not even be hashable)
            text, extra = bad_key
            return {**head, **self._refuse(ledger, waiting, "key", text, extra)}
        held = [ledger.known.get(identity(i)) for i in instances]
        if any(h is not None for h in held):
            if all(
                h is not None and json_equal(dict(h.bindings), dict(i.bindings))
                for h, i in zip(held, instances, strict=True)
            ):
                return {**head, "status": wire.DUPLICATE}
            return self._refuse_now(
                head,
                message,
                sender,
                "duplicate",
                "an instance with the same keys and other bindings already occurred",
            )
        if missing(context, ledger.known):
            refused = [c for c in context if c in ledger.refused]
            if refused:
                return {
                    **head,
                    **self._refuse(
                        ledger,
                        waiting,
                        "dependency",
                        f"it follows {refused[0][0]} {list(refused[0][1])}, which this agent "
                        "refused",
                    ),
                }
            if self.waiting() >= self.max_waiting:
                return {**head, "status": wire.BUSY}
            ledger.waiting[key] = waiting
            return {**head, "status": wire.PENDING}
        result = self._accept(ledger, waiting)
        self._release(ledger)
        return {**head, **result}

    def _accept(self, ledger: Ledger, message: Waiting) -> dict[str, Any]:
        """Check a message whose context is all here; keep it or refuse it."""
        sender = self.directory.peers[message.sender]
        violation = sender.acts_for.check(sender.name, message.instances) or receivable(
            ledger.view.state,
            message.instances,
            sender.plays(ledger.protocol.name),
            [ledger.known[c] for c in message.context],
            context_is_state=ledger.is_whole(message.instances, message.context),
        )
        if violation is not None:
            return self._refuse(
                ledger,
                message,
                violation.rule,
                violation.message,
                {
                    "action": violation.action,
                    "attribute": violation.attribute,
                },
            )
        record = ledger.record(message.sender, message.instances, message.context)
        try:
            self.commit(ledger, record, message.instances)
        except ExecutorError as exc:
            log.error("%s", exc)
            return {"status": wire.BUSY}
        return {"status": wire.ACCEPTED}

    def _release(self, ledger: Ledger) -> None:
        """Accept (or refuse) waiting messages whose context is now complete."""
        progress = True
        while progress and ledger.waiting:
            progress = False
            for key, message in list(ledger.waiting.items()):
                refused = [c for c in message.context if c in ledger.refused]
                if refused:
                    del ledger.waiting[key]
                    self._refuse(
                        ledger,
                        message,
                        "dependency",
                        (
                            f"it follows {refused[0][0]} {list(refused[0][1])}, which this "
                            "agent refused"
                        ),
                    )
                    progress = True
                elif not missing(message.context, ledger.known):
                    del ledger.waiting[key]
                    self._accept(ledger, message)
                    progress = True

    def _refuse(
        self,
        ledger: Ledger,
        message: Waiting,
        rule: str,
        text: str,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Refuse for good: the verdict is written first (if it cannot be, the
        answer is busy and nothing is decided), then kept and given."""
        verdict = {"status": wire.REFUSED, "rule": rule, "message": text, **(extra or {})}
        # What follows these instances is refused in turn; an instance whose keys
        # no context can name (decode_identity takes strings and integers) is
        # followed by nothing.
        refused = [
            identity(i)
            for i in message.instances
            if all(valid_key_value(i.bindings.get(k)) for k in i.action.keys)
        ]
        name = ledger.protocol.name
        try:
            self.refused(
                Refusal(name, message.seq, message.sender, rule, text, incoming=True),
                Verdict(
                    name,
                    message.sender,
                    message.seq,
                    verdict,
                    [encode_identity(r) for r in refused],
                ),
            )
        except ExecutorError as exc:
            log.error("%s", exc)
            return {"status": wire.BUSY}
        ledger.verdicts[(message.sender, message.seq)] = verdict
        ledger.refused.update(refused)
        log.warning(
            "%s: refused %s from %s (%s): %s",
            self.agent,
            message.record.describe(),
            message.sender,
            rule,
            text,
        )
        return verdict

    def _refuse_now(
        self, head: dict[str, Any], message: wire.MessageIn, sender: str, rule: str, text: str
    ) -> dict[str, Any]:
        """Refuse a message that cannot even be read as instances of the protocol."""
        log.warning(
            "%s: refused message %d from %s (%s): %s", self.agent, message.seq, sender, rule, text
        )
        return {**head, "status": wire.REFUSED, "rule": rule, "message": text}


def _bad_key(instances: list[ActionInstance]) -> tuple[str, dict[str, Any]] | None:
    """A key bound to what is no key value (a string or an integer), as the
    semantics word it; an absent key is left to the semantics' own check."""
    for instance in instances:
        for attribute in instance.action.keys:
            value = instance.bindings.get(attribute, "")
            if not valid_key_value(value):
                text = (
                    f"key '{attribute}' of '{instance.name}' must be a string or an integer, "
                    f"not {value!r}"
                )
                return text, {"action": instance.name, "attribute": attribute}
    return None
