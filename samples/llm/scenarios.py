"""Ahoy's evaluation, on strabo's protocols: one LLM agent, coded counterparts.

Each scenario builds a small MAS in-process (an embedded SyncServer, coded
agents for the other roles), runs one :class:`~peach.llm.LLMAgent` with a goal
in plain words, and judges the run by what was finalized, not by what the model
said. The finalized log is also replayed through the protocol semantics from
scratch, so a protocol violation that got through would be counted.

The tests (tests/peach/llm) run these scenarios against a scripted model on loopback,
in both providers' wire formats; ``bench/llm_eval.py`` runs them against a real
model (any provider of :data:`peach.llm.PROVIDERS`), or against
``samples/llm/fake_openai.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langshaw import ActionInstance, LangshawProtocol, SocialState
from peach import LocalExecutor, PeachAdapter
from peach.llm import AgentReport, Budget, Hooks, LLMAgent
from samples.llm import counterparts
from syncserver import SyncServer

PROTOCOLS = Path(__file__).resolve().parents[2] / "protocols"
ADDRESS = "1 Main St, Raleigh NC"


@dataclass
class Logged:
    """One finalized action, as the SyncServer's log has it."""

    protocol: str
    instance: ActionInstance
    performer: str

    @property
    def name(self) -> str:
        return self.instance.name

    def __getitem__(self, attribute: str) -> Any:
        return self.instance.bindings[attribute]


@dataclass
class Outcome:
    """How one scenario went."""

    scenario: str
    success: bool
    detail: str
    report: AgentReport
    violations: int = 0  # LLM agent actions finalized although the protocol forbids them
    log: list[Logged] = field(default_factory=list)

    @property
    def attempted(self) -> int:
        return self.report.actions + self.report.rejections


class World:
    """An embedded SyncServer (in memory) and the adapters of one scenario."""

    def __init__(self, protocols: Sequence[str], agents: Mapping[str, Sequence[str]]) -> None:
        self.protocols = {
            p.name: p for p in (LangshawProtocol.load(PROTOCOLS / f) for f in protocols)
        }
        self.agents = dict(agents)
        self.server = SyncServer.embedded(list(self.protocols.values()), agents)
        self._executors: dict[str, LocalExecutor] = {}
        self.adapters: list[PeachAdapter] = []
        self.stack = contextlib.AsyncExitStack()

    def adapter(self, agent: str, role: str, protocol: str, cls: Any = PeachAdapter,
                **options: Any) -> PeachAdapter:
        executor = self._executors.setdefault(agent, LocalExecutor(self.server))
        adapter = cls(agent, self.protocols[protocol], role, executor, **options)
        self.adapters.append(adapter)
        return adapter

    async def __aenter__(self) -> World:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for adapter in reversed(self.adapters):
            await adapter.stop()
        await self.stack.aclose()
        await self.server.stop()

    async def start_counterparts(self, llm: PeachAdapter | Sequence[PeachAdapter]) -> None:
        mine = {id(a) for a in ([llm] if isinstance(llm, PeachAdapter) else llm)}
        for adapter in self.adapters:
            if id(adapter) not in mine:
                await adapter.start()

    async def settle(self) -> None:
        """Let the coded agents finish what they were doing."""
        for adapter in self.adapters:
            if adapter._running:
                await adapter.drain(grace=5.0)

    async def audit(self, llm: set[str]) -> tuple[list[Logged], int]:
        """The whole log, and how many of the LLM agent's actions in it the
        protocol forbids (replayed from scratch through the semantics)."""
        log: list[Logged] = []
        violations = 0
        system = self.server.config.mas["default"]
        for (_, name), ledger in self.server.ledgers.items():
            state = SocialState(self.protocols[name])
            for batch in await ledger.read(0, 1_000_000):
                for entry in batch.entries:
                    roles = system.agents[entry.performer].roles[name]
                    if state.attempt([entry.instance], roles) is not None:
                        state.apply([entry.instance])
                        violations += entry.performer in llm
                    log.append(Logged(name, entry.instance, entry.performer))
        return log, violations


@dataclass
class Scenario:
    name: str
    summary: str
    run: Callable[..., Awaitable[Outcome]]


