"""The SyncServer core: the MASes it hosts, who may do what, and their ledgers.

This is the whole server without HTTP. The Starlette app (``syncserver.app``)
and the in-process ``peach.LocalExecutor`` both call it, so an attempt is
authorized, checked and finalized by the same code whichever way it arrives.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from langshaw import ActionInstance, LangshawProtocol, Violation
from langshaw.identity import describe_changes, meaning_digest, meaning_text
from langshaw.values import json_problem, valid_key_value
from syncserver._mandates import MandateBook
from syncserver._pgstore import PostgresStore
from syncserver.batch import Batch
from syncserver.config import POLICIES, AgentConfig, Config, MASConfig
from syncserver.errors import Rejected, ServiceError
from syncserver.ledger import Attempt, Ledger, Receipt
from syncserver.mandate import Mandate
from syncserver.sqlite import SQLiteStore
from syncserver.store import MemoryStore, Store, StoreError, is_url


def open_store(spec: str | Path, synchronous: str = "normal") -> Store:
    """``:memory:`` gives a MemoryStore, a ``postgresql://`` URL a PostgresStore
    (a log several servers share), anything else is a SQLite file path."""
    if str(spec) == ":memory:":
        return MemoryStore()
    if is_url(spec):
        return PostgresStore(str(spec))
    return SQLiteStore(spec, synchronous=synchronous)


class SyncServer:
    """Hosts the social state of every enactment of the configured MASes.

    ``policy`` is ``"instant"`` (each attempt finalized on arrival; first come,
    first served) or ``"batched"`` (attempts arriving within ``batch_window_ms``
    finalized together, sayso priority first). ``store`` is a Store or a path
    (``":memory:"`` for an ephemeral one). With ``fingerprints`` (the default with
    a durable store) the state keeps 64-bit digests of bound values instead of
    the values, so its memory does not grow with their size; the log keeps the
    values.
    """

    def __init__(
        self,
        config: Config,
        *,
        store: Store | str | None = None,
        policy: str | None = None,
        batch_window_ms: float | None = None,
        synchronous: str = "normal",
        subscriber_backlog: int | None = None,
        fingerprints: bool | None = None,
    ) -> None:
        self.config = config
        self.subscriber_backlog = subscriber_backlog or config.limits.stream_backlog
        self.policy = policy or config.policy or "instant"
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be 'instant' or 'batched', not {self.policy!r}")
        self.batch_window_ms = batch_window_ms or config.batch_window_ms or 20.0
        if store is None:
            store = config.db or ":memory:"
        self.store = open_store(store, synchronous) if isinstance(store, str) else store
        # A memory store holds every value anyway: digests would save nothing there.
        self.fingerprints = not self.store.inline if fingerprints is None else fingerprints
        self.ledgers: dict[tuple[str, str], Ledger] = {}
        #: Bytes of recent batches each ledger keeps for readers catching up
        #: (set by the HTTP app; in-process readers need no cache).
        self.tail_bytes = 0
        self._started = False

    @classmethod
    def embedded(
        cls,
        protocols: Sequence[LangshawProtocol],
        agents: Mapping[str, Sequence[str]],
        *,
        mas: str = "default",
        tokens: Mapping[str, str] | None = None,
        acts_for: Mapping[str, Mapping[str, Any]] | None = None,
        mandates: Mapping[str, Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> SyncServer:
        """A server for one MAS built in code: ``agents`` maps a name to its roles
        (``"Role"`` or ``"Protocol:Role"``); tokens default to the agent names;
        ``acts_for`` maps a name to its pins (syncserver.acts_for), ``mandates``
        to its mandate, as the configuration writes it (syncserver.mandate)."""
        from syncserver.config import build_config

        pins = acts_for or {}
        bounds = mandates or {}
        data = {
            "mas": {
                mas: {
                    "protocols": list(protocols),
                    "agents": {
                        name: {
                            "roles": list(roles),
                            "token": (tokens or {}).get(name, name),
                            **({"acts_for": pins[name]} if name in pins else {}),
                            **({"mandate": bounds[name]} if name in bounds else {}),
                        }
                        for name, roles in agents.items()
                    },
                }
            }
        }
        config = build_config(data, source="<embedded>")
        return cls(config, **options)

    # Life cycle -------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        await self.store.open()
        try:
            for system in self.config.mas.values():
                books: list[MandateBook] = []  # the MAS's: its enactments counted together
                for protocol in system.protocols.values():
                    await self._same_protocol(system.name, protocol)
                    ledger = Ledger(
                        system.name,
                        protocol,
                        self.store,
                        policy=self.policy,
                        batch_window_ms=self.batch_window_ms,
                        subscriber_backlog=self.subscriber_backlog,
                        fingerprints=self.fingerprints,
                    )
                    ledger.book = MandateBook(
                        protocol, [a.name for a in system.agents.values() if a.mandate], books
                    )
                    ledger.tail.limit = self.tail_bytes
                    ledger.pages.limit = self.tail_bytes
                    await ledger.load()
                    self.ledgers[(system.name, protocol.name)] = ledger
        except BaseException:
            await self.store.close()
            raise
        self._started = True

    async def _same_protocol(self, mas: str, protocol: LangshawProtocol) -> None:
        """Refuse a log written with another text of ``protocol`` (one that means
        something else: ``langshaw.identity``), or record this one's for a new
        log. What the log holds was checked under its own text, which may have
        allowed what this one forbids; and servers sharing a log must agree."""
        text = meaning_text(protocol)
        digest = meaning_digest(text)
        recorded, meaning = await self.store.record_protocol(mas, protocol.name, digest, text)
        if recorded == digest:
            return
        changes = describe_changes(json.loads(meaning), json.loads(text)) or ["another meaning"]
        shown = "; ".join(changes[:4]) + (f"; {len(changes) - 4} more" if len(changes) > 4 else "")
        raise StoreError(
            f"{mas}/{protocol.name}: {protocol.source} is not the text of {protocol.name} "
            f"this log was written with ({shown}): serve the log with that text, or use "
            "a new --db"
        )

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        for ledger in self.ledgers.values():
            await ledger.close()
        await self.store.close()

    def cache_tail(self, limit: int) -> None:
        """Keep ``limit`` bytes of each ledger's newest batches for readers."""
        self.tail_bytes = limit
        for ledger in self.ledgers.values():
            ledger.tail.limit = limit
            ledger.pages.limit = limit

    def close_streams(self) -> None:
        """End every live event stream (clients reconnect and resume)."""
        for ledger in self.ledgers.values():
            ledger.end_subscriptions()

    async def __aenter__(self) -> SyncServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # Who is asking ------------------------------------------------------------------

    def system(self, mas: str) -> MASConfig:
        system = self.config.mas.get(mas)
        if system is None:
            shown = mas if len(mas) <= 80 else mas[:77] + "..."
            raise ServiceError(404, "unknown-mas", f"no multiagent system named {shown!r} here")
        return system

    def authenticate(self, mas: str, token: str | None) -> AgentConfig:
        if not token:
            raise ServiceError(
                401, "unauthorized", "missing bearer token: send 'Authorization: Bearer <token>'"
            )
        if mas not in self.config.mas and not any(
            token in other.tokens for other in self.config.mas.values()
        ):
            # Only an agent of some MAS here learns which MAS names exist.
            raise ServiceError(401, "unauthorized", "this token is not valid here")
        system = self.system(mas)
        name = system.tokens.get(token)
        # The lookup finds the candidate; a constant-time comparison confirms it.
        if name is not None and hmac.compare_digest(system.agents[name].token, token):
            return system.agents[name]
        raise ServiceError(401, "unauthorized", f"this token is not valid for {mas!r}")

    def agent(self, mas: str, name: str) -> AgentConfig:
        """An agent by name, for in-process callers that are trusted to say who they are."""
        agent = self.system(mas).agents.get(name)
        if agent is None:
            known = ", ".join(self.system(mas).agents)
            raise ServiceError(401, "unknown-agent", f"{mas!r} has no agent {name!r} ({known})")
        return agent

    def ledger(self, mas: str, protocol: str, agent: AgentConfig) -> Ledger:
        system = self.system(mas)
        ledger = self.ledgers.get((mas, protocol))
        if ledger is None:
            known = ", ".join(system.protocols)
            raise ServiceError(
                404, "unknown-protocol", f"{mas!r} hosts no protocol {protocol!r} ({known})"
            )
        if protocol not in agent.roles:
            raise ServiceError(
                403, "forbidden", f"agent {agent.name!r} plays no role in {protocol!r}"
            )
        return ledger

    # Attempting ---------------------------------------------------------------------

    async def attempt(
        self,
        mas: str,
        protocol: str,
        agent: AgentConfig,
        instances: Sequence[ActionInstance | Mapping[str, Any]],
        attempt_id: str | None = None,
    ) -> Receipt:
        """Finalize an atomic list of instances performed by ``agent``.

        Returns, once it is committed, the batch that holds them and their
        positions in it; raises Rejected for a protocol violation and ServiceError
        for anything else.
        """
        if not self._started:
            raise ServiceError(503, "not-started", "the server is not running")
        ledger = self.ledger(mas, protocol, agent)
        if not instances:
            raise ServiceError(400, "bad-request", "an attempt needs at least one instance")
        parsed = [self._instance(ledger.protocol, item, i) for i, item in enumerate(instances)]
        for index, instance in enumerate(parsed):  # NaN, Infinity, 1e400: no log can hold them
            problem = json_problem(instance.bindings, f"instances[{index}].bindings")
            if problem is not None:
                raise ServiceError(400, "bad-json", f"the attempt is not valid JSON: {problem}")
        roles = agent.roles[protocol]
        for index, instance in enumerate(parsed):
            if instance.action.actor not in roles:
                raise Rejected(
                    Violation(
                        "role",
                        f"agent {agent.name!r} may not perform {instance.action.name!r}: it is "
                        f"{instance.action.actor}'s, and {agent.name!r} plays "
                        f"{', '.join(sorted(roles))}",
                        action=instance.action.name,
                        index=index,
                    )
                )
        violation = agent.acts_for.check(agent.name, parsed)
        if violation is not None:
            raise Rejected(violation)
        mandate = agent.mandate or None
        if mandate is not None:
            await self._within(mandate, ledger, parsed)
        return await ledger.attempt(Attempt(parsed, agent.name, roles, attempt_id, mandate))

    @staticmethod
    async def _within(mandate: Mandate, ledger: Ledger, instances: list[ActionInstance]) -> None:
        """Refuse what a mandate bounds before the turn: values, and a ceiling
        read from the enactment's values (bound before, so read outside the
        turn); the counts are checked in the ledger's turn."""
        violation = mandate.check_values(instances)
        ceiling = mandate.ceiling
        if violation is None and ceiling is not None:
            keys = ledger.protocol.root_keys
            # An instance whose root is no valid key (unbound, a list) is the
            # protocol's to refuse, in the ledger: the ceiling passes it by.
            rooted = [
                (tuple(i.bindings.get(k) for k in keys), i)
                for i in instances
                if i.action.name in ceiling.on
            ]
            rooted = [(r, i) for r, i in rooted if all(valid_key_value(v) for v in r)]
            for root in dict.fromkeys(r for r, _ in rooted):
                try:
                    view = await ledger.view(root)
                except StoreError as exc:  # as everywhere else a read fails: a 503
                    raise ServiceError(503, "store-failed", str(exc)) from None
                mine = [i for r, i in rooted if r == root]
                violation = mandate.check_ceiling(mine, view)
                if violation is not None:
                    violation = replace(violation, index=instances.index(mine[violation.index]))
                    break
        if violation is not None:
            raise Rejected(violation)

    @staticmethod
    def _instance(
        protocol: LangshawProtocol, item: ActionInstance | Mapping[str, Any], index: int
    ) -> ActionInstance:
        if isinstance(item, ActionInstance):
            name, bindings = item.action.name, item.bindings
        else:
            name, bindings = item["action"], item["bindings"]
        action = protocol.actions.get(name)
        if action is None:
            raise Rejected(
                Violation(
                    "unknown-action",
                    f"{protocol.name} has no action {name!r} (actions: "
                    f"{', '.join(protocol.actions)})",
                    action=name,
                    index=index,
                )
            )
        if isinstance(item, ActionInstance) and item.action is action:
            return item  # built from this very protocol (in-process): use it as it is
        if isinstance(item, ActionInstance) and item.action.attributes != action.attributes:
            raise ServiceError(
                422,
                "protocol-mismatch",
                f"{name!r} has attributes {list(item.action.attributes)} in the agent's protocol "
                f"but {list(action.attributes)} in the server's: they load different files",
            )
        return ActionInstance(action, dict(bindings))

    # Reading ------------------------------------------------------------------------

    async def read(
        self, mas: str, protocol: str, agent: AgentConfig, after: int, limit: int
    ) -> list[Batch]:
        return await self.ledger(mas, protocol, agent).read(after, limit)

    def subscribe(
        self, mas: str, protocol: str, agent: AgentConfig, after: int
    ) -> AsyncIterator[Batch]:
        return self.ledger(mas, protocol, agent).subscribe(after)
