"""Hostile review of mandates (syncserver.mandate, syncserver._mandates,
peach._mandate): attacks on every guarantee docs/syncserver.md and
docs/llm-agents.md ("Mandates") state, on real servers.

What broke and was fixed here: a mandated agent's malformed attempt (a root key
unbound, or bound to a list) crashed the mandate's counting (a 500, and under
the batched policy every attempt of the window failed with it); a number too
large for a float crashed the value and ceiling checks; a mandate set anew, or
a second adapter of the agent, started from no attempts in flight; an approver
answering "no" (truthy) approved; configuration mistakes went unreported.
Fixed beside them: a clash over a shared PostgreSQL log counted the attempt
twice (syncserver/_shared.py takes the counts back with the state's changes),
and the ceiling's check crashed on a malformed root (syncserver/server.py).
Oracles are written from the mandate's text: the log read back and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import LocalExecutor, MandateRefused, PeachAdapter
from syncserver import MemoryStore, SyncServer
from syncserver.config import ConfigError, build_config
from syncserver.errors import Rejected, ServiceError
from syncserver.mandate import Mandate, MandateError, read_mandate
from tests.conftest import LINE_ITEMS, SIMPLE_CREATE, load
from tests.harness import Harness
from tests.syncserver.postgres.conftest import pg_cluster, pg_url  # noqa: F401 (fixtures)

PURCHASE = load("purchase.lsh")
SIMPLE = load("atomic-ucp.lsh")
AGENTS = {"b": ["Buyer"], "c": ["Buyer"], "s": ["Seller"]}
TOTAL = "$[?(@.type == 'total')].amount"


def rfq(qid: str, budget: Any = 5) -> ActionInstance:
    return ActionInstance(PURCHASE.action("RFQ"), {"ID": qid, "item": "pen", "budget": budget})


def quote(qid: str, q: str = "q1") -> ActionInstance:
    bindings = {"ID": qid, "qid": q, "RFQ": True, "item": "pen", "price": 3}
    return ActionInstance(PURCHASE.action("Quote"), bindings)


def accept(qid: str, q: str = "q1") -> ActionInstance:
    bindings = {"ID": qid, "Quote": True, "chosen": q, "price": 3, "address": "a"}
    return ActionInstance(PURCHASE.action("Accept"), bindings)


async def attempt(
    server: SyncServer, who: str, instances: Sequence[ActionInstance], aid: str | None = None
) -> Any:
    """The receipt, or the exception, of one attempt."""
    try:
        return await server.attempt(
            "default", "Purchase", server.agent("default", who), list(instances), aid
        )
    except (Rejected, ServiceError) as exc:
        return exc


async def performed(server: SyncServer, who: str, action: str) -> int:
    """The oracle: ``who``'s instances of ``action`` in the log, counted by hand."""
    return sum(
        1
        for batch in await server.store.load("default", PURCHASE)
        for e in batch.entries
        if e.performer == who and e.instance.action.name == action
    )


# Broke, fixed: malformed attempts crashed the counts ---------------------------------


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_a_malformed_attempt_of_a_mandated_agent_is_refused_not_a_crash(
    policy: str,
) -> None:
    """An unbound root key (KeyError) or a key bound to a list (unhashable) in a
    mandated agent's attempt raised in the counts: a 500, and under the batched
    policy the whole window (another agent's good attempt too) failed and the
    state was rebuilt. The protocol refuses them; the window goes on."""
    server = SyncServer.embedded(
        [PURCHASE], AGENTS, policy=policy, batch_window_ms=5,
        mandates={"b": {"enactments": 3, "actions": {"RFQ": {"per_run": 3}}}},
    )
    async with server:
        unbound = ActionInstance(PURCHASE.action("RFQ"), {"item": "pen", "budget": 5})
        listed = rfq("x")
        listed.bindings["ID"] = ["x"]
        answers = await asyncio.gather(
            attempt(server, "b", [unbound]), attempt(server, "b", [listed]),
            attempt(server, "c", [rfq("c1")]),
        )
        assert isinstance(answers[0], Rejected), answers[0]
        assert answers[0].violation.rule == "missing-attribute"
        assert isinstance(answers[1], Rejected), answers[1]
        assert answers[1].violation.rule == "key"
        assert not isinstance(answers[2], Exception), answers[2]
        ledger = server.ledgers[("default", "Purchase")]
        assert not ledger.stale and ledger.rebuilding is None
        # Nothing was counted for the refused ones: three RFQs still go.
        for i in range(3):
            assert not isinstance(await attempt(server, "b", [rfq(f"b{i}")]), Exception)
        refused = await attempt(server, "b", [rfq("b3")])
        assert isinstance(refused, Rejected) and refused.violation.rule == "mandate"


