"""Finalization policies, group commit and failures, with real agents over HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import ActionRejected, ExecutorError, FeasibleAction, PeachAdapter
from syncserver import SQLiteStore, SyncServer
from syncserver.store import MemoryStore
from tests.conftest import ORDER, PAYMENT_DATA, SIMPLE_CREATE, SIMPLE_CREATED, load, paper
from tests.harness import Harness, until

SIMPLE = load("atomic-ucp.lsh")
PURCHASE = load("purchase.lsh")
CREATE = SIMPLE_CREATE
CREATED = SIMPLE_CREATED


def coded_business(business: PeachAdapter) -> None:
    @business.on_enabled("Created")
    async def created(fa: FeasibleAction) -> None:
        await business.attempt([fa.bind(id=f"chk-{fa.keys['cid']}", **CREATED)])

    @business.observation("Complete")
    async def completed(action: ActionInstance, performer: str) -> None:
        await business.attempt(
            [
                business.build_action(
                    "Completed",
                    {**action.bindings, "order": {**ORDER, "id": f"order-{action['cid']}"}},
                )
            ]
        )


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_many_concurrent_checkouts_complete(policy: str, tmp_path) -> None:
    agents = {f"platform{i}": ["Platform"] for i in range(8)} | {"business": ["Business"]}
    async with Harness(
        "http", [SIMPLE], agents, policy=policy, batch_window_ms=5, store=str(tmp_path / "s.db")
    ) as h:
        business = h.adapter("business", "Business")
        coded_business(business)
        completed: list[str] = []
        changed = asyncio.Event()

        async def shopper(name: str, count: int) -> None:
            platform = h.adapter(name, "Platform")

            def mine(keys: dict[str, Any]) -> bool:
                # Every Platform agent sees every checkout: each completes its own.
                return platform.history(keys)[0][2] == name

            @platform.on_enabled("Complete")
            async def complete(fa: FeasibleAction) -> None:
                if mine(fa.keys):
                    await platform.attempt([fa.bind(payment_data=PAYMENT_DATA, risk_signals={})])

            @platform.on_completion
            async def done(keys: dict[str, Any], mas: str) -> None:
                if mine(keys):
                    completed.append(keys["cid"])
                    changed.set()

            await platform.start()
            creates = [platform.initiating()[0].bind(**CREATE) for _ in range(count)]
            await asyncio.gather(*(platform.attempt([c]) for c in creates))

        async with business:
            await asyncio.gather(*(shopper(f"platform{i}", 5) for i in range(8)))
            await until(lambda: len(completed) == 40, changed, seconds=30)
        assert len(set(completed)) == 40
        async with h.client("business") as client:
            listing = (
                await client.get(
                    "/mas/default/protocols/SimpleUCP/enactments", params={"limit": 100}
                )
            ).json()
        assert listing["total"] == 40 and all(e["complete"] for e in listing["enactments"])


async def test_purchase_with_coded_agents_over_http() -> None:
    agents = {"buyer": ["Buyer"], "seller": ["Seller"], "rival": ["Seller"], "shipper": ["Shipper"]}
    async with Harness("http", [PURCHASE], agents) as h:
        buyer, shipper = h.adapter("buyer", "Buyer"), h.adapter("shipper", "Shipper")
        sellers = {name: h.adapter(name, "Seller") for name in ("seller", "rival")}
        prices = {"seller": 5, "rival": 4}
        quotes = asyncio.Event()
        quoted: list[str] = []
        finished = asyncio.Event()
        for name, seller in sellers.items():

            def make(name: str, seller: PeachAdapter) -> None:
                @seller.on_enabled("Quote")
                async def quote(fa: FeasibleAction) -> None:
                    await seller.attempt([fa.bind(price=prices[name])])
                    quoted.append(name)
                    quotes.set()

                @seller.on_enabled("Ship")
                async def ship(fa: FeasibleAction) -> None:
                    history = seller.history(fa.keys)
                    mine = {i["qid"] for _, i, who in history if i.name == "Quote" and who == name}
                    if next(i for _, i, _ in history if i.name == "Accept")["chosen"] in mine:
                        await seller.attempt([fa.bind(delivery_date="monday")])

            make(name, seller)

        @shipper.on_enabled("Deliver")
        async def deliver(fa: FeasibleAction) -> None:
            await shipper.attempt([fa.bind(outcome="delivered")])

        @buyer.on_enabled("Completed")
        async def confirm(fa: FeasibleAction) -> None:
            await buyer.attempt([fa.bind(satisfaction="good")])

        @buyer.on_completion
        async def done(keys: dict[str, Any], mas: str) -> None:
            finished.set()

        async with buyer, shipper, sellers["seller"], sellers["rival"]:
            [rfq] = await buyer.attempt([buyer.initiating()[0].bind(item="pen", budget=10)])
            await until(lambda: len(quoted) == 2, quotes)
            await buyer.sync()
            offers = [i for _, i, _ in buyer.history(rfq.keys) if i.name == "Quote"]
            best = min(offers, key=lambda q: q["price"])
            accept = next(f for f in buyer.enabled(rfq.keys) if f.name == "Accept")
            await buyer.attempt(
                [accept.bind(chosen=best["qid"], price=best["price"], address="here")]
            )
            await asyncio.wait_for(finished.wait(), 10)
            shipped_by = [who for _, i, who in buyer.history(rfq.keys) if i.name == "Ship"]
        assert best["price"] == 4 and shipped_by == ["rival"]


async def complete_and_cancel(policy: str) -> list[list[str]]:
    """Platform sends Complete and Cancel at once; returns the batches, as action names.

    On SimpleUCP as the paper prints it, where nothing relates the two: the
    shipped one excludes them (nono Complete Cancel), and refuses the second."""
    async with Harness(
        "http",
        [paper("atomic-ucp.lsh")],
        {"platform": ["Platform"], "business": ["Business"]},
        policy=policy,
        batch_window_ms=50,
    ) as h:
        platform, business = h.adapter("platform", "Platform"), h.adapter("business", "Business")
        async with platform, business:
            # The listing is untyped: what is not given is null.
            [create] = await platform.attempt([platform.initiating()[0].bind(
                **CREATE, buyer=None, discount_codes=None, fulfillment_pref=None)])
            await business.sync()
            await business.attempt([business.build_action("Created", {
                **create.keys, "id": "c", **CREATED, "discounts": None, "fulfillment": None})])
            await platform.sync()
            complete, cancel = sorted(
                platform.enabled(create.keys), key=lambda f: f.name != "Complete"
            )
            results = await asyncio.gather(
                platform.attempt([complete.bind(payment_data=PAYMENT_DATA, risk_signals={})]),
                platform.attempt([cancel.bind()]),
            )
            assert [r[0].name for r in results] == ["Complete", "Cancel"]  # both accepted
            async with h.client("business") as client:
                log = (await client.get("/mas/default/protocols/SimpleUCP/log")).json()
        return [[i["action"] for i in e["instances"]] for e in log["events"]][2:]


async def test_complete_and_cancel_instant_are_two_batches_in_arrival_order() -> None:
    batches = await complete_and_cancel("instant")
    assert sorted(batches) == [["Cancel"], ["Complete"]]


async def test_complete_and_cancel_batched_are_delivered_together() -> None:
    batches = await complete_and_cancel("batched")
    assert len(batches) == 1 and sorted(batches[0]) == ["Cancel", "Complete"]


@pytest.mark.parametrize("policy", ["instant", "batched"])
async def test_sayso_priority_decides_concurrent_bindings(policy: str) -> None:
    window = 200.0 if policy == "batched" else 20.0
    server = SyncServer.embedded(
        [PURCHASE], {"b": ["Buyer"], "s": ["Seller"]}, policy=policy, batch_window_ms=window
    )
    async with server:
        buyer, seller = server.agent("default", "b"), server.agent("default", "s")

        def inst(name: str, **b: Any) -> ActionInstance:
            return ActionInstance(PURCHASE.action(name), b)

        def attempt(agent: Any, instance: ActionInstance) -> asyncio.Task[Any]:
            return asyncio.create_task(server.attempt("default", "Purchase", agent, [instance]))

        await attempt(buyer, inst("RFQ", ID="p", item="pen", budget=9))
        await attempt(seller, inst("Quote", ID="p", qid="q", RFQ=True, item="pen", price=3))
        await attempt(buyer, inst("Accept", ID="p", Quote=True, chosen="q", price=3, address="a"))
        ledger = server.ledgers[("default", "Purchase")]
        ship = attempt(
            seller,
            inst("Ship", ID="p", Accept=True, item="pen", address="a", delivery_date="tuesday"),
        )
        prefer = attempt(buyer, inst("PreferDate", ID="p", Accept=True, delivery_date="monday"))
        if policy == "batched":
            # Tasks start in creation order, and reach the window without suspending:
            # one turn of the loop puts Ship there first.
            await asyncio.sleep(0)
            assert [a.performer for a, _ in ledger._window] == ["s", "b"]
        results = await asyncio.gather(ship, prefer, return_exceptions=True)
    if policy == "instant":
        # First come, first served: Ship fixed the date, PreferDate must carry it.
        assert results[0].batch.entries[0].instance.name == "Ship"
        assert results[1].code == "bound"
    else:
        # Buyer > Seller : delivery_date, so PreferDate goes first in the batch.
        assert results[1].batch.entries[0].instance.name == "PreferDate"
        assert results[0].code == "bound" and results[0].details["attribute"] == "delivery_date"


class CountingStore(SQLiteStore):
    """Counts transactions (commits), however the ledger reaches the store."""

    appends = 0

    def _append(self, rows: Any) -> None:
        type(self).appends += 1
        super()._append(rows)


async def test_concurrent_attempts_share_commits(tmp_path) -> None:
    store = CountingStore(tmp_path / "g.db")
    server = SyncServer.embedded([SIMPLE], {"platform": ["Platform"]}, store=store)
    async with server:
        agent = server.agent("default", "platform")
        creates = [
            ActionInstance(SIMPLE.action("Create"), {"cid": f"c{i}", **CREATE}) for i in range(64)
        ]
        batches = await asyncio.gather(
            *(server.attempt("default", "SimpleUCP", agent, [c]) for c in creates)
        )
    assert sorted(b.seq for b in batches) == list(range(1, 65))
    assert 1 <= CountingStore.appends < 64  # group commit: far fewer transactions than attempts


class FailingOnce(MemoryStore):
    """A memory store whose writes fail while ``failures`` lasts."""

    failures = 1

    def append_now(self, mas: str, protocol: Any, batches: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        super().append_now(mas, protocol, batches)


@pytest.mark.parametrize("kind", ["local", "http"])
async def test_a_failed_commit_is_not_acknowledged_and_leaves_no_trace(kind: str) -> None:
    store = FailingOnce()
    store.failures = 10  # more than the executor's retries
    async with Harness(kind, [SIMPLE], {"platform": ["Platform"]}, store=store) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            create = platform.initiating()[0].bind(**CREATE)
            with pytest.raises(
                ExecutorError, match="the attempt was not recorded: disk full"
            ) as caught:
                await platform.attempt([create])
            assert caught.value.status == 503
            assert platform.enactments() == []
            # The server's state forgot it too: the very same instance is accepted now.
            store.failures = 0
            [done] = await platform.attempt([create])
            assert done.bindings["cid"] == create["cid"]
            with pytest.raises(ActionRejected):
                await platform.attempt([create])


@pytest.mark.parametrize("kind", ["local", "http"])
async def test_a_transient_store_failure_is_retried_under_the_same_attempt_id(kind: str) -> None:
    async with Harness(kind, [SIMPLE], {"platform": ["Platform"]}, store=FailingOnce()) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            [done] = await platform.attempt([platform.initiating()[0].bind(**CREATE)])
            assert len(platform.enactments()) == 1
            assert [i.name for _, i, _ in platform.history(done.keys)] == ["Create"]


class FailingSQLite(SQLiteStore):
    """A durable store whose commits fail while ``failures`` lasts."""

    failures = 0

    def _append(self, rows: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        super()._append(rows)


async def test_a_failed_sqlite_commit_is_reported_and_forgotten(tmp_path) -> None:
    store = FailingSQLite(tmp_path / "f.db")
    async with Harness("local", [SIMPLE], {"platform": ["Platform"]}, store=store) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            create = platform.initiating()[0].bind(**CREATE)
            store.failures = 10
            with pytest.raises(ExecutorError, match="the attempt was not recorded: disk full"):
                await platform.attempt([create])
            store.failures = 1  # one more failure: the executor's retry gets through
            [done] = await platform.attempt([create])
            assert done["cid"] == create["cid"]
    again = Harness("local", [SIMPLE], {"platform": ["Platform"]}, store=str(tmp_path / "f.db"))
    async with again as h:
        ledger = h.server.ledgers[("default", "SimpleUCP")]
        assert ledger.committed_seq == 1 and len(ledger.state) == 1


async def test_a_cancelled_attempt_in_a_batched_window_loses_no_other_answer() -> None:
    """An agent that stops waiting (LLMAgent.stop(), a budget) cancels its attempt
    in a window; the window is still finalized, the other attempt answered, and
    the cancelled one committed: its resend gets its receipt (issue 31, item 5)."""
    server = SyncServer.embedded(
        [PURCHASE], {"b": ["Buyer"], "c": ["Buyer"]}, policy="batched", batch_window_ms=50
    )
    async with server, asyncio.timeout(30):  # the bug: the other answer never came
        b, c = server.agent("default", "b"), server.agent("default", "c")

        def rfq(agent: Any, qid: str) -> asyncio.Task[Any]:
            instance = ActionInstance(PURCHASE.action("RFQ"), {"ID": qid, "item": "pen",
                                                                "budget": 9})
            return asyncio.create_task(
                server.attempt("default", "Purchase", agent, [instance], attempt_id=f"a-{qid}")
            )

        gives_up, waits = rfq(b, "p1"), rfq(c, "p2")
        await asyncio.sleep(0)  # one turn: both tasks reach the window without suspending
        ledger = server.ledgers[("default", "Purchase")]
        assert len(ledger._window) == 2
        gives_up.cancel()
        receipt = await waits
        assert sorted(e.instance["ID"] for e in receipt.batch.entries) == ["p1", "p2"]
        again = await rfq(b, "p1")  # the same id, resent: answered from the log
        assert again.batch.seq == receipt.batch.seq
