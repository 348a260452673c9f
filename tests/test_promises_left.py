"""Promises of docs/syncserver.md, docs/patterns.md, docs/peach.md and
docs/llm-agents.md that no other test held: each test here quotes the sentence
it keeps true, and fails if the promise breaks. Real parts: a real PostgreSQL,
real peers over HTTP on loopback, a scripted model behind a real local server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from langshaw import ActionInstance
from peach import ExecutorError, LocalExecutor, PeachAdapter
from peach.llm import Budget, LLMAgent
from peach.peer import PeerExecutor
from peach.peer import _wire as wire
from strabo.simulate._coded import CodedAgent, PolicyCaller
from strabo.simulate.move import Move
from syncserver import SyncServer
from syncserver._pgstore import PostgresStore
from syncserver.errors import Rejected, ServiceError
from tests.conftest import SIMPLE_CREATE, load
from tests.peach.llm.fake import PROVIDERS, FakeModel
from tests.peach.test_peer import directory, settle
from tests.syncserver.postgres.conftest import pg_cluster, pg_url  # noqa: F401 (fixtures)

SIMPLE = load("atomic-ucp.lsh")
PURCHASE = load("purchase.lsh")

# docs/syncserver.md (Configuration, mandate): "With several servers on one
# PostgreSQL log, a server counts the batches other servers committed once it
# has followed them, and a turn that fails to commit leaves its counts high
# until the state is rebuilt (refusing more, never less)."

ONE_CREATE = {"platform": {"actions": {"Create": {"per_run": 1}}}}
UCP_AGENTS = {"platform": ["Platform"], "business": ["Business"]}


class FailingWrite(PostgresStore):
    """Fails the write of its next turn (``fail``): ``"lost"`` before the
    statement runs (nothing written), ``"committed"`` after it committed (a
    connection that drops before the answer: the outcome is unknown to the
    server, but the log holds the turn)."""

    fail: str | None = None

    async def _write(self, conn: Any, query: str, *args: Any) -> list[Any]:
        fail, self.fail = self.fail, None
        if fail == "lost":
            raise OSError("disk full (simulated)")
        rows = await super()._write(conn, query, *args)
        if fail == "committed":
            raise ConnectionResetError("the answer was lost after the commit (simulated)")
        return rows


def create(cid: str) -> ActionInstance:
    return ActionInstance(SIMPLE.action("Create"), {"cid": cid, **SIMPLE_CREATE})


async def attempt(server: SyncServer, instances: Sequence[ActionInstance], aid: str) -> Any:
    """The receipt, or the exception, of one attempt by ``platform``."""
    try:
        return await server.attempt(
            "default", "SimpleUCP", server.agent("default", "platform"), list(instances), aid
        )
    except ServiceError as exc:  # Rejected included
        return exc


async def creates_in_log(server: SyncServer) -> list[str]:
    """The oracle: platform's Creates in the log, read back from PostgreSQL."""
    return [
        e.instance["cid"]
        for batch in await server.store.load("default", SIMPLE)
        for e in batch.entries
        if e.performer == "platform" and e.instance.action.name == "Create"
    ]


@pytest.mark.parametrize("failure", ["lost", "committed"])
async def test_a_failed_turn_on_postgres_refuses_more_never_less(
    pg_url: str,  # noqa: F811 (the fixture)
    failure: str,
) -> None:
    store = FailingWrite(pg_url)
    server = SyncServer.embedded([SIMPLE], UCP_AGENTS, store=store, mandates=ONE_CREATE)
    async with server, asyncio.timeout(30):
        store.fail = failure
        failed = await attempt(server, [create("a")], "a-1")
        assert isinstance(failed, ServiceError) and failed.code == "store-failed", failed
        second = await attempt(server, [create("b")], "b-1")
        if failure == "committed":
            # Never less: the Create the server could not confirm is in the log, and counts.
            assert isinstance(second, Rejected), second
            assert second.violation.rule == "mandate", second.violation
            assert "actions.Create.per_run = 1" in second.violation.message
            assert await creates_in_log(server) == ["a"]
        else:
            # High only until the rebuild: the Create that was not written no longer counts.
            assert not isinstance(second, Exception), second
            assert await creates_in_log(server) == ["b"]


