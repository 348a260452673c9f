"""Random concurrent attempts against a real SyncServer over HTTP, judged by an oracle.

Every shipped protocol (and the ``nested`` fixture) runs under both policies
("instant" and "batched" with a 5 ms window) on a real uvicorn server on a
loopback port, in a thread of its own; the agents (two per role, and one that
plays every role) send their attempts from the test's thread with httpx. The
judge is the oracle of ``tests/langshaw/test_properties.py``, which restates the
rules of docs/semantics.md over a flat history and shares no code with
``langshaw.semantics``.

An example is a list of rounds. Within a round the attempts are sent at once
(``asyncio.gather``); between rounds every answer is awaited and the round's
batches are read from ``GET .../log``. After each round:

* SAFETY: replaying the log in order (seq, then position in the batch), every
  instance is legal for the oracle given everything before it, and its performer
  plays its role. Under the batched policy the server checks a window's attempts
  one after the other against the state plus the window's earlier accepted
  attempts, in the order the batch records, so the same replay is the right check.
* ACKS: a 200 ``{"seq", "attempt", "size"}`` names exactly the instances sent,
  performed by the sender, at those positions of batch ``seq``, which holds
  ``size`` entries; every logged instance was acknowledged to exactly one
  attempt (so an atomic attempt is all in or all out), and the log is dense.
* NO LEGAL ATTEMPT REFUSED: the server checks an attempt against the state at
  some moment of its round, and that state is always the round's starting history
  plus a prefix of the round's log that ends between two attempts (a batch is
  checked attempt after attempt, and the state never holds half an attempt).
  Legality is not monotone in that prefix (a dependency can be met mid-round, a
  binding can be taken mid-round), so the check is existential: a rejected
  attempt must be illegal against at least one of those prefixes. A server that
  refuses a legal attempt whose legality nothing in the round could change
  fails; a server that refuses everything fails on the first legal attempt.

The sequential mode sends one attempt at a time (a round of one), where the
prefix is unique: rejected exactly when the oracle says illegal.

At the end of each example, the log as a whole is re-read (nothing rewritten),
and for each root enactment ``GET .../enactment`` must list the same instances,
report completion as the oracle does, and offer as ``enabled`` exactly the
actions the oracle finds legal (every enablement is legal, and every legal
candidate performs some enablement).

Attempts mix legal instances (from candidates the oracle accepts), atomic chains
of several instances (also across roles, by the agent playing every role),
chains with an illegal last instance, re-sends of logged instances, the same
legal instance sent twice at once, two bindings of one attribute in one scope at
once (sayso conflicts, also between two roles: Purchase's ``delivery_date``),
both halves of a nono / nogo pair at once by different agents, and arbitrary
(often malformed, sometimes wrong-role) instances, plus "split" chains: one
attempt per instance, sent at once, each legal only after the one before, so the
log must record the order in which the server checked them. An example may first
be steered (one legal attempt at a time, along a path found by breadth-first
search over the oracle) to a state where a sayso conflict between two roles, or
a nono / nogo pair, is on offer, and then open with one. Every kind of attempt
is built afresh against the history at the start of its round; kinds that find
nothing to work with fall back to a legal attempt. Root keys are fresh in every
example, so one server per policy (SQLite log, digests in memory, as
``strabo syncserver`` runs) serves the whole module.

``test_an_unhashable_key_value_is_refused_without_stalling_others`` pins down a
server bug this test found: under the batched policy, a list or object as a key
value crashed the window (its sayso-priority ordering hashed the key before any
check), and no attempt of that window was ever answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import threading
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from langshaw import ABSENT, ActionInstance, LangshawProtocol, json_equal
from langshaw.model import Action
from strabo.serving import serve
from syncserver import SyncServer, create_app
from tests.harness import CLIENT_LIMITS
from tests.langshaw.test_properties import (
    SHIPPED,
    VALUES,
    good,
    oracle_complete,
    oracle_legal,
    pool,
)

MAS = "default"
POLICIES: dict[str, dict[str, Any]] = {
    "instant": {"policy": "instant"},
    "batched": {"policy": "batched", "batch_window_ms": 5},
}
KEY_POOL: list[Any] = ["k1", "k2", 7]  # non-root key values (root values are fresh)
#: Codes a protocol-level rejection may carry (docs/syncserver.md, Errors).
REJECTIONS = {
    403: {"role"},
    409: {"duplicate", "dependency", "nono", "nogo", "sayso", "bound"},
    422: {"unknown-action", "unknown-attribute", "missing-attribute", "key", "type"},
}
BAD_KEYS: list[Any] = [None, True, 1.5, ["k1"], {"k": 1}]
KINDS = [
    "legal",
    "chain",
    "broken-chain",
    "resend",
    "twin",
    "conflict",
    "exclusive",
    "split",
    "arbitrary",
]
EXAMPLES = {"concurrent": 16, "sequential": 8}
_examples = itertools.count(1)
_ids = itertools.count(1)


# The world: one server per policy in a thread, clients on the test's thread -------


def agents_of(protocol: LangshawProtocol) -> dict[str, list[str]]:
    """Two agents per role, and one agent playing every role."""
    agents = {
        f"{protocol.name}.{role}.{i}": [f"{protocol.name}:{role}"]
        for role in protocol.roles
        for i in (1, 2)
    }
    agents[f"{protocol.name}.all"] = [f"{protocol.name}:{role}" for role in protocol.roles]
    return agents


ALL_AGENTS = {a: r for p in SHIPPED.values() for a, r in agents_of(p).items()}


class World:
    """The servers (their own event loop, in a thread) and the test's HTTP clients."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.urls: dict[str, str] = {}
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.server_loop = asyncio.new_event_loop()
        self.stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._serve, name="oracle-servers", daemon=True)
        self.loop = asyncio.new_event_loop()  # the clients' loop, on the test's thread
        self.clients: dict[str, httpx.AsyncClient] = {}

    def _serve(self) -> None:
        asyncio.set_event_loop(self.server_loop)
        try:
            self.server_loop.run_until_complete(self._main())
        finally:
            self.server_loop.close()

    async def _main(self) -> None:
        self.stop = asyncio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                for policy, options in POLICIES.items():
                    server = SyncServer.embedded(
                        list(SHIPPED.values()),
                        ALL_AGENTS,
                        mas=MAS,
                        tokens={a: f"{a}-token" for a in ALL_AGENTS},
                        store=str(self.db / f"{policy}.db"),
                        **options,
                    )
                    url = await stack.enter_async_context(serve(create_app(server)))
                    self.urls[policy] = url
                self.ready.set()
                await self.stop.wait()
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.ready.set()

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(30) or self.error is not None or len(self.urls) != len(POLICIES):
            raise RuntimeError(f"the servers did not start: {self.error!r}")
        for policy, url in self.urls.items():
            self.clients[policy] = httpx.AsyncClient(
                base_url=url, timeout=10, limits=CLIENT_LIMITS
            )

    def run(self, coroutine: Coroutine[Any, Any, Any], seconds: float = 60) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, seconds))

    def close(self) -> None:
        for client in self.clients.values():
            self.run(client.aclose(), 10)
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()
        if self.thread.ident is None:  # never started
            return
        if self.stop is not None:
            self.server_loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)
        assert not self.thread.is_alive(), "the servers did not stop"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    world = World(tmp_path_factory.mktemp("oracle"))
    try:
        world.start()
        yield world
    finally:
        world.close()