async def test_a_malformed_root_passes_the_ceiling_to_the_protocol() -> None:
    """The ceiling reads the enactment of each paying instance before the turn:
    an unbound root key (KeyError) or a list (unhashable) crashed it, a 500.
    The protocol refuses them, with its own rule."""
    server = SyncServer.embedded(
        [PURCHASE], AGENTS,
        mandates={"b": {"ceiling": {"attribute": "price", "max": 10, "on": ["Accept"]}}},
    )
    async with server:
        unbound = accept("r1")
        del unbound.bindings["ID"]
        listed = accept("r1")
        listed.bindings["ID"] = ["r1"]
        for instance, rule in ((unbound, "missing-attribute"), (listed, "key")):
            answer = await attempt(server, "b", [instance])
            assert isinstance(answer, Rejected), answer
            assert answer.violation.rule == rule


async def test_a_number_too_large_for_a_float_is_refused_not_a_crash() -> None:
    """10**400 is valid JSON; float() of it raises OverflowError, which the value
    and ceiling checks let out (a 500 over HTTP). Now it is refused."""
    mandates = {
        "platform": {
            "values": {"Create.line_items": {"path": "$[*].quantity", "max": 5}},
            "ceiling": {"attribute": "totals", "path": TOTAL, "max": 5000, "on": ["Complete"]},
        }
    }
    agents = {"platform": ["Platform"], "business": ["Business"]}
    async with Harness("http", [SIMPLE], agents, mandates=mandates) as h:
        path = "/mas/default/protocols/SimpleUCP/attempts"
        async with h.client("platform") as me, h.client("business") as shop:
            huge = [{**LINE_ITEMS[0], "quantity": 10**400}]
            bindings = {**SIMPLE_CREATE, "cid": "big", "line_items": huge}
            answer = await me.post(path, json={"instances": [
                {"action": "Create", "bindings": bindings}]})
            assert answer.status_code == 403, answer.text
            assert "values.Create.line_items" in answer.json()["error"]["message"]
            bindings = {**SIMPLE_CREATE, "cid": "c"}
            one = [{"action": "Create", "bindings": bindings}]
            ok = await me.post(path, json={"instances": one})
            assert ok.status_code == 200, ok.text
            totals = [{"type": "total", "amount": 10**400}]
            priced = await shop.post(path, json={"instances": [{"action": "Created", "bindings": {
                "cid": "c", "Create": True, "id": "chk", "totals": totals, "payment": {}}}]})
            assert priced.status_code == 200, priced.text
            pay = await me.post(path, json={"instances": [{"action": "Complete", "bindings": {
                "cid": "c", "Created": True, "id": "chk", "risk_signals": {},
                "payment_data": {"id": "i", "handler_id": "h", "type": "card",
                                 "credential": {"type": "token", "token": "t"}}}}]})
            assert pay.status_code == 403, pay.text
            assert "mandate ceiling.max = 5000" in pay.json()["error"]["message"]


# Broke, fixed: the adapter's in-flight attempts ---------------------------------------


class Gate:
    """An approver that holds every attempt until opened (so attempts are in
    flight, admitted by the guard, for as long as the test wants)."""

    def __init__(self, answer: Any = True) -> None:
        self.answer = answer
        self.asked = 0
        self.arrived = asyncio.Event()
        self.again = asyncio.Event()  # asked a second time
        self.open = asyncio.Event()

    async def __call__(self, agent: str, instances: Sequence[ActionInstance]) -> Any:
        self.asked += 1
        (self.again if self.asked > 1 else self.arrived).set()
        await self.open.wait()
        return self.answer

    async def refused(self, attempting: Any) -> BaseException | None:
        """The refusal of an attempt made while the gate holds another; a
        failure (not a hang) if the attempt was admitted and is asked about."""
        task = asyncio.ensure_future(attempting)
        asked = asyncio.ensure_future(self.again.wait())
        await asyncio.wait([task, asked], return_when=asyncio.FIRST_COMPLETED)
        asked.cancel()
        if not task.done():
            self.open.set()
            await asyncio.gather(task, return_exceptions=True)
            pytest.fail("admitted past the count: it waits for its approval")
        return task.exception()