async def test_a_server_counts_what_another_committed_once_it_followed_it(
    pg_url: str,  # noqa: F811 (the fixture)
) -> None:
    a = SyncServer.embedded([SIMPLE], UCP_AGENTS, store=pg_url, mandates=ONE_CREATE)
    b = SyncServer.embedded([SIMPLE], UCP_AGENTS, store=pg_url, mandates=ONE_CREATE)
    async with a, b, asyncio.timeout(30):
        done = await attempt(a, [create("a")], "a-1")
        assert not isinstance(done, Exception), done
        async for batch in b.ledgers[("default", "SimpleUCP")].subscribe(0):
            if batch.seq >= done.seq:
                break  # b has followed a's commit
        refused = await attempt(b, [create("b")], "b-1")
        assert isinstance(refused, Rejected) and refused.violation.rule == "mandate", refused
        assert await creates_in_log(b) == ["a"]


# docs/patterns.md (Coded agents): "The policy runs in a worker thread while the
# agents wait, so it never runs alongside them".

UNSEEN = 0.5  # how long the policy waits for an agent that must not run meanwhile


async def test_a_coded_policy_never_runs_alongside_the_agents() -> None:
    """The buyer's policy, once entered, lets another agent go (an event) and
    waits for it to have acted: were the agents running alongside, it would act
    inside the policy's call. Every step of that agent and every listener of
    both adapters is put on one timeline with the policy's calls."""
    loop = asyncio.get_running_loop()
    timeline: list[str] = []
    lock = threading.Lock()
    go = asyncio.Event()  # set from the policy's thread when it is entered
    acted = threading.Event()  # set by the other agent once it has acted
    waits: list[bool] = []

    def mark(what: str) -> None:
        with lock:
            timeline.append(what)

    def policy(move: Move) -> dict[str, Any] | None:
        mark("policy in")
        try:
            if move.name != "RFQ" or move.memory.get("asked"):
                return None
            move.memory["asked"] = True
            loop.call_soon_threadsafe(go.set)
            waits.append(acted.wait(UNSEEN))  # True only if the agent acted meanwhile
            return {"ID": "r1", "item": "pen", "budget": 10}
        finally:
            mark("policy out")

    server = SyncServer.embedded([PURCHASE], {"buyer": ["Buyer"], "other": ["Buyer"]})
    async with server, asyncio.timeout(30):
        buyer = PeachAdapter("buyer", PURCHASE, "Buyer", LocalExecutor(server))
        other = PeachAdapter("other", PURCHASE, "Buyer", LocalExecutor(server))
        for adapter in (buyer, other):
            adapter.listeners.append(lambda batch, newly: mark("listener"))

        async def other_agent() -> None:
            await go.wait()
            mark("agent in")
            await other.attempt([other.build_action("RFQ", {"ID": "r2", "item": "ink",
                                                            "budget": 5})])
            mark("agent out")
            acted.set()

        idle = asyncio.Event()
        caller = PolicyCaller(10.0)  # as the runner wires it: one caller for every coded agent
        coded = CodedAgent(buyer, policy, params={}, rounds=None, index=0, count=1,
                           population={"Buyer": ["buyer"]}, on_idle=idle.set, caller=caller)
        async with buyer, other:
            running = asyncio.create_task(coded.run())
            await asyncio.gather(other_agent(), idle.wait())
            coded.stop()
            await running
        caller.close()
    assert waits == [False], timeline  # the other agent never acted during the call
    assert {"agent in", "agent out", "listener"} <= set(timeline), timeline
    inside = False
    for what in timeline:
        if what.startswith("policy"):
            inside = what == "policy in"
        assert not inside or what.startswith("policy"), f"{what} during a policy: {timeline}"
    assert [i.name for _, i, _ in buyer.history({"ID": "r1"})] == ["RFQ"]


# docs/peach.md (Peer to peer, Transports): "An attempt whose message alone would
# pass it (or that holds more than 1,000 instances, or an enactment of more than
# 100,000) is refused before it is kept, `ExecutorError` with code `too-large`
# (status 413): kept, it could never be delivered."


def quote(qid: str) -> ActionInstance:
    bindings = {"ID": "r1", "qid": qid, "RFQ": True, "item": "pen", "price": 3}
    return ActionInstance(PURCHASE.action("Quote"), bindings)