# Attempts and the oracle's verdict on them -----------------------------------------


@dataclass
class Attempt:
    agent: str
    roles: frozenset[str]
    instances: list[ActionInstance]
    kind: str
    attempt_id: str | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"instances": [i.to_json() for i in self.instances]}
        if self.attempt_id is not None:
            body["attempt_id"] = self.attempt_id
        return body

    def __repr__(self) -> str:
        return f"<{self.kind} by {self.agent}: {self.instances!r}>"


def legal(protocol: LangshawProtocol, history: Sequence[ActionInstance], attempt: Attempt) -> bool:
    """The oracle on an atomic list: each instance legal given the history and the
    list's earlier instances, performed by an agent playing its role."""
    seen = list(history)
    for instance in attempt.instances:
        if instance.action.actor not in attempt.roles:
            return False
        if not oracle_legal(protocol, seen, instance):
            return False
        seen.append(instance)
    return True


def _scope(action: Action, bindings: dict[str, Any]) -> dict[str, Any]:
    return {k: bindings[k] for k in action.keys}


def _root(protocol: LangshawProtocol, instance: ActionInstance) -> tuple[Any, ...]:
    return tuple(instance.bindings[k] for k in protocol.root_keys)


# Generation: candidates the oracle finds legal, and hostile variations -------------


