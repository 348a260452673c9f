"""Promises of docs/peach.md, docs/semantics.md, docs/language.md,
docs/llm-agents.md and docs/performance.md that no other test held: each test
here quotes the sentence it keeps true, and fails if the promise breaks.
Real parts: PeerExecutors on loopback HTTP or on a MemoryNetwork, an in-process
SyncServer, a scripted model on loopback; no sleeps (waits are on events).
Three promises were found false; each was fixed (the code, or the doc where the
code was right), and its test says which."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from langshaw import ActionInstance
from peach import ExecutorError, LocalExecutor, PeachAdapter
from peach.llm import Budget, LLMAgent
from peach.peer import MemoryNetwork, PeerExecutor, Refusal, SQLitePeerStore, Unreachable
from peach.peer import _wire as wire
from peach.peer._store import Record
from peach.peer.directory import AGENT_HEADER, SIGNATURE_HEADER, sign
from peach.roles import RoleSpec
from samples.llm import scenarios
from syncserver import SyncServer
from tests.harness import Harness
from tests.peach._hostile_support import SIMPLE, create
from tests.peach.llm.fake import FakeModel
from tests.peach.test_peer import NONO, Forger, directory, settle

AGENTS = {"platform": ["Platform"], "business": ["Business"]}

# docs/peach.md, "What a receiver checks": "3. *pending* if part of its context
# is not here yet: kept in memory (at most `max_waiting`, 10,000; beyond, the
# answer is "busy" and the sender retries), and accepted the moment the last
# missing instance is".


def withdraw(order_id: str) -> dict[str, Any]:
    return {"action": "Withdraw", "bindings": {"id": order_id, "Order": True, "reason": "r"}}


def order(order_id: str) -> dict[str, Any]:
    return {"action": "Order", "bindings": {"id": order_id, "item": "pen"}}


async def test_a_peer_keeps_at_most_max_waiting_and_answers_busy_beyond(tmp_path: Path) -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    seller_ex = PeerExecutor("seller", roles, store=tmp_path / "seller.db", max_waiting=1)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    url = roles.peers["seller"].url
    assert url is not None
    buyer = Forger(url, "buyer", "buyer-secret")
    async with seller:
        # Withdrawals whose Order has not arrived: the first waits, the second
        # finds the one place taken and is told "busy" (nothing kept, nothing decided).
        _, first = await buyer.send("UnsafeNoNo", [withdraw("o1")], [["Order", ["o1"]]])
        first_seq = buyer.seq
        assert first["status"] == "pending", first
        _, second = await buyer.send("UnsafeNoNo", [withdraw("o2")], [["Order", ["o2"]]])
        second_seq = buyer.seq
        assert second["status"] == "busy", second
        assert seller_ex.waiting() == 1
        # The missing Order arrives: the waiting Withdraw is accepted with it.
        _, arrived = await buyer.send("UnsafeNoNo", [order("o1")])
        assert arrived["status"] == "accepted", arrived
        assert seller_ex.waiting() == 0
        assert [i.name for _, i, _ in seller.history({"id": "o1"})] == ["Order", "Withdraw"]
        _, again = await buyer.send("UnsafeNoNo", [withdraw("o1")], [["Order", ["o1"]]],
                                    seq=first_seq)
        assert again["status"] == "duplicate", again  # it was kept when released
        # The busy one, sent again as its sender would, now finds room.
        _, retried = await buyer.send("UnsafeNoNo", [withdraw("o2")], [["Order", ["o2"]]],
                                      seq=second_seq)
        assert retried["status"] == "pending", retried
        assert seller_ex.waiting() == 1
    assert seller_ex.refusals() == []


# docs/peach.md, "What a receiver checks": "The sender logs the refusal, records
# it, stops sending that message, and calls `executor.refusal_listeners` (one that
# raises is logged; the refusal stands)."


async def test_a_refusal_listener_that_raises_is_logged_and_the_refusal_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]})
    network = MemoryNetwork()
    buyer_ex, seller_ex = (PeerExecutor(a, roles, transport=network) for a in ("buyer", "seller"))
    heard: list[Refusal] = []

    def broken(refusal: Refusal) -> None:
        raise RuntimeError("this listener is broken")

    buyer_ex.refusal_listeners.extend([broken, heard.append])
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    caplog.set_level(logging.ERROR, logger="peach")
    async with buyer, seller:
        [ordered] = await buyer.attempt([buyer.build_action("Order", {"item": "pen"})])
        await seller.sync()
        # Both act before hearing of the other (attempt() never waits for peers).
        network.disconnect("buyer")
        network.disconnect("seller")
        await seller.attempt([seller.build_action("Ship", {**ordered.keys, "tracking": "T"})])
        await buyer.attempt([buyer.build_action("Withdraw", {**ordered.keys, "reason": "late"})])
        for executor in (buyer_ex, seller_ex):
            await network.listen(executor.me, executor._inbox.endpoint)
            for wake in executor._wake.values():
                wake.set()
        await settle([buyer_ex, seller_ex])
        # The refusal stands: recorded, and the refused message is no longer sent.
        outgoing = [r for r in buyer_ex.refusals() if not r.incoming]
        assert [(r.peer, r.rule) for r in outgoing] == [("seller", "nono")]
        assert buyer_ex.outstanding() == 0
    # Each refusal reached the listener after the broken one, and the failure was logged.
    assert {(r.incoming, r.rule) for r in heard} == {(True, "nono"), (False, "nono")}
    failures = [r for r in caplog.records if "a refusal listener failed" in r.getMessage()]
    assert len(failures) == len(heard) == 2
    assert all(r.exc_info and "this listener is broken" in str(r.exc_info[1]) for r in failures)


# docs/peach.md, "Delivery": "What an attempt keeps and sends is a copy of its
# values, as in-process (`LocalExecutor`): a list the agent changes afterwards
# changes nothing the log or the peers hold."


async def test_a_peer_attempt_keeps_and_sends_a_copy_of_its_values() -> None:
    async with Harness("peer", [SIMPLE], AGENTS) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        items = [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}]
        expected = [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}]
        async with platform, business:
            [done] = await platform.attempt([create(platform, line_items=items)])
            items.append({"item": {"id": "evil", "title": "Evil"}, "quantity": -5})
            items[0]["quantity"] = -6
            platform_ex, business_ex = h.executor("platform"), h.executor("business")
            assert isinstance(platform_ex, PeerExecutor) and isinstance(business_ex, PeerExecutor)
            await settle([platform_ex, business_ex], 10.0)
            [(_, mine, _)] = platform.history(done.keys)  # the sender's own view
            [(_, theirs, _)] = business.history(done.keys)  # what the peer holds
            assert mine.bindings["line_items"] == expected
            assert theirs.bindings["line_items"] == expected
            [record] = [r for r in platform_ex.store.load() if r.protocol == SIMPLE.name]
            assert record.instances[0]["bindings"]["line_items"] == expected  # the log


# docs/peach.md, "Transports": "An attempt whose message alone would pass it (or
# that holds more than 1,000 instances, ...) is refused before it is kept,
# `ExecutorError` with code `too-large` (status 413): kept, it could never be
# delivered."


def buyer_and_seller(
    network: MemoryNetwork,
) -> tuple[PeerExecutor, PeerExecutor, PeachAdapter, PeachAdapter]:
    """A Buyer and a Seller of UnsafeNoNo, peer to peer over ``network``."""
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]})
    buyer_ex, seller_ex = (PeerExecutor(a, roles, transport=network) for a in ("buyer", "seller"))
    return (buyer_ex, seller_ex, PeachAdapter("buyer", NONO, "Buyer", buyer_ex),
            PeachAdapter("seller", NONO, "Seller", seller_ex))


async def test_a_peer_attempt_of_more_than_1000_instances_is_refused_before_it_is_kept() -> None:
    buyer_ex, seller_ex, buyer, seller = buyer_and_seller(MemoryNetwork())
    action = NONO.action("Order")
    many = [ActionInstance(action, {"id": f"o{i}", "item": "pen"})
            for i in range(wire.MAX_INSTANCES + 1)]
    async with buyer, seller:
        with pytest.raises(ExecutorError) as caught:
            await buyer.attempt(many)
        assert caught.value.code == "too-large" and caught.value.status == 413
        assert buyer.enactments() == [] and buyer_ex.outstanding() == 0
        assert buyer_ex.store.load() == []
        # The most a peer reads is kept, sent and accepted whole.
        await buyer.attempt(many[: wire.MAX_INSTANCES])
        await settle([buyer_ex, seller_ex], 10.0)
        assert len(seller.enactments()) == wire.MAX_INSTANCES


# docs/llm-agents.md, "Each call is checked and carried out in order": "Calls
# after `done` in the same response are ignored."

@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    """A scripted model on a loopback port (tests/peach/llm/fake.py)."""
    fake = FakeModel([], "anthropic")
    async with fake.serving():
        yield fake


START = {"prompt_has": ["You are in no enactment yet"]}
RFQ = {"type": "tool_use", "name": "RFQ", "input": {"item": "pen", "budget": 10}}


async def test_calls_after_done_in_the_same_response_are_ignored(model: FakeModel) -> None:
    done = {"type": "tool_use", "name": "done", "input": {"summary": "nothing to buy"}}
    model.answers = [{"when": START, "content": [done, RFQ]}]
    outcome = await scenarios.purchase(client=model.client(), model="test-model", timeout=5.0)
    assert outcome.report.status == "done", (outcome.report.reason, model.unanswered)
    assert outcome.log == []  # the RFQ after done was not attempted
    assert len(model.requests) == 1


# docs/llm-agents.md, "Fallback": "If the model had already performed an action in
# that decision, the fallback is not called (it might repeat it)."


async def test_the_fallback_is_not_called_in_a_decision_that_already_acted(
    model: FakeModel,
) -> None:
    invalid = {"type": "tool_use", "name": "Nope", "input": {}}
    model.answers = [
        {"when": START, "content": [RFQ, invalid]},  # acts, then a call to retry
        {"reusable": True, "error": 500},  # ... and the model fails from then on
    ]
    reasons: list[str] = []

    async def fallback(agent: LLMAgent, reason: str) -> None:
        reasons.append(reason)
        agent.stop("the fallback ends the run")

    outcome = await scenarios.purchase(
        client=model.client(), model="test-model", fallback=fallback, timeout=5.0
    )
    kinds = [(d.number, d.kind) for d in outcome.report.decisions]
    # Decision 1 acted (the RFQ) and then failed: no fallback there. Decision 2
    # (the quotes arrived) failed without acting: the fallback ran.
    assert kinds[:1] == [(1, "llm")] and (1, "fallback") not in kinds, kinds
    assert (2, "fallback") in kinds and len(reasons) == 1, (kinds, reasons)
    assert [e.name for e in outcome.log if e.performer == "buyer"] == ["RFQ"]


# docs/performance.md, "Against the run of 2026-11-21": "the memory ratio grew by
# the log tail that HTTP readers share (at most 256 batches)." Small batches, so
# the count bounds the tail, not its bytes (16 MiB, as served).


async def test_the_shared_log_tail_holds_at_most_256_batches() -> None:
    server = SyncServer.embedded([SIMPLE], AGENTS)
    server.cache_tail(16 * 1024 * 1024)
    platform = PeachAdapter("platform", SIMPLE, "Platform", LocalExecutor(server))
    async with platform:
        for _ in range(300):
            await platform.attempt([create(platform)])
        ledger = server.ledgers[("default", SIMPLE.name)]
        last = ledger.tail.read(299, 300)
        assert last is not None and last[0].seq == 300  # one batch per attempt
        held = ledger.tail.read(300 - 256, 300)
        assert held is not None and len(held) == 256
        assert ledger.tail.read(300 - 257, 300) is None  # the 257th newest is gone
        # Older batches are read from the store instead: nothing is lost.
        agent = server.agent("default", "platform")
        logged = await server.read("default", SIMPLE.name, agent, 0, 1_000)
        assert [b.seq for b in logged] == list(range(1, 301))
    await server.stop()


# docs/llm-agents.md, "Events": "Events are queued in order, wake the agent, and
# stay in every prompt ... until the model handles one ... or dismisses it
# (`dismiss_event`). The agent does not finish while an event is pending."
# (It did: `done` ended the run with the event pending; now `done` is refused,
# and the model told which events wait and what ends them.)


async def test_the_agent_does_not_finish_while_an_event_is_pending(model: FakeModel) -> None:
    done = {"type": "tool_use", "name": "done", "input": {"summary": "nothing to do"}}
    model.answers = [{"when": {"prompt_has": ["[ev1]"]}, "content": [done]}]
    protocol = SIMPLE
    async with SyncServer.embedded([protocol], {"business": ["Business"]}) as server:
        adapter = PeachAdapter("business", protocol, "Business", LocalExecutor(server))
        agent = LLMAgent([adapter], "answer checkouts", client=model.client(),
                         budget=Budget(max_calls=2))
        await agent.inject("a customer asks for a refund")
        report = await agent.run()
    assert report.status != "done", report.reason  # the budget ended it, not done
    assert len(model.requests) == 2, model.unanswered
    told = json.dumps(model.requests[1])
    assert "done was not called: events are pending (ev1)" in told


# docs/peach.md, "Delivery": "a sender loop per peer sends the outbox (up to 200
# messages per request) and sends it again ... until the peer answers for each
# message."


class Counting(MemoryNetwork):
    """The project's in-memory network, counting the messages of each request."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    async def post(
        self, peer: Any, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, Any]]:
        if path == "messages":
            self.sizes.append(len(json.loads(body)["messages"]))
        return await super().post(peer, path, body, headers)