# Scenarios --------------------------------------------------------------------------

PURCHASE_GOAL = f"""\
Buy a pen; spend at most 10 on it. Ask the sellers for quotes with a budget of
10. Two sellers, 'cheap' and 'dear', will quote: wait until both have quoted,
then accept the cheapest quote within budget (give its qid as chosen, and its
price), to be delivered to {ADDRESS}. When the pen is delivered, confirm receipt
and say how satisfied you are."""

LOGISTICS_GOAL = """\
Ship one order to 5 Oak St, Springfield: a glass vase (fragile) and a paperback
book. Ask for a shipping label for the order, ask for each of the two items to
be wrapped (say in the item's description when it is fragile), and see both
items packed."""

FLEXIBLE_GOALS = {
    "urgent": "Buy a phone charger. It is urgent: it must arrive tomorrow, whatever "
    "the delivery costs. Accept the merchant's offer and pay when asked (payment: "
    "'card on file').",
    "cheapest": "Buy a phone charger as cheaply as possible; there is no hurry. Accept "
    "the merchant's offer and pay when asked (payment: 'card on file').",
}

EVENT_GOAL = f"""\
You buy what your user asks for: each request names an item and the most to
spend on it. For each request, ask the sellers for quotes with that budget; two
sellers, 'cheap' and 'dear', quote: wait for both, then accept the cheapest quote
within budget (its qid as chosen, and its price), delivered to {ADDRESS}.
Confirm receipt of each delivery."""

UCP_GOAL = """\
Check out one bouquet of red roses from the merchant, with these values:
line_items [{"item": {"id": "bouquet_roses", "title": "Bouquet of Red Roses"}, "quantity": 1}]
currency "USD"
buyer {"full_name": "John Doe", "email": "john.doe@example.com"}
payment_pref {}
discount_codes {"codes": ["10OFF"]}
fulfillment_pref {"methods": [{"type": "shipping", "selected_destination_id": "addr_1",
  "groups": [{"selected_option_id": "std-ship"}]}]}
Once the merchant has created the checkout, complete it with risk_signals
{"ip": "127.0.0.1"}; the payment credential is supplied for you. Stop once the
order is placed."""

def payment_data() -> dict[str, Any]:
    """The instrument the bundled (and the UCP reference) merchant accepts;
    STRABO_PAYMENT_TOKEN overrides its token."""
    from strabo.ucp.platform_agent import SAMPLE_PAYMENT_DATA

    token = os.environ.get("STRABO_PAYMENT_TOKEN", SAMPLE_PAYMENT_DATA["credential"]["token"])
    return {**SAMPLE_PAYMENT_DATA, "credential": {"type": "token", "token": token}}


def _purchase_world(buyer_roles: Sequence[str] = ("Buyer",), protocols=("purchase.lsh",),
                    extra: Mapping[str, Sequence[str]] | None = None) -> World:
    agents = {"buyer": list(buyer_roles), "cheap": ["Seller"], "dear": ["Seller"],
              "shipper": ["Shipper"], **(extra or {})}
    return World(protocols, agents)


def _purchase_counterparts(world: World) -> None:
    counterparts.seller(world.adapter("cheap", "Seller", "Purchase"), counterparts.CHEAP)
    counterparts.seller(world.adapter("dear", "Seller", "Purchase"), counterparts.DEAR)
    counterparts.shipper(world.adapter("shipper", "Shipper", "Purchase"))


def _logistics_counterparts(world: World) -> None:
    counterparts.labeler(world.adapter("labeler", "Labeler", "Logistics"))
    counterparts.wrapper(world.adapter("wrapper", "Wrapper", "Logistics"))
    counterparts.packer(world.adapter("packer", "Packer", "Logistics"))


