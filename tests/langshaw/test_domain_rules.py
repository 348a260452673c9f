"""The shipped protocols forbid what their domain forbids: a checkout is completed
or cancelled, never both, and a purchase cannot be cancelled once shipped.

Before these rules SimpleUCP and ResilientUCP accepted a Platform's ``Cancel``
after its ``Complete`` (the merchant then answers 409), and Purchase accepted the
Buyer's ``Cancel`` after ``Ship`` and ``Deliver``. Each test shows the refusal,
with the rule and the action that excludes it, and that the same ``Cancel`` is
still accepted at the point just before; each fails on the old protocol text.
"""

from __future__ import annotations

from typing import Any

import pytest

from langshaw import ActionInstance, LangshawProtocol, SocialState, Violation
from tests.conftest import (
    ORDER,
    SIMPLE_COMPLETE,
    SIMPLE_CREATE,
    SIMPLE_CREATED,
    load,
)

CHECKOUTS = ["atomic-ucp.lsh", "resilient-ucp.lsh"]


def instance(protocol: LangshawProtocol, name: str, **bindings: Any) -> ActionInstance:
    return ActionInstance(protocol.action(name), bindings)


def perform(state: SocialState, name: str, **bindings: Any) -> None:
    violation = state.attempt([instance(state.protocol, name, **bindings)])
    assert violation is None, violation


def refused(state: SocialState, name: str, **bindings: Any) -> Violation:
    violation = state.check([instance(state.protocol, name, **bindings)])
    assert violation is not None, f"{name} was accepted"
    return violation


def offered(state: SocialState, role: str, root: dict[str, Any]) -> list[str]:
    return sorted(e.action.name for e in state.enabled(role, root))


# Checkouts: SimpleUCP and ResilientUCP -------------------------------------------------


def created_checkout(name: str) -> SocialState:
    """A checkout the Business has opened (Created), with session id chk_1."""
    state = SocialState(load(name))
    perform(state, "Create", cid="c1", **SIMPLE_CREATE)
    perform(state, "Created", cid="c1", Create=True, id="chk_1", **SIMPLE_CREATED)
    return state


CANCEL = dict(cid="c1", Created=True, id="chk_1")
COMPLETE = dict(cid="c1", Created=True, id="chk_1", **SIMPLE_COMPLETE)


@pytest.mark.parametrize("name", CHECKOUTS)
def test_a_completed_checkout_cannot_be_cancelled(name: str) -> None:
    state = created_checkout(name)
    assert state.check([instance(state.protocol, "Cancel", **CANCEL)]) is None
    perform(state, "Complete", **COMPLETE)
    perform(state, "Completed", cid="c1", Complete=True, order=ORDER)
    assert state.is_complete({"cid": "c1"})
    violation = refused(state, "Cancel", **CANCEL)
    assert (violation.rule, violation.attribute) == ("nono", "Complete")
    assert "'Cancel' and 'Complete' exclude each other (nono)" in violation.message


@pytest.mark.parametrize("name", CHECKOUTS)
def test_a_checkout_whose_completion_was_requested_cannot_be_cancelled(name: str) -> None:
    """Complete sent, not answered yet: the Platform has decided; only the
    Business's answer is left."""
    state = created_checkout(name)
    assert "Cancel" in offered(state, "Platform", {"cid": "c1"})
    perform(state, "Complete", **COMPLETE)
    violation = refused(state, "Cancel", **CANCEL)
    assert (violation.rule, violation.attribute) == ("nono", "Complete")
    assert "Cancel" not in offered(state, "Platform", {"cid": "c1"})
    assert "Completed" in offered(state, "Business", {"cid": "c1"})


def test_simple_ucp_cancel_before_complete_is_accepted_and_ends_the_checkout() -> None:
    """Nothing can complete a cancelled SimpleUCP checkout, so Cancel is an ending
    (the enactment stays live)."""
    state = created_checkout("atomic-ucp.lsh")
    perform(state, "Cancel", **CANCEL)
    assert state.is_complete({"cid": "c1"})
    violation = refused(state, "Complete", **COMPLETE)
    assert (violation.rule, violation.attribute) == ("nono", "Cancel")
    assert offered(state, "Platform", {"cid": "c1"}) == []


def test_resilient_cancel_before_complete_is_accepted_and_confirmed() -> None:
    state = created_checkout("resilient-ucp.lsh")
    perform(state, "Cancel", **CANCEL)
    violation = refused(state, "Complete", **COMPLETE)
    assert (violation.rule, violation.attribute) == ("nono", "Cancel")
    perform(state, "Cancelled", cid="c1", Cancel=True)
    assert state.is_complete({"cid": "c1"})


# Purchase --------------------------------------------------------------------------------


def accepted_purchase() -> SocialState:
    """A purchase whose buyer accepted quote q1."""
    state = SocialState(load("purchase.lsh"))
    perform(state, "RFQ", ID="p1", item="pen", budget=10)
    perform(state, "Quote", ID="p1", qid="q1", RFQ=True, item="pen", price=5)
    perform(state, "Accept", ID="p1", Quote=True, chosen="q1", price=5, address="1 Main St")
    return state


PURCHASE_CANCEL = dict(ID="p1", Accept=True, reason="changed my mind")
SHIP = dict(ID="p1", Accept=True, item="pen", address="1 Main St", delivery_date="mon")


def test_a_shipped_purchase_cannot_be_cancelled() -> None:
    state = accepted_purchase()
    assert state.check([instance(state.protocol, "Cancel", **PURCHASE_CANCEL)]) is None
    assert "Cancel" in offered(state, "Buyer", {"ID": "p1"})
    perform(state, "Ship", **SHIP)
    violation = refused(state, "Cancel", **PURCHASE_CANCEL)
    assert (violation.rule, violation.attribute) == ("nogo", "Ship")
    assert "'Ship -/> Cancel' (nogo)" in violation.message
    assert "Cancel" not in offered(state, "Buyer", {"ID": "p1"})


def test_a_delivered_purchase_cannot_be_cancelled() -> None:
    state = accepted_purchase()
    perform(state, "Ship", **SHIP)
    perform(state, "Deliver", ID="p1", Ship=True, address="1 Main St", outcome="left at door")
    violation = refused(state, "Cancel", **PURCHASE_CANCEL)
    assert violation.rule == "nogo" and violation.attribute == "Ship"
    assert offered(state, "Buyer", {"ID": "p1"}) == ["Completed", "PreferDate"]


def test_cancel_and_ship_exclude_each_other_whichever_comes_first() -> None:
    """The rule Purchase always had (Cancel -/> Ship) holds beside the new one."""
    cancelled, shipped = accepted_purchase(), accepted_purchase()
    perform(cancelled, "Cancel", **PURCHASE_CANCEL)
    assert cancelled.is_complete({"ID": "p1"})
    violation = refused(cancelled, "Ship", **SHIP)
    assert (violation.rule, violation.attribute) == ("nogo", "Cancel")
    perform(shipped, "Ship", **SHIP)
    violation = refused(shipped, "Cancel", **PURCHASE_CANCEL)
    assert (violation.rule, violation.attribute) == ("nogo", "Ship")