@dataclass
class Candidate:
    """An instance of ``action`` in one scope, with the attributes its actor binds
    now (``free``) still to choose; the others are what the history fixes."""

    action: Action
    fixed: dict[str, Any]
    free: list[str]
    protocol: LangshawProtocol

    @property
    def scope(self) -> dict[str, Any]:
        return _scope(self.action, self.fixed)

    def instance(self, rng: random.Random, **chosen: Any) -> ActionInstance:
        """With values that fit the attributes' types; an optional attribute is
        sometimes left absent (and stays absent where it was before)."""
        bindings = {k: v for k, v in self.fixed.items() if v is not ABSENT}
        for attr in self.free:
            if attr in chosen:
                bindings[attr] = chosen[attr]
            elif attr not in self.protocol.optional or rng.random() < 0.7:
                bindings[attr] = rng.choice(good(self.protocol, attr))
        return ActionInstance(self.action, bindings)


def _fixed_value(
    protocol: LangshawProtocol,
    history: Sequence[ActionInstance],
    action: Action,
    scope: dict[str, Any],
    attr: str,
) -> tuple[bool, Any]:
    """A guess at the value ``attr`` must carry in ``scope`` (bound here, else
    inherited), or (False, None) if the actor binds it or nothing does. A guess:
    the oracle judges the result."""
    keys = set(scope)
    for h in history:
        if attr in h.action.attributes and _scope(h.action, dict(h.bindings)) == scope:
            return True, h.bindings.get(attr, ABSENT)
    if action.actor in protocol.sayso.get(attr, ()):
        return False, None
    best: tuple[int, Any] | None = None
    for h in history:
        theirs = _scope(h.action, dict(h.bindings))
        if (
            attr in h.action.attributes
            and set(theirs) < keys
            and all(scope[k] == v for k, v in theirs.items())
            and (best is None or len(theirs) > best[0])
        ):
            best = (len(theirs), h.bindings.get(attr, ABSENT))
    return (True, best[1]) if best is not None else (False, None)


def candidates(
    protocol: LangshawProtocol,
    history: Sequence[ActionInstance],
    roots: Sequence[dict[str, Any]],
    rng: random.Random,
) -> list[Candidate]:
    """Every (action, scope) over the example's roots and the key pool that the
    oracle finds legal now (tried with random values for the free attributes)."""
    found = []
    for action in protocol.actions.values():
        others = [k for k in action.keys if k not in protocol.root_keys]
        for root in roots:
            for values in itertools.product(KEY_POOL, repeat=len(others)):
                scope = {k: root[k] for k in action.keys if k in root} | dict(
                    zip(others, values, strict=True)
                )
                fixed: dict[str, Any] = dict(scope)
                free = []
                for attr in action.attributes:
                    if attr in scope:
                        continue
                    if attr in protocol.actions:
                        fixed[attr] = True
                        continue
                    known, value = _fixed_value(protocol, history, action, scope, attr)
                    if known:
                        fixed[attr] = value
                    elif action.actor in protocol.sayso.get(attr, ()):
                        free.append(attr)
                    else:
                        fixed[attr] = rng.choice(VALUES)  # hopeless, but let the oracle say so
                candidate = Candidate(action, fixed, free, protocol)
                if oracle_legal(protocol, list(history), candidate.instance(rng)):
                    found.append(candidate)
    return found


def pick(rng: random.Random, found: list[Candidate]) -> Candidate:
    """An action first, then one of its scopes: actions with many scopes on offer
    (a fresh sub-scope for every key value) would crowd out the others."""
    name = rng.choice(sorted({c.action.name for c in found}))
    return rng.choice([c for c in found if c.action.name == name])


def _correlated(a: dict[str, Any], b: dict[str, Any]) -> bool:
    shared = set(a) & set(b)
    return bool(shared) and all(a[k] == b[k] for k in shared)


def _exclusive(protocol: LangshawProtocol, a: str, b: str) -> bool:
    if any(a in g and b in g for g in protocol.nono) and a != b:
        return True
    return (a, b) in protocol.nogo or (b, a) in protocol.nogo