def _bought(log: Sequence[Logged], item: str) -> str | None:
    """Why the purchase of ``item`` is not right, or None when it is: the
    cheapest quote accepted, at its price, and the receipt confirmed."""
    ids = {e["ID"] for e in log if e.name == "RFQ" and e["item"] == item}
    if len(ids) != 1:
        return f"expected one request for a {item}, found {len(ids)}"
    [enactment] = ids
    mine = [e for e in log if e.protocol == "Purchase" and e["ID"] == enactment]
    quotes = {e["qid"]: e["price"] for e in mine if e.name == "Quote"}
    accepted = [e for e in mine if e.name == "Accept"]
    if not accepted:
        return f"no quote for the {item} was accepted (quotes: {quotes})"
    best = min(quotes, key=quotes.__getitem__)
    if accepted[0]["chosen"] != best:
        return f"accepted {accepted[0]['chosen']!r} for the {item}, not the cheapest {best!r}"
    if not any(e.name == "Completed" for e in mine):
        return f"the {item}'s receipt was not confirmed"
    return None


def _packed(log: Sequence[Logged]) -> str | None:
    packed = [e for e in log if e.name == "Packed"]
    if len(packed) != 2:
        return f"expected two items packed, found {len(packed)}"
    vase = [e for e in packed if "vase" in str(e["item"]).lower()]
    if not vase or vase[0]["wrapping"] != "bubble wrap":
        return "the vase was not wrapped as fragile"
    return None


async def _run(world: World, agent: LLMAgent, name: str,
               judge: Callable[[list[Logged]], str | None]) -> Outcome:
    await world.start_counterparts(agent.adapters)
    report = await agent.run()
    await world.settle()
    log, violations = await world.audit({a.name for a in agent.adapters})
    problem = judge(log)
    if problem is not None and report.status == "error":
        # Why the run stopped (the model unreachable, say) explains the log, not
        # the other way round: it comes first, the judge's verdict after.
        problem = f"the agent stopped on an error: {report.reason} (so: {problem})"
    elif problem is None and not report.ok:
        problem = f"the agent stopped: {report.status}: {report.reason}"
    return Outcome(name, problem is None, problem or str(report), report, violations, log)


async def purchase(**agent_options: Any) -> Outcome:
    async with _purchase_world() as world:
        _purchase_counterparts(world)
        buyer = world.adapter("buyer", "Buyer", "Purchase")
        agent = LLMAgent([buyer], PURCHASE_GOAL, **agent_options)
        return await _run(world, agent, "purchase", lambda log: _bought(log, "pen"))


async def logistics(**agent_options: Any) -> Outcome:
    agents = {"merchant": ["Merchant"], "labeler": ["Labeler"], "wrapper": ["Wrapper"],
              "packer": ["Packer"]}
    async with World(["logistics.lsh"], agents) as world:
        _logistics_counterparts(world)
        merchant = world.adapter("merchant", "Merchant", "Logistics")
        agent = LLMAgent([merchant], LOGISTICS_GOAL, **agent_options)
        return await _run(world, agent, "logistics", _packed)


async def concurrent(**agent_options: Any) -> Outcome:
    extra = {"labeler": ["Labeler"], "wrapper": ["Wrapper"], "packer": ["Packer"]}
    world = _purchase_world(("Purchase:Buyer", "Logistics:Merchant"),
                            ("purchase.lsh", "logistics.lsh"), extra)
    async with world:
        _purchase_counterparts(world)
        _logistics_counterparts(world)
        adapters = [world.adapter("buyer", "Buyer", "Purchase"),
                    world.adapter("buyer", "Merchant", "Logistics")]
        goal = f"Do both of these at once.\n1. {PURCHASE_GOAL}\n2. {LOGISTICS_GOAL}"
        agent = LLMAgent(adapters, goal, **agent_options)

        def judge(log: list[Logged]) -> str | None:
            return _bought(log, "pen") or _packed(log)

        return await _run(world, agent, "concurrent", judge)