async def test_an_attempt_on_an_enactment_past_the_context_limit_is_refused_413(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """100,000 instances in one enactment take minutes to make: the limit is
    ``peach.peer._wire.MAX_CONTEXT``, which the sender reads at each attempt, so
    the test lowers it (to 2) after checking that the documented figure is the
    one the sender holds and the receiver reads."""
    assert wire.MAX_CONTEXT == 100_000
    [bound] = [m for m in wire.MessageIn.model_fields["context"].metadata
               if hasattr(m, "max_length")]
    assert bound.max_length == 100_000  # what a receiver reads at most
    monkeypatch.setattr(wire, "MAX_CONTEXT", 2)
    roles = directory([PURCHASE], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    buyer_ex = PeerExecutor("buyer", roles)
    seller_ex = PeerExecutor("seller", roles, store=tmp_path / "seller.db")
    buyer = PeachAdapter("buyer", PURCHASE, "Buyer", buyer_ex)
    seller = PeachAdapter("seller", PURCHASE, "Seller", seller_ex)
    async with buyer, seller:
        await buyer.attempt([buyer.build_action("RFQ", {"ID": "r1", "item": "pen",
                                                        "budget": 10})])
        await settle([buyer_ex, seller_ex], 10.0)
        await seller.attempt([quote("q1")])  # its enactment holds 1 instance
        await seller.attempt([quote("q2")])  # 2: at the limit, not past it
        kept = len(seller_ex.store.load())
        with pytest.raises(ExecutorError) as caught:
            await seller.attempt([quote("q3")])  # 3: past it
        assert (caught.value.code, caught.value.status) == ("too-large", 413)
        assert "a message carries at most 2" in str(caught.value)
        # Refused before it was kept: not in the agent's state, its log or its outbox.
        assert len(seller_ex.store.load()) == kept
        await settle([buyer_ex, seller_ex], 10.0)
        for adapter in (seller, buyer):
            names = [(i.name, i.bindings.get("qid")) for _, i, _ in adapter.history({"ID": "r1"})]
            assert names == [("RFQ", None), ("Quote", "q1"), ("Quote", "q2")], adapter.name


# docs/llm-agents.md (the constructor's arguments): "`timeout` | seconds for one
# API request (never beyond the wall-time budget left, never under 1)".


class Recording:
    """Each request's timeouts, as the SDK set them on the request its HTTP
    library sends (a real transport to the fake model below it)."""

    def __init__(self) -> None:
        self.timeouts: list[dict[str, float | None]] = []

    def client(self, http: Any) -> Any:
        """An ``AsyncClient`` of ``http`` (httpx for OpenAI's SDK, httpx2 for
        Anthropic's) whose transport notes the timeouts, then sends."""
        timeouts = self.timeouts

        class Transport(http.AsyncHTTPTransport):  # type: ignore[misc]
            async def handle_async_request(self, request: Any) -> Any:
                timeouts.append(dict(request.extensions["timeout"]))
                return await super().handle_async_request(request)

        return http.AsyncClient(transport=Transport())


def sdk_client(provider: str, url: str, recording: Recording) -> Any:
    if provider == "openai":
        import openai

        return openai.AsyncOpenAI(api_key="sk-test", base_url=f"{url}/v1", max_retries=0,
                                  http_client=recording.client(httpx))
    import anthropic
    import httpx2

    return anthropic.AsyncAnthropic(api_key="sk-test", base_url=url, max_retries=0,
                                    http_client=recording.client(httpx2))


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("requested", "max_seconds", "expected"),
    [(0.01, 60.0, 1.0),  # a tiny timeout: raised to 1
     (60.0, 1.0, 1.0),  # less than 1 s of the wall-time budget left: 1 all the same
     (7.5, 60.0, 7.5)],  # as given otherwise (the recording sees the real value)
)
async def test_a_model_request_timeout_is_never_under_one_second(
    provider: str, requested: float, max_seconds: float, expected: float
) -> None:
    """No second is waited: the one request fails at once (a scripted 500), and
    the timeout it was sent with is read off the request itself."""
    fake = FakeModel([{"error": 500, "reusable": True}], provider)
    recording = Recording()
    server = SyncServer.embedded([PURCHASE], {"buyer": ["Buyer"]})
    async with fake.serving(), server, asyncio.timeout(30):
        buyer = PeachAdapter("buyer", PURCHASE, "Buyer", LocalExecutor(server))
        client = sdk_client(provider, fake.url, recording)
        agent = LLMAgent([buyer], "Buy a pen for at most 10.", provider=provider,
                         client=client, model="test-model", timeout=requested,
                         budget=Budget(max_calls=1, max_seconds=max_seconds))
        try:
            report = await agent.run()
        finally:
            await client.close()  # a client passed in is the caller's to close
    assert report.failed_calls == 1, report.reason  # the request was sent, and failed
    assert recording.timeouts == [dict.fromkeys(("connect", "read", "write", "pool"), expected)]