class Generator:
    """Builds a round's attempts from (kind, seed) pairs against the history at the
    round's start. Kinds that find nothing to work with fall back to ``legal``,
    then to ``arbitrary``."""

    def __init__(
        self,
        protocol: LangshawProtocol,
        roots: list[dict[str, Any]],
        history: list[ActionInstance],
        performers: list[str],
        bad_keys: Sequence[Any],
    ) -> None:
        self.protocol = protocol
        self.bad_keys = bad_keys
        self.roots = roots
        self.history = history
        self.performers = performers
        self.agents = agents_of(protocol)
        self.roles = {
            a: frozenset(r.partition(":")[2] for r in roles) for a, roles in self.agents.items()
        }
        self._cache: list[Candidate] | None = None

    def legal_now(self, rng: random.Random) -> list[Candidate]:
        if self._cache is None:
            self._cache = candidates(self.protocol, self.history, self.roots, rng)
        return self._cache

    def agent_for(self, rng: random.Random, role: str, besides: str | None = None) -> str:
        players = [a for a, roles in self.roles.items() if role in roles and a != besides]
        return rng.choice(players)

    def attempt(
        self, rng: random.Random, agent: str, instances: list[ActionInstance], kind: str
    ) -> Attempt:
        attempt_id = f"oracle-{next(_ids)}" if rng.random() < 0.5 else None
        return Attempt(agent, self.roles[agent], instances, kind, attempt_id)

    def build(self, kind: str, seed: int) -> list[Attempt]:
        rng = random.Random(seed)
        made: list[Attempt] | None = getattr(self, "_" + kind.replace("-", "_"))(rng)
        if made is None:
            made = self._legal(rng) or self._arbitrary(rng)
        return made

    # One attempt ------------------------------------------------------------------

    def _legal(self, rng: random.Random) -> list[Attempt] | None:
        legal = self.legal_now(rng)
        if not legal:
            return None
        candidate = pick(rng, legal)
        agent = self.agent_for(rng, candidate.action.actor)
        return [self.attempt(rng, agent, [candidate.instance(rng)], "legal")]

    def _chain(self, rng: random.Random, broken: bool = False) -> list[Attempt] | None:
        legal = self.legal_now(rng)
        if not legal:
            return None
        # Often the agent playing every role: its chains cross roles and go deep.
        agent = f"{self.protocol.name}.all" if rng.random() < 0.5 else rng.choice(list(self.agents))
        roles = self.roles[agent]
        mine = [c for c in legal if c.action.actor in roles]
        if not mine:
            return None
        chain = [pick(rng, mine).instance(rng)]
        for _ in range(rng.randint(1, 4)):
            later = [
                c
                for c in candidates(self.protocol, self.history + chain, self.roots, rng)
                if c.action.actor in roles
            ]
            if not later:
                break
            chain.append(pick(rng, later).instance(rng))
        kind = "chain"
        if broken:
            kind = "broken-chain"
            if rng.random() < 0.5:
                chain.append(chain[0])  # the same action in the same scope, again
            else:
                chain.append(self._arbitrary_instance(rng))
        return [self.attempt(rng, agent, chain, kind)]

    def _broken_chain(self, rng: random.Random) -> list[Attempt] | None:
        return self._chain(rng, broken=True)

    def _split(self, rng: random.Random) -> list[Attempt] | None:
        """A chain cut into one attempt per instance, sent at once (by agents of
        any roles): each is legal only after the one before, so the outcome
        depends on the order the server takes them in, and the log must record
        the order it checked them in."""
        first = self.legal_now(rng)
        if not first:
            return None
        instances = [pick(rng, first).instance(rng)]
        for _ in range(rng.randint(1, 2)):
            later = [
                c
                for c in candidates(self.protocol, self.history + instances, self.roots, rng)
                if not oracle_legal(self.protocol, self.history, c.instance(rng))
            ]
            if not later:
                break
            instances.append(pick(rng, later).instance(rng))
        if len(instances) == 1:
            return None
        attempts = [
            self.attempt(rng, self.agent_for(rng, i.action.actor), [i], "split") for i in instances
        ]
        if rng.random() < 0.5:
            rng.shuffle(attempts)
        return attempts

    def _resend(self, rng: random.Random) -> list[Attempt] | None:
        if not self.history:
            return None
        index = rng.randrange(len(self.history))
        instance = self.history[index]
        agent = (
            self.performers[index]
            if rng.random() < 0.5
            else self.agent_for(rng, instance.action.actor)
        )
        return [self.attempt(rng, agent, [instance], "resend")]

    def _arbitrary_instance(self, rng: random.Random) -> ActionInstance:
        action = rng.choice(list(self.protocol.actions.values()))
        root = rng.choice(self.roots)
        bindings: dict[str, Any] = {}
        for attr in action.attributes:
            if attr in root:
                bindings[attr] = root[attr]
            elif attr in self.protocol.keys:
                bindings[attr] = rng.choice(KEY_POOL)
            elif attr in self.protocol.actions:
                bindings[attr] = rng.choice([True, True, 1])
            else:
                seen = [h.bindings[attr] for h in self.history if attr in h.bindings]
                bindings[attr] = rng.choice(seen + pool(self.protocol, attr)[:6])
        mutation = rng.choice(["none", "none", "none", "drop", "extra", "badkey"])
        if mutation == "drop":
            bindings.pop(rng.choice(list(bindings)))
        elif mutation == "extra":
            bindings["not_an_attribute"] = 1
        elif mutation == "badkey":
            bindings[rng.choice(action.keys)] = rng.choice(self.bad_keys)
        return ActionInstance(action, bindings)

    def _arbitrary(self, rng: random.Random) -> list[Attempt]:
        instance = self._arbitrary_instance(rng)
        if rng.random() < 0.2:
            agent = rng.choice(list(self.agents))  # perhaps playing another role
        else:
            agent = self.agent_for(rng, instance.action.actor)
        return [self.attempt(rng, agent, [instance], "arbitrary")]

    # Two attempts at once ---------------------------------------------------------

    def _twin(self, rng: random.Random) -> list[Attempt] | None:
        legal = self.legal_now(rng)
        if not legal:
            return None
        candidate = pick(rng, legal)
        instance = candidate.instance(rng)
        first = self.agent_for(rng, candidate.action.actor)
        second = first if rng.random() < 0.3 else self.agent_for(rng, candidate.action.actor)
        return [
            self.attempt(rng, first, [instance], "twin"),
            self.attempt(rng, second, [instance], "twin"),
        ]

    def _conflict(self, rng: random.Random, of_roles: bool = False) -> list[Attempt] | None:
        """Two legal instances in one scope that bind one attribute differently;
        by two roles when the protocol allows it (a sayso chain), else by two
        agents of one role."""
        pairs = conflict_pairs(self.legal_now(rng))
        # Two different values are needed: a type with one good value (a const)
        # leaves no conflict to make.
        pairs = [p for p in pairs if len(good(self.protocol, p[2])) >= 2]
        across = [p for p in pairs if p[0].action.actor != p[1].action.actor]
        if of_roles or (across and rng.random() < 0.7):
            pairs = across
        if not pairs:
            return None
        a, b, attr = rng.choice(pairs)
        values = good(self.protocol, attr)
        one, other = rng.sample(values, 2)
        while json_equal(one, other):
            one, other = rng.sample(values, 2)
        first = self.agent_for(rng, a.action.actor)
        second = self.agent_for(rng, b.action.actor, besides=first)
        kind = "conflict" if a.action.actor == b.action.actor else "conflict-of-roles"
        return [
            self.attempt(rng, first, [a.instance(rng, **{attr: one})], kind),
            self.attempt(rng, second, [b.instance(rng, **{attr: other})], kind),
        ]

    def _conflict_of_roles(self, rng: random.Random) -> list[Attempt] | None:
        return self._conflict(rng, of_roles=True)

    def _exclusive(self, rng: random.Random) -> list[Attempt] | None:
        """Both halves of a nono (or nogo) pair, in correlated scopes, by two agents."""
        pairs = exclusive_pairs(self.protocol, self.legal_now(rng))
        if not pairs:
            return None
        a, b = rng.choice(pairs)
        first = self.agent_for(rng, a.action.actor)
        second = self.agent_for(rng, b.action.actor, besides=first)
        return [
            self.attempt(rng, first, [a.instance(rng)], "exclusive"),
            self.attempt(rng, second, [b.instance(rng)], "exclusive"),
        ]