async def test_a_sender_packs_at_most_200_messages_per_request() -> None:
    network = Counting()
    buyer_ex, seller_ex, buyer, seller = buyer_and_seller(network)
    async with buyer, seller:
        network.disconnect("seller")  # the outbox fills while the seller is away
        # More than the requests under way at once carry (4 x 200): some are full.
        for i in range(1000):
            await buyer.attempt([buyer.build_action("Order", {"id": f"o{i}", "item": "pen"})])
        assert buyer_ex.outstanding() == 1000
        await network.listen(seller_ex.me, seller_ex._inbox.endpoint)
        for wake in buyer_ex._wake.values():
            wake.set()
        await settle([buyer_ex, seller_ex])
        assert len(seller.enactments()) == 1000  # every message delivered
    assert max(network.sizes) == 200, network.sizes  # full requests, none larger
    assert sum(network.sizes) == 1000  # and none sent twice


# docs/peach.md, "What a receiver checks": "1. refused at once if no log could
# hold it, never answered "busy" (its sender would send it forever): a number
# JSON cannot carry (`NaN`, `Infinity`, or `1e400` ...; an integer of more than
# 4,300 digits), or a value nested more than 128 levels deep, is `bad-json`,
# with its place (`the message is not valid JSON: instances[0].bindings.price
# is inf, not a JSON number`)". NaN and infinities: tests/peach/test_peer_json.py.