def one_checkout(**extra: Any) -> Mandate:
    return Mandate.parse({"enactments": 1, "approval": ["Create"], **extra}, [SIMPLE], "m",
                         lambda w, m: pytest.fail(m))


def checkout(adapter: PeachAdapter) -> ActionInstance:
    return adapter.initiating()[0].bind(**SIMPLE_CREATE)


@pytest.mark.parametrize("kind", ["local", "peer"])
async def test_a_mandate_set_anew_while_attempts_fly_still_counts_them(kind: str) -> None:
    """Only the adapter knows this mandate (the server has none). Setting it
    again made a new guard with no attempts in flight: the second checkout
    passed while the first waited for its approval."""
    async with Harness(kind, [SIMPLE], {"platform": ["Platform"]}) as h:
        platform = h.adapter("platform", "Platform")
        gate = Gate()
        platform.approve = gate
        platform.mandate = one_checkout()
        async with platform:
            first = asyncio.create_task(platform.attempt([checkout(platform)]))
            await gate.arrived.wait()
            platform.mandate = one_checkout()  # the principal re-reads its file
            refused = await gate.refused(platform.attempt([checkout(platform)]))
            assert isinstance(refused, MandateRefused), refused
            assert "mandate enactments = 1" in str(refused)
            gate.open.set()
            await first
            assert len(platform.enactments()) == 1


async def test_two_adapters_of_one_agent_share_their_attempts_in_flight() -> None:
    async with Harness("local", [SIMPLE], {"platform": ["Platform"]}) as h:
        gate = Gate()
        one, two = h.adapter("platform", "Platform"), h.adapter("platform", "Platform")
        for adapter in (one, two):
            adapter.approve, adapter.mandate = gate, one_checkout()
        async with one, two:
            first = asyncio.create_task(one.attempt([checkout(one)]))
            await gate.arrived.wait()
            refused = await gate.refused(two.attempt([checkout(two)]))
            assert isinstance(refused, MandateRefused), refused
            assert "mandate enactments = 1" in str(refused)
            gate.open.set()
            await first
            assert len(one.enactments()) == 1


async def test_an_approver_that_answers_no_in_words_has_not_approved() -> None:
    async with Harness("local", [SIMPLE], {"platform": ["Platform"]}) as h:
        platform = h.adapter("platform", "Platform")
        gate = Gate(answer="no")
        gate.open.set()
        platform.approve, platform.mandate = gate, one_checkout()
        async with platform:
            with pytest.raises(MandateRefused, match="was not approved"):
                await platform.attempt([checkout(platform)])
            assert platform.enactments() == []


async def test_a_slow_approval_holds_its_count_against_a_racing_attempt() -> None:
    """Held: an attempt waiting for its approval is in flight, so one racing
    past it is refused; the one approved goes."""
    async with Harness("local", [SIMPLE], {"platform": ["Platform"]}) as h:
        platform = h.adapter("platform", "Platform")
        gate = Gate()
        platform.approve = gate
        platform.mandate = one_checkout()
        async with platform:
            slow = asyncio.create_task(platform.attempt([checkout(platform)]))
            await gate.arrived.wait()
            refused = await gate.refused(platform.attempt([checkout(platform)]))
            assert isinstance(refused, MandateRefused), refused
            assert gate.asked == 1  # refused on its count, never asked
            gate.open.set()
            await slow
            assert len(platform.enactments()) == 1


# Broke, fixed: configuration mistakes ----------------------------------------------


def config_with(mandate: Any) -> dict[str, Any]:
    return {"mas": {"default": {"protocols": ["purchase.lsh"], "agents": {
        "b": {"roles": ["Buyer"], "token": "t", "mandate": mandate}}}}}