def conflict_pairs(legal: list[Candidate]) -> list[tuple[Candidate, Candidate, str]]:
    """Pairs of legal candidates in one scope that both bind some attribute now."""
    return [
        (a, b, attr)
        for a, b in itertools.combinations_with_replacement(legal, 2)
        if a.scope == b.scope
        for attr in sorted(set(a.free) & set(b.free))
    ]


def exclusive_pairs(
    protocol: LangshawProtocol, legal: list[Candidate]
) -> list[tuple[Candidate, Candidate]]:
    """Pairs of legal candidates that exclude each other (nono, nogo) if correlated."""
    return [
        (a, b)
        for a, b in itertools.combinations(legal, 2)
        if _exclusive(protocol, a.action.name, b.action.name) and _correlated(a.scope, b.scope)
    ]


STEERS = ["conflict-of-roles", "exclusive"]
_paths: dict[tuple[str, str], list[ActionInstance] | None] = {}


def path_to(protocol: LangshawProtocol, target: str) -> list[ActionInstance] | None:
    """A shortest legal history (in a root enactment whose root keys are 'ROOT')
    after which a pair of ``target`` is on offer, or None if there is none within
    a few steps. Found once per protocol by breadth-first search over the oracle."""
    if (protocol.name, target) not in _paths:
        _paths[(protocol.name, target)] = _search(protocol, target)
    return _paths[(protocol.name, target)]