async def raw_post(url: str, seq: int, item: str) -> tuple[int, dict[str, Any]]:
    """One Order whose item is the literal ``item``, signed as the buyer."""
    message = (f'{{"protocol": "UnsafeNoNo", "seq": {seq}, "context": [], "instances": '
               f'[{{"action": "Order", "bindings": {{"id": "o{seq}", "item": {item}}}}}]}}')
    body = f'{{"mas": "default", "sender": "buyer", "messages": [{message}]}}'.encode()
    headers = {AGENT_HEADER: "buyer", SIGNATURE_HEADER: sign("buyer-secret", body)}
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{url}/peer/messages", content=body, headers=headers)
    answer = response.json()
    return response.status_code, answer["results"][0] if response.status_code == 200 else answer


async def test_a_value_nested_too_deeply_is_refused_at_once_never_busy() -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    seller_ex = PeerExecutor("seller", roles)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    url = roles.peers["seller"].url
    assert url is not None
    async with seller:
        deep = "[" * 150 + "]" * 150
        for _ in range(2):  # sent again: the same answer, never "busy"
            status, result = await raw_post(url, 1, deep)
            assert status == 200 and (result["status"], result["rule"]) == ("refused", "bad-json")
            assert "instances[0].bindings is nested too deeply: more than 128 levels" in (
                result["message"])
        status, result = await raw_post(url, 2, "[" * 100 + "]" * 100)  # deep, within the bound
        assert (status, result["status"]) == (200, "accepted"), result
    assert [r.rule for r in seller_ex.refusals() if r.incoming] == ["bad-json"]