@pytest.mark.parametrize(
    ("mandate", "messages"),
    [
        ({"actions": {"RFQ": {}}}, ["actions.RFQ: bounds nothing: give per_enactment or per_run"]),
        ({"values": {"RFQ.budget": {"min": 5, "max": 1}}},
         ["values.RFQ.budget: min 5 is above max 1"]),
        ({"values": {"colour": {"max": 1}}},
         ["values.colour: no action of these protocols has an attribute 'colour'"]),
        ({"ceiling": {"attribute": "price", "max": 5, "on": ["Nope", "Accept"], "path": "$["}},
         ["ceiling.path: '$[' is not a JSONPath",
          "ceiling.on: no protocol here has an action 'Nope'"]),
        ({"ceiling": {"attribute": "price", "max": 5, "on": ["Pay", "Buy"]}},
         ["action 'Pay'", "action 'Buy'"]),
        # The Buyer's principal bounding what only the Seller does: in the
        # protocol, so it parsed, but it would bound nothing.
        ({"actions": {"Quote": {"per_run": 1}}},
         ["actions.Quote: 'Quote' is performed by Seller, and this agent plays Buyer: "
          "a bound on it would bound nothing"]),
        ({"values": {"Quote.price": {"max": 5}}}, ["values.Quote.price: 'Quote' is performed"]),
        ({"approval": ["Ship"]}, ["approval: 'Ship' is performed by Seller"]),
        ({"ceiling": {"attribute": "price", "max": 5, "on": ["Quote"]}},
         ["ceiling.on: 'Quote' is performed by Seller"]),
    ],
)
def test_every_mandate_mistake_is_reported_with_its_place(
    mandate: Any, messages: list[str]
) -> None:
    with pytest.raises(ConfigError) as error:
        build_config(config_with(mandate), source="mas.toml")
    text = str(error.value)
    for message in messages:
        assert message in text, text
    assert "mas.default.agents.b.mandate." in text, text


def test_an_attribute_only_other_roles_bind_is_reported_but_a_ceiling_may_read_it() -> None:
    """A value bound on what no action of the agent binds bounds nothing; a
    ceiling reads what others bound (the Seller's price), so it may name it."""
    with pytest.raises(ConfigError) as error:
        build_config(config_with({"values": {"qid": {"in": ["q1"]}}}), source="mas.toml")
    assert "values.qid: no action this agent performs has an attribute 'qid'" in str(
        error.value
    )
    config = build_config(
        config_with({"ceiling": {"attribute": "price", "max": 5, "on": ["Accept"]}}),
        source="mas.toml",
    )
    assert config.mas["default"].agents["b"].mandate.ceiling is not None


def test_a_mandate_file_is_checked_against_the_roles_the_agent_plays(tmp_path: Path) -> None:
    """``strabo agent --mandate`` and LLMAgent read the file with the agent's roles."""
    path = tmp_path / "m.toml"
    path.write_text("[actions.Quote]\nper_run = 1\n")
    purchase = load("purchase.lsh")
    assert read_mandate(path, [purchase])  # no roles given: only the protocol is known
    with pytest.raises(MandateError, match="'Quote' is performed by Seller"):
        read_mandate(path, [purchase], {"Purchase": ["Buyer"]})
    assert read_mandate(path, [purchase], {"Purchase": ["Seller"]})


# Held: resends, rebuilds, whose enactments count ------------------------------------