def _search(protocol: LangshawProtocol, target: str) -> list[ActionInstance] | None:
    if target == "exclusive" and not (protocol.nono or protocol.nogo):
        return None
    if target == "conflict-of-roles" and all(len(c) < 2 for c in protocol.sayso.values()):
        return None
    root = {k: "ROOT" for k in protocol.root_keys}
    rng = random.Random(0)
    frontier: list[list[ActionInstance]] = [[]]
    visited: set[frozenset[tuple[str, tuple[Any, ...]]]] = set()
    for _ in range(6):
        following = []
        for history in frontier:
            found = candidates(protocol, history, [root], rng)
            pairs: list[Any] = (
                exclusive_pairs(protocol, found)
                if target == "exclusive"
                else [p for p in conflict_pairs(found) if p[0].action.actor != p[1].action.actor]
            )
            if pairs:
                return history
            for candidate in found:
                after = [*history, candidate.instance(rng)]
                state = frozenset(
                    (
                        i.action.name,
                        tuple(sorted(_scope(i.action, dict(i.bindings)).items(), key=str)),
                    )
                    for i in after
                )
                if state not in visited and len(visited) < 500:
                    visited.add(state)
                    following.append(after)
        frontier = following
    return None


# Running an example over HTTP ------------------------------------------------------


@dataclass
class Answer:
    status: int
    body: Any


