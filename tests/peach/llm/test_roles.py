"""An LLM agent playing a role adopted with a RoleSpec: the spec's goal and
constraints are in its prompt, coded actions are not offered to the model, a
must-never refusal is fed back like any other, and inspect() shows the decider."""

from __future__ import annotations

import json
from typing import Any

from peach import FeasibleAction, LocalExecutor, PeachAdapter
from peach.llm import Budget, LLMAgent
from peach.roles import MustNever, Responsibility, RoleSpec
from syncserver import SyncServer
from tests.conftest import ORDER, PAYMENT_DATA, load
from tests.peach.llm.fake import FakeModel

SIMPLE = load("atomic-ucp.lsh")


def create(quantity: int) -> dict[str, Any]:
    return {
        "line_items": [{"item": {"id": "roses", "title": "Roses"}, "quantity": quantity}],
        "currency": "USD",
        "payment_pref": {},
    }


ANSWERS = [
    {"when": {"has": ["Create"], "prompt_lacks": ["must-never"]},
     "content": [{"type": "tool_use", "name": "Create", "input": create(5)}]},
    {"when": {"has": ["Create"], "prompt_has": ["must-never"]},
     "content": [{"type": "tool_use", "name": "Create", "input": create(1)}]},
    {"reusable": True,
     "content": [{"type": "tool_use", "name": "wait", "input": {"for_actions": ["Completed"]}}]},
]


def small_orders(instance: Any, adapter: Any) -> bool:
    items = instance.bindings.get("line_items") or []
    return sum(item.get("quantity", 0) for item in items) > 2


async def test_a_spec_shapes_what_the_model_sees_and_may_do() -> None:
    server = SyncServer.embedded([SIMPLE], {"platform": ["Platform"], "business": ["Business"]})
    platform = PeachAdapter("platform", SIMPLE, "Platform", LocalExecutor(server))
    business = PeachAdapter("business", SIMPLE, "Business", LocalExecutor(server))

    @business.on_enabled("Created")
    async def created(fa: FeasibleAction) -> None:
        await business.attempt([fa.bind(id="chk_1", totals=[], payment={})])

    @business.on_enabled("Completed")
    async def completed(fa: FeasibleAction) -> None:
        await business.attempt([fa.bind(order=ORDER)])

    spec = RoleSpec(
        "Platform",
        goal="Buy one bunch of roses",
        domain="florist supplies",
        responsibilities=[
            Responsibility(
                "Purchasing",
                "keep orders small",
                actions=("Create", "Complete"),
                must_never=(MustNever("small-orders", "order at most 2 items", small_orders),),
            )
        ],
    )

    @spec.action("Complete", description="pay with the company card")
    async def complete(fa: FeasibleAction) -> None:
        await platform.attempt([fa.bind(payment_data=PAYMENT_DATA, risk_signals={})])

    platform.adopt(spec)
    fake = FakeModel(ANSWERS)
    async with server, fake.serving(), business:
        agent = LLMAgent(
            [platform], goal="", client=fake.client(), model="test-model",
            budget=Budget(max_calls=8, max_seconds=10),
        )
        report = await agent.run()
        seen = agent.inspect()
    assert report.status == "complete", (report, fake.unanswered)
    system = fake.requests[0]["system"]
    assert "As Platform in SimpleUCP: Buy one bunch of roses" in system  # the derived goal
    assert "- responsibility Purchasing: keep orders small (actions Create, Complete)" in system
    assert "  - never: order at most 2 items [small-orders]" in system
    assert "- performed by code, not by you: Complete" in system
    offered = {t["name"] for request in fake.requests for t in request["tools"]}
    assert "Complete" not in offered and "Create" in offered
    # The first Create broke the constraint: refused before it left the agent,
    # and the model was told why.
    [refusal] = [r for r in fake.requests[1]["results"] if r["error"]]
    assert "Create was refused (must-never)" in refusal["content"]
    assert "'small-orders'" in refusal["content"]
    [root] = platform.enactments()
    history = [(instance.name, who) for _, instance, who in platform.history(root)]
    assert history == [
        ("Create", "platform"), ("Created", "business"),
        ("Complete", "platform"), ("Completed", "business"),
    ]
    assert platform.history(root)[0][1].bindings["line_items"][0]["quantity"] == 1
    json.dumps(seen)
    assert seen["kind"] == "strabo.agent" and seen["decider"] == "LLM (anthropic, test-model)"
    assert seen["status"] == "complete" and seen["counters"]["rejections"] == 1
    [role] = seen["roles"]
    assert role["counters"]["refused by constraints"] == 1
    assert role["spec"]["actions"]["Complete"] == {
        "kind": "local", "description": "pay with the company card", "coded": True
    }