async def flexible(mood: str = "urgent", **agent_options: Any) -> Outcome:
    agents = {"customer": ["FlexibleCustomer"], "merchant": ["FlexibleMerchant"]}
    async with World(["flexible-purchase.lsh"], agents) as world:
        counterparts.flexible_merchant(
            world.adapter("merchant", "FlexibleMerchant", "FlexiblePurchase"))
        customer = world.adapter("customer", "FlexibleCustomer", "FlexiblePurchase")
        agent = LLMAgent([customer], FLEXIBLE_GOALS[mood], **agent_options)
        wanted, unwanted = (("Express", "Standard") if mood == "urgent"
                            else ("Standard", "Express"))

        def judge(log: list[Logged]) -> str | None:
            names = {e.name for e in log}
            if f"{unwanted}DeliveryRequest" in names:
                return f"chose {unwanted.lower()} delivery for a goal that wants {wanted.lower()}"
            if f"{wanted}DeliveryRequest" not in names:
                return f"no {wanted.lower()} delivery was requested"
            return None if "Receipt" in names else "the purchase was not paid for"

        return await _run(world, agent, f"flexible-{mood}", judge)


async def event(**agent_options: Any) -> Outcome:
    """The user asks for a pen; once the pen is accepted, for a notebook too."""
    async with _purchase_world() as world:
        _purchase_counterparts(world)
        buyer = world.adapter("buyer", "Buyer", "Purchase")
        agent = LLMAgent([buyer], EVENT_GOAL, **agent_options)
        shipper = next(a for a in world.adapters if a.name == "shipper")
        second = asyncio.Event()

        @shipper.observation("Accept")
        async def on_accept(instance: ActionInstance, performer: str) -> None:
            if not second.is_set():  # mid-enactment: the pen is bought, not yet delivered
                second.set()
                await agent.inject({"request": "buy a notebook", "item": "notebook",
                                    "budget": 8})

        await agent.inject({"request": "buy a pen", "item": "pen", "budget": 10})

        def judge(log: list[Logged]) -> str | None:
            if not second.is_set():
                return "the second request was never made"
            return _bought(log, "pen") or _bought(log, "notebook")

        return await _run(world, agent, "event", judge)


async def ucp(merchant_url: str | None = None, **agent_options: Any) -> Outcome:
    """SimpleUCP as Platform, through the Business proxy, with the bundled merchant
    (or the one at ``merchant_url``); the payment credential comes from a hook."""
    from strabo import serve
    from strabo.merchant import create_app
    from strabo.proxy import ProxyAdapter
    from strabo.ucp.business_proxy import business_proxy

    agents = {"platform": ["Platform"], "business": ["Business"]}
    async with World(["atomic-ucp.lsh"], agents) as world:
        if merchant_url is None:
            merchant_url = await world.stack.enter_async_context(serve(create_app()))
        proxy: ProxyAdapter = business_proxy(
            world._executors.setdefault("business", LocalExecutor(world.server)), merchant_url)
        world.adapters.append(proxy)
        platform = world.adapter("platform", "Platform", "SimpleUCP")
        hooks = agent_options.pop("hooks", None) or Hooks()

        @hooks.before("Complete", provides=["payment_data"])
        def pay(bindings: dict[str, Any]) -> dict[str, Any]:
            return {**bindings, "payment_data": payment_data()}

        agent = LLMAgent([platform], UCP_GOAL, hooks=hooks, **agent_options)

        def judge(log: list[Logged]) -> str | None:
            done = [e for e in log if e.name == "Completed"]
            failed = [e for e in log if e.name == "Failed"]
            if failed:
                return f"the checkout failed: {failed[0]['reason']}"
            if not done or not (done[0]["order"] or {}).get("id"):
                return "no order was placed"
            return None

        return await _run(world, agent, "ucp", judge)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario("purchase", "(1) Purchase as Buyer, two competing Sellers", purchase),
        Scenario("logistics", "(2) the same agent, Logistics as Merchant", logistics),
        Scenario("concurrent", "(3) Purchase and Logistics at once in one agent", concurrent),
        Scenario("flexible-urgent", "(4a) FlexiblePurchase, urgent goal -> express",
                 lambda **o: flexible("urgent", **o)),
        Scenario("flexible-cheapest", "(4b) FlexiblePurchase, cheapest goal -> standard",
                 lambda **o: flexible("cheapest", **o)),
        Scenario("event", "(5) a second purchase requested mid-enactment", event),
        Scenario("ucp", "(6) UCP SimpleUCP checkout as Platform, credential by hook", ucp),
    ]
}

DEFAULT_BUDGET = Budget(max_calls=20, max_seconds=180.0, max_tokens=300_000)