@dataclass
class Example:
    protocol: LangshawProtocol
    policy: str
    client: httpx.AsyncClient
    history: list[ActionInstance] = field(default_factory=list)
    performers: list[str] = field(default_factory=list)
    batches: list[dict[str, Any]] = field(default_factory=list)
    start: int = 0
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return f"/mas/{MAS}/protocols/{self.protocol.name}"

    def headers(self, agent: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {agent}-token"}

    @property
    def reader(self) -> str:
        return f"{self.protocol.name}.all"

    async def send(self, attempt: Attempt) -> Answer:
        response = await self.client.post(
            f"{self.path}/attempts", json=attempt.body(), headers=self.headers(attempt.agent)
        )
        return Answer(response.status_code, response.json())

    async def log_after(self, after: int) -> list[dict[str, Any]]:
        response = await self.client.get(
            f"{self.path}/log",
            params={"after": after, "limit": 5000},
            headers=self.headers(self.reader),
        )
        assert response.status_code == 200, response.text
        events: list[dict[str, Any]] = response.json()["events"]
        return events

    async def last_seq(self) -> int:
        response = await self.client.get(self.path, headers=self.headers(self.reader))
        assert response.status_code == 200, response.text
        last: int = response.json()["last_seq"]
        return last

    def instance(self, entry: dict[str, Any]) -> ActionInstance:
        return ActionInstance(self.protocol.action(entry["action"]), entry["bindings"])

    async def group(self, attempts: list[Attempt]) -> None:
        """Send ``attempts`` at once, wait for every answer, read the batches they
        made, and judge them."""
        answers = await asyncio.gather(*(self.send(a) for a in attempts))
        after = self.start + len(self.batches)
        batches = await self.log_after(after)
        self.judge(attempts, answers, batches, after)
        self.batches.extend(batches)

    def judge(
        self,
        attempts: list[Attempt],
        answers: list[Answer],
        batches: list[dict[str, Any]],
        after: int,
    ) -> None:
        protocol, history = self.protocol, self.history
        context = (
            f"\nattempts: {attempts}\nanswers: {answers}\nbatches: {batches}\nhistory: {history}"
        )
        # The log is dense, and only this round's batches follow the history.
        assert [b["seq"] for b in batches] == list(range(after + 1, after + 1 + len(batches))), (
            context
        )
        entries = {b["seq"]: b["instances"] for b in batches}
        flat = [(b["seq"], i) for b in batches for i in range(len(b["instances"]))]
        owner: dict[tuple[int, int], int] = {}
        for index, (attempt, answer) in enumerate(zip(attempts, answers, strict=True)):
            key = f"{attempt.kind}-{'accepted' if answer.status == 200 else 'rejected'}"
            self.stats[key] = self.stats.get(key, 0) + 1
            if answer.status != 200:
                code = answer.body.get("error", {}).get("code")
                assert code in REJECTIONS.get(answer.status, set()), (
                    f"unexpected answer {answer.status} {answer.body} to {attempt!r}{context}"
                )
                continue
            # ACKS: the answer names this attempt's instances, in the log at its seq.
            seq, positions, size = (
                answer.body["seq"],
                answer.body["attempt"],
                answer.body["size"],
            )
            assert "others" not in answer.body, context
            assert seq in entries, (
                f"acknowledged at seq {seq}, not among this round's batches{context}"
            )
            batch = entries[seq]
            assert len(positions) == len(attempt.instances), context
            for position, sent in zip(positions, attempt.instances, strict=True):
                assert 0 <= position < len(batch), context
                logged = batch[position]
                assert logged["action"] == sent.action.name, context
                assert logged["performer"] == attempt.agent, context
                assert json_equal(logged["bindings"], dict(sent.bindings)), context
                assert (seq, position) not in owner, (
                    f"two attempts acknowledged for {seq}:{position}{context}"
                )
                owner[(seq, position)] = index
            assert size == len(batch), f"size {size}, but batch {seq} holds {len(batch)}{context}"
            if self.policy == "instant":
                assert positions == list(range(len(batch))), context
        assert set(owner) == set(flat), f"logged instances nobody was told of{context}"
        # SAFETY: the log replayed in order is legal for the oracle.
        seen = list(history)
        for seq, position in flat:
            instance = self.instance(entries[seq][position])
            attempt = attempts[owner[(seq, position)]]
            assert instance.action.actor in attempt.roles, context
            assert oracle_legal(protocol, seen, instance), (
                f"the server accepted an illegal {instance!r} "
                f"(batch {seq}, position {position}){context}"
            )
            seen.append(instance)
        # NO LEGAL ATTEMPT REFUSED: illegal against some state it could have met.
        spans: dict[int, list[int]] = {}
        for j, place in enumerate(flat):
            spans.setdefault(owner[place], []).append(j)
        cuts = [
            j
            for j in range(len(flat) + 1)
            if all(max(s) < j or min(s) >= j for s in spans.values())
        ]
        grown = seen[len(history) :]
        for attempt, answer in zip(attempts, answers, strict=True):
            if answer.status == 200:
                continue
            assert any(not legal(protocol, history + grown[:j], attempt) for j in cuts), (
                f"the server refused {attempt!r} ({answer.body}), "
                f"legal in every state it could meet{context}"
            )
        if len(attempts) == 1:  # exact: one attempt, one state
            assert (answers[0].status == 200) == legal(protocol, history, attempts[0]), context
        for seq, position in flat:
            self.performers.append(attempts[owner[(seq, position)]].agent)
        history.extend(grown)

    async def finish(self, roots: list[dict[str, Any]]) -> None:
        """The log, re-read whole, is what the rounds saw; each enactment's view
        (instances, completion, enabled actions) agrees with the oracle."""
        again = await self.log_after(self.start)
        assert again == self.batches, "the log changed after the fact"
        for keys in roots:
            root = tuple(keys[k] for k in self.protocol.root_keys)
            response = await self.client.get(
                f"{self.path}/enactment",
                params={k: str(v) for k, v in keys.items()},
                headers=self.headers(self.reader),
            )
            mine = [h for h in self.history if _root(self.protocol, h) == root]
            if not mine:
                assert response.status_code == 404, response.text
                continue
            assert response.status_code == 200, response.text
            view = response.json()
            assert [(i["action"], i["bindings"]) for i in view["instances"]] == [
                (h.action.name, dict(h.bindings)) for h in mine
            ]
            assert view["complete"] == oracle_complete(self.protocol, self.history, root)
            self.check_enabled(view["enabled"], keys, mine)

    def check_enabled(
        self,
        enabled: dict[str, list[dict[str, Any]]],
        keys: dict[str, Any],
        mine: list[ActionInstance],
    ) -> None:
        rng = random.Random(0)
        used: dict[str, list[Any]] = {}
        for h in mine:
            for k in h.action.keys:
                used.setdefault(k, []).append(h.bindings[k])
        offered = [(role, e) for role, es in enabled.items() for e in es]
        for role, e in offered:
            action = self.protocol.action(e["action"])
            assert action.actor == role
            bindings = dict(e["fixed"])
            bindings |= {k: f"fresh-{next(_ids)}" for k in e["new_keys"]}
            bindings |= {a: rng.choice(good(self.protocol, a)) for a in e["to_bind"]}
            instance = ActionInstance(action, bindings)
            assert oracle_legal(self.protocol, self.history, instance), (
                f"{role} is offered {e}, but {instance!r} is illegal\nhistory: {self.history}"
            )

        def performs(e: dict[str, Any], instance: ActionInstance) -> bool:
            if e["action"] != instance.action.name:
                return False
            for k in instance.action.keys:
                value = instance.bindings[k]
                fresh = not any(type(u) is type(value) and u == value for u in used.get(k, []))
                if fresh != (k in e["new_keys"]):
                    return False
            return all(json_equal(instance.bindings[a], v) for a, v in e["fixed"].items())

        for candidate in candidates(self.protocol, self.history, [keys], rng):
            instance = candidate.instance(rng)
            assert any(performs(e, instance) for _, e in offered), (
                f"{instance!r} is legal, but no enablement offers it: {offered}"
                f"\nhistory: {self.history}"
            )


async def enact(
    world: World,
    protocol: LangshawProtocol,
    policy: str,
    plan: list[list[tuple[str, int]]],
    steer: str | None,
    sequential: bool,
    stats: dict[str, int],
) -> None:
    example = Example(protocol, policy, world.clients[policy], stats=stats)
    example.start = await example.last_seq()
    n = next(_examples)
    bad_keys = BAD_KEYS
    # Fresh root enactments: one named by a string, one by an integer.
    roots: list[dict[str, Any]] = [
        {k: f"r{n}-{policy}" for k in protocol.root_keys},
        {k: 10**9 + 2 * n + (policy == "batched") for k in protocol.root_keys},
    ]
    path = path_to(protocol, steer) if steer is not None else None
    if steer is not None and path is not None:
        # First lead the first enactment, one legal attempt at a time, to a state
        # where such a pair is on offer, and open the first round with one.
        for step in path:
            instance = ActionInstance(step.action, {**step.bindings, **roots[0]})
            agent = f"{protocol.name}.{step.action.actor}.1"
            await example.group(
                [Attempt(agent, frozenset({step.action.actor}), [instance], "steer")]
            )
        plan = [[(steer, plan[0][0][1]), *plan[0]], *plan[1:]]
    for round_plan in plan:
        generator = Generator(protocol, roots, example.history, example.performers, bad_keys)
        attempts = [a for kind, seed in round_plan for a in generator.build(kind, seed)]
        event(f"round of {len(attempts)} attempts")
        if sequential:
            for attempt in attempts:
                await example.group([attempt])
        else:
            await example.group(attempts)
    await example.finish(roots)


PLANS = st.lists(
    st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2**32 - 1)), min_size=1, max_size=4),
    min_size=1,
    max_size=5,
)