async def test_an_integer_of_more_than_4300_digits_is_refused_at_once_never_busy() -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    seller = PeachAdapter("seller", NONO, "Seller", PeerExecutor("seller", roles))
    url = roles.peers["seller"].url
    assert url is not None
    async with seller:
        for _ in range(2):
            status, answer = await raw_post(url, 1, "9" * 4301)
            assert status == 400 and answer["error"]["code"] == "bad-json", answer
        status, result = await raw_post(url, 2, "9" * 4300)
        assert (status, result["status"]) == (200, "accepted"), result


# docs/peach.md, "What a receiver checks": "A request whose body no JSON parser
# here reads at all (an integer of more than 4,300 digits, or nesting past about
# 180 levels in the whole body) is refused whole ...: `400 bad-json`, with the
# parser's line and column, never "busy"". (It said such values were refused as
# the message's refusal, with their place: true within 128 levels only.)


@pytest.mark.parametrize(
    ("item", "says"),
    [("9" * 4301, "number out of range"), ("[" * 200 + "]" * 200, "recursion limit exceeded")],
    ids=["digits", "depth"],
)
async def test_a_body_no_parser_reads_is_refused_whole_as_bad_json(item: str, says: str) -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    seller_ex = PeerExecutor("seller", roles)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    url = roles.peers["seller"].url
    assert url is not None
    async with seller:
        status, answer = await raw_post(url, 1, item)
        assert status == 400 and answer["error"]["code"] == "bad-json", answer
        assert answer["error"]["message"].startswith("the body is not valid JSON: " + says)
        assert " at line 1 column " in answer["error"]["message"]
        assert seller.enactments() == [] and seller_ex.refusals() == []