class FailingOnce(MemoryStore):
    failures = 0

    def append_now(self, mas: str, protocol: Any, batches: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        super().append_now(mas, protocol, batches)


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_resends_rebuilds_and_others_enactments(policy: str) -> None:
    store = FailingOnce()
    server = SyncServer.embedded(
        [PURCHASE], AGENTS, policy=policy, batch_window_ms=5, store=store,
        mandates={"b": {"enactments": 2, "actions": {"Accept": {"per_run": 2,
                                                                "per_enactment": 1}}}},
    )
    async with server:
        first = await attempt(server, "b", [rfq("r1")], "id-1")
        second = await attempt(server, "b", [rfq("r2")], "id-2")
        full = await attempt(server, "b", [rfq("r3")], "id-3")
        assert isinstance(full, Rejected) and "enactments = 2" in full.violation.message
        # Resent after the count is full: the original receipts, not a refusal,
        # even racing a new attempt that the count refuses.
        again = await asyncio.gather(
            attempt(server, "b", [rfq("r1")], "id-1"), attempt(server, "b", [rfq("r4")], "id-4"),
            attempt(server, "b", [rfq("r2")], "id-2"),
        )
        assert [getattr(a, "seq", a) for a in again[::2]] == [first.seq, second.seq]
        assert isinstance(again[1], Rejected) and again[1].violation.rule == "mandate"
        # Joining an enactment another agent started does not count as starting one.
        assert not isinstance(await attempt(server, "c", [rfq("z")]), Exception)
        assert not isinstance(await attempt(server, "s", [quote("z")]), Exception)
        assert not isinstance(await attempt(server, "b", [accept("z")]), Exception)
        # A commit that fails is not counted once the state is rebuilt from the log.
        assert not isinstance(await attempt(server, "s", [quote("r1")]), Exception)
        store.failures = 1
        lost = await attempt(server, "b", [accept("r1")], "acc-1")
        assert isinstance(lost, ServiceError) and lost.code == "store-failed"
        done = await attempt(server, "b", [accept("r1")], "acc-1")  # 2 of per_run 2
        assert not isinstance(done, Exception), done
        assert not isinstance(await attempt(server, "s", [quote("r2")]), Exception)
        over = await attempt(server, "b", [accept("r2")])
        assert isinstance(over, Rejected) and "actions.Accept.per_run = 2" in str(over)
        assert await performed(server, "b", "Accept") == 2
        assert await performed(server, "b", "RFQ") == 2
    # A restart recounts the log: nothing new is granted.
    async with SyncServer.embedded(
        [PURCHASE], AGENTS, store=store, mandates={"b": {"enactments": 2}}
    ) as restarted:
        refused = await attempt(restarted, "b", [rfq("r9")])
        assert isinstance(refused, Rejected) and refused.violation.rule == "mandate"


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_a_burst_through_several_connections_gets_the_count(policy: str) -> None:
    """Held: the agent's adapters on several SyncExecutors (connections of
    their own), each with the MAS's mandate, all at once."""
    mandate = {"enactments": 3}
    async with Harness("http", [SIMPLE], {"platform": ["Platform"]}, policy=policy,
                       batch_window_ms=5, mandates={"platform": mandate}) as h:
        adapters = []
        for _ in range(4):
            adapter = PeachAdapter("platform", SIMPLE, "Platform",
                                   h.executor("platform", fresh=True))
            h.adapters.append(adapter)
            await adapter.start()
            adapters.append(adapter)
        results = await asyncio.gather(
            *(a.attempt([checkout(a)]) for a in adapters for _ in range(5)),
            return_exceptions=True,
        )
        assert sum(not isinstance(r, BaseException) for r in results) == 3, results
        assert all(
            isinstance(r, MandateRefused) or getattr(r, "rule", None) == "mandate"
            for r in results if isinstance(r, BaseException)
        ), results
        ledger = h.server.ledgers[("default", "SimpleUCP")]
        assert len(list(ledger.state.roots())) == 3


async def test_an_in_process_executor_gets_the_full_mandate() -> None:
    server = SyncServer.embedded([SIMPLE], {"platform": ["Platform"]},
                                 mandates={"platform": {"enactments": 1}})
    async with server:
        adapter = PeachAdapter("platform", SIMPLE, "Platform", LocalExecutor(server))
        async with adapter:
            assert adapter.mandate is not None and adapter.mandate.enactments == 1


# Broke, needs a change in syncserver/_shared.py: a clash counts twice ----------------


@contextlib.asynccontextmanager
async def deaf(server: SyncServer, protocol: str) -> AsyncIterator[None]:
    """The server hears of no other server's commit: its replica stays behind."""
    store: Any = server.store
    key = ("default", protocol)
    heard = store._watchers[key]
    store._watchers[key] = lambda seq: None
    try:
        yield
    finally:
        store._watchers[key] = heard


async def caught_up(server: SyncServer, seq: int) -> None:
    """Until the server's ledger has followed the log to ``seq`` (its stream)."""
    async for batch in server.ledgers[("default", "Purchase")].subscribe(0):
        if batch.seq >= seq:
            return


async def test_a_clash_over_a_shared_log_counts_an_attempt_once(
    pg_url: str,  # noqa: F811 (the fixture)
) -> None:
    """Two servers on one PostgreSQL log; b hears nothing of a's commits. b's
    Accept on r1 is checked against its replica (counted), clashes with a's
    quote it missed (undone, checked again: counted again). Accept per_run is 2:
    the second Accept, on r2, must go; with the double count it is refused."""
    mandates = {"b": {"actions": {"Accept": {"per_run": 2}}}}
    a = SyncServer.embedded([PURCHASE], AGENTS, store=pg_url, mandates=mandates)
    b = SyncServer.embedded([PURCHASE], AGENTS, store=pg_url, mandates=mandates)
    async with a, b, asyncio.timeout(30):
        for instances, who in (([rfq("r1")], "b"), ([quote("r1")], "s"),
                               ([rfq("r2")], "b"), ([quote("r2")], "s")):
            assert not isinstance(await attempt(a, who, instances), Exception)
        await caught_up(b, 4)
        async with deaf(b, "Purchase"):
            assert not isinstance(await attempt(a, "s", [quote("r1", "q2")]), Exception)
            done = await attempt(b, "b", [accept("r1")], "acc-1")  # clashes, then goes
            assert not isinstance(done, Exception), done
        second = await attempt(b, "b", [accept("r2")], "acc-2")
        assert not isinstance(second, Exception), second