@pytest.mark.parametrize("mode", ["concurrent", "sequential"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_attempts_over_http_agree_with_the_oracle(
    world: World, name: str, policy: str, mode: str
) -> None:
    protocol = SHIPPED[name]
    stats: dict[str, int] = {}

    @settings(
        max_examples=EXAMPLES[mode],
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(plan=PLANS, steer=st.sampled_from([None, *STEERS]))
    def run(plan: list[list[tuple[str, int]]], steer: str | None) -> None:
        world.run(enact(world, protocol, policy, plan, steer, mode == "sequential", stats))

    run()
    # The generator really exercises the server: some attempts in, some out.
    assert any(k.endswith("-accepted") for k in stats), stats
    assert any(k.endswith("-rejected") for k in stats), stats


@pytest.mark.parametrize(
    "policy",
    [
        "instant",
        "batched",
    ],
)
async def test_an_unhashable_key_value_is_refused_without_stalling_others(policy: str) -> None:
    """A key value the rules refuse (``key``, 422) must be refused like any other,
    and must not keep an agent's legal attempt in the same window from its answer."""
    protocol = SHIPPED["contract-net.lsh"]
    agents = {"customer": ["Customer"], "rival": ["Customer"]}
    server = SyncServer.embedded(
        [protocol], agents, tokens={a: f"{a}-token" for a in agents}, **POLICIES[policy]
    )
    path = f"/mas/{MAS}/protocols/{protocol.name}/attempts"

    async def call_for_proposals(client: httpx.AsyncClient, agent: str, cfp: Any) -> Answer:
        bindings = {"cfp": cfp, "request": "a room", "budget": 100}
        response = await client.post(
            path,
            json={"instances": [{"action": "CallForProposals", "bindings": bindings}]},
            headers={"Authorization": f"Bearer {agent}-token"},
        )
        return Answer(response.status_code, response.json())

    async with (
        serve(create_app(server), timeout_graceful_shutdown=0.5) as url,
        httpx.AsyncClient(base_url=url, timeout=2) as client,
    ):
        hostile, legal = await asyncio.gather(
            call_for_proposals(client, "rival", ["c1"]),
            call_for_proposals(client, "customer", "c2"),
            return_exceptions=True,
        )
    assert isinstance(legal, Answer) and legal.status == 200, legal
    assert isinstance(hostile, Answer) and hostile.status == 422, hostile
    assert hostile.body["error"]["code"] == "key"