# docs/peach.md, "Roles as run-time entities": "The exposed state is shown as JSON
# can hold it: ... at most 12 levels deep and 200 entries per container".


def depth_of(value: Any) -> int:
    """How many containers deep ``value`` goes (a scalar: 0)."""
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


def test_the_exposed_state_is_shown_at_most_12_deep_and_200_entries_wide() -> None:
    deep: Any = "bottom"
    for _ in range(40):
        deep = [deep, {"again": deep}]  # 80 levels, and 2**40 paths if walked whole
    state = {"deep": deep, "wide": {f"k{i}": i for i in range(500)}, "flat": [1] * 12}
    server = SyncServer.embedded([SIMPLE], AGENTS)
    business = PeachAdapter("business", SIMPLE, "Business", LocalExecutor(server))
    business.adopt(RoleSpec("Business", state=lambda: state))
    shown = business.inspect()["state"]
    assert depth_of(shown) == 12  # the state itself is the first level
    assert "bottom" not in json.dumps(shown)
    assert len(shown["wide"]) == 201 and shown["wide"]["..."] == "300 more"
    assert shown["flat"] == [1] * 12  # what fits is shown whole


# docs/peach.md: "`adapter.inspect()` ... Its size and cost are bounded whatever
# the agent holds". It was not, for the exposed state: the bounds were per
# container (200 entries) and per path (12 levels), and a state whose containers
# share their entries was shown as up to 200**11 copies: two levels of one
# 100-character text, about 3 KB held, as 4.1 MB of JSON. Now bounded in all too.


def test_the_inspection_of_a_small_state_is_small() -> None:
    text = "x" * 100
    row = [text] * 200
    held: dict[str, Any] = {"grid": [row] * 200}  # one text, one row, one list: about 3 KB
    server = SyncServer.embedded([SIMPLE], AGENTS)
    business = PeachAdapter("business", SIMPLE, "Business", LocalExecutor(server))
    business.adopt(RoleSpec("Business", state=lambda: held))
    size = len(json.dumps(business.inspect()))
    assert size < 1_000_000, f"{size:,} bytes of JSON for a state of about 3 KB"
    held["grid"] = [[row] * 200] * 200  # a level more: 200 times as much, before
    size = len(json.dumps(business.inspect()))
    assert size < 1_000_000, f"{size:,} bytes of JSON for a state of about 3 KB"


# docs/peach.md, "Who hears what": "An attempt (an atomic list) is one message,
# accepted or refused whole."


async def test_a_peers_atomic_list_is_accepted_or_refused_whole() -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    seller_ex = PeerExecutor("seller", roles)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    url = roles.peers["seller"].url
    assert url is not None
    buyer = Forger(url, "buyer", "buyer-secret")
    ship = {"action": "Ship", "bindings": {"id": "o1", "Order": True, "tracking": "t"}}
    async with seller:
        # A legal Order and, in the same list, the Seller's Ship by the Buyer.
        _, result = await buyer.send("UnsafeNoNo", [order("o1"), ship])
        assert (result["status"], result["rule"]) == ("refused", "role"), result
        assert seller.history({"id": "o1"}) == [] and seller.enactments() == []
        # An Order and its Withdraw in one list: both, as one batch.
        _, result = await buyer.send("UnsafeNoNo", [order("o2"), withdraw("o2")])
        assert result["status"] == "accepted", result
        [(seq_order, _, _), (seq_withdraw, _, _)] = seller.history({"id": "o2"})
        assert seq_order == seq_withdraw  # applied together


# docs/peach.md, "Delivery": "Readers are kept out too while the agent runs (the
# `sqlite3` shell, a backup tool: `database is locked`): copy the file after the
# agent stops, or read its log through the agent."


def test_a_peer_log_keeps_readers_out_while_open(tmp_path: Path) -> None:
    path = tmp_path / "buyer.db"
    store = SQLitePeerStore(path)
    store.open("buyer")
    store.append(Record("P", 1, "buyer", [{"action": "A", "bindings": {}}], []), ["seller"])
    reader = sqlite3.connect(path, timeout=0)
    try:
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
        store.close()
        tables = reader.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        assert tables > 0  # once the agent stopped, the file reads
    finally:
        reader.close()


# docs/peach.md, "Executors": `PeerExecutor` `attempt()` "returns when ... written
# to the agent's own log (never waits for a peer)"; docs/performance.md: "`attempt()`
# never waits for the network peer to peer".


class Hanging(MemoryNetwork):
    """A network whose messages never get an answer (a peer that hangs once
    asked to take them; at start-up it is down: Unreachable, skipped)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = asyncio.Event()

    async def post(
        self, peer: Any, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, Any]]:
        if path != "messages":
            raise Unreachable(f"{peer.name} is down")
        self.sent.set()
        await asyncio.Event().wait()  # never answers; cancelled when the agent stops
        raise AssertionError("unreachable")


async def test_a_peer_attempt_never_waits_for_a_peer_that_hangs() -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]})
    network = Hanging()
    buyer_ex = PeerExecutor("buyer", roles, transport=network)
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    async with buyer:
        for i in range(3):
            await asyncio.wait_for(
                buyer.attempt([buyer.build_action("Order", {"id": f"o{i}", "item": "pen"})]), 5
            )
        await asyncio.wait_for(network.sent.wait(), 5)  # the sender is stuck in a post
        assert len(buyer.enactments()) == 3 and buyer_ex.outstanding() == 3
        assert len(buyer_ex.store.load()) == 3  # kept, to be sent when the peer answers
