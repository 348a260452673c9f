"""The shipped protocols forbid what their domain forbids: a checkout is completed
or cancelled, never both, a purchase cannot be cancelled once shipped, and a
call for proposals cannot be called off once a proposal was awarded.

Before these rules SimpleUCP and ResilientUCP accepted a Platform's ``Cancel``
after its ``Complete`` (the merchant then answers 409), and Purchase accepted the
Buyer's ``Cancel`` after ``Ship`` and ``Deliver``. IncrementalUCP kept Complete
and Cancel in versions (key ``v``), and its ``nono Completed Cancelled`` and
``nogo Cancel -/> Complete`` relate only instances of one version: the Platform
could Complete under one version and Cancel under another (or the reverse), and
the Business answer both. ContractNet's ``nogo Cancel -/> Award`` did not stop a
Cancel after the Award. Each test shows the refusal, with the rule and the
action that excludes it, and that the same action is still accepted at the
point just before; each fails on the old protocol text.
"""

from __future__ import annotations

from typing import Any

import pytest

from langshaw import ActionInstance, LangshawProtocol, SocialState, Violation
from tests.conftest import (
    LINE_ITEMS,
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


# IncrementalUCP: one completion or cancellation per checkout, whatever the versions -----


def changed_checkout() -> SocialState:
    """An IncrementalUCP checkout (eid e1, session chk_1) changed in two versions,
    v1 and v2, each acknowledged: where the old text let Complete and Cancel
    happen once per version."""
    state = SocialState(load("incremental-ucp.lsh"))
    perform(state, "Create", eid="e1", line_items=LINE_ITEMS, currency="USD", payment={})
    perform(state, "Created", eid="e1", Create=True, id="chk_1")
    for v, code in (("v1", "10OFF"), ("v2", "20OFF")):
        perform(state, "ApplyDiscounts", eid="e1", v=v, Created=True, id="chk_1",
                discount_codes={"codes": [code]})
        perform(state, "DiscountsApplied", eid="e1", v=v, ApplyDiscounts=True)
    return state


INCREMENTAL_CANCEL = dict(eid="e1", Created=True, id="chk_1")
INCREMENTAL_COMPLETE = dict(eid="e1", Create=True, id="chk_1", **SIMPLE_COMPLETE)
E1 = {"eid": "e1"}


def scopes(state: SocialState, role: str, name: str) -> list[dict[str, Any]]:
    """The scopes in which ``role`` may perform ``name`` now (a fresh version
    shows as a key missing from ``keys``)."""
    return [e.keys for e in state.enabled(role, E1) if e.action.name == name]


def test_incremental_complete_and_cancel_belong_to_the_checkout_not_a_version() -> None:
    protocol = load("incremental-ucp.lsh")
    for name in ("Complete", "Completed", "Cancel", "Cancelled"):
        assert protocol.action(name).keys == ("eid",), name
    assert {frozenset(group) for group in protocol.nono} >= {
        frozenset(("Complete", "Cancel")), frozenset(("Completed", "Cancelled"))}


def test_an_incremental_checkout_whose_completion_was_requested_cannot_be_cancelled() -> None:
    """Complete sent (after two versions): no Cancel in any version, new or old."""
    state = changed_checkout()
    assert scopes(state, "Platform", "Cancel") == [E1]
    assert state.check([instance(state.protocol, "Cancel", **INCREMENTAL_CANCEL)]) is None
    perform(state, "Complete", **INCREMENTAL_COMPLETE)
    violation = refused(state, "Cancel", **INCREMENTAL_CANCEL)
    assert (violation.rule, violation.attribute) == ("nono", "Complete")
    assert "'Cancel' and 'Complete' exclude each other (nono)" in violation.message
    assert scopes(state, "Platform", "Cancel") == []
    assert [e.action.name for e in state.enabled("Business", E1)
            if e.action.name.startswith(("Complete", "Cancel"))] == ["Completed"]


def test_a_completed_incremental_checkout_cannot_be_cancelled() -> None:
    state = changed_checkout()
    perform(state, "Complete", **INCREMENTAL_COMPLETE)
    perform(state, "Completed", eid="e1", Complete=True, order=ORDER)
    assert state.is_complete(E1)
    violation = refused(state, "Cancel", **INCREMENTAL_CANCEL)
    assert (violation.rule, violation.attribute) == ("nono", "Complete")
    # The order ships from the root scope, where Completed now is.
    perform(state, "Shipped", eid="e1", Completed=True, order_id="o1")


def test_a_cancelled_incremental_checkout_cannot_be_completed() -> None:
    state = changed_checkout()
    assert scopes(state, "Platform", "Complete") == [E1]
    assert state.check([instance(state.protocol, "Complete", **INCREMENTAL_COMPLETE)]) is None
    perform(state, "Cancel", **INCREMENTAL_CANCEL)
    violation = refused(state, "Complete", **INCREMENTAL_COMPLETE)
    assert (violation.rule, violation.attribute) == ("nono", "Cancel")
    assert "'Complete' and 'Cancel' exclude each other (nono)" in violation.message
    assert scopes(state, "Platform", "Complete") == []
    perform(state, "Cancelled", eid="e1", Cancel=True)
    assert state.is_complete(E1)
    violation = refused(state, "Completed", eid="e1", Complete=True, order=ORDER)
    assert violation.rule == "dependency"  # no Complete to answer, in any version


def test_a_complete_the_merchant_cannot_say_ends_the_incremental_checkout() -> None:
    """StatusChange answers a Complete that is not Completed: it ends the
    checkout, and the Platform may not cancel (the order may exist)."""
    state = changed_checkout()
    perform(state, "Complete", **INCREMENTAL_COMPLETE)
    perform(state, "StatusChange", eid="e1", Created=True, status="complete_in_progress")
    assert state.is_complete(E1)
    violation = refused(state, "Cancel", **INCREMENTAL_CANCEL)
    assert (violation.rule, violation.attribute) == ("nono", "Complete")


# ContractNet: no calling off once a proposal was awarded ------------------------------------


def proposed_request() -> SocialState:
    """A call for proposals (cfp r1) with one proposal, bid b1, not awarded yet."""
    state = SocialState(load("contract-net.lsh"))
    perform(state, "CallForProposals", cfp="r1", request="2 nights, Lyon", budget=300)
    perform(state, "Propose", cfp="r1", bid="b1", CallForProposals=True, hotel="Hotel du Parc",
            price=250, offer="2 nights, breakfast")
    return state


AWARD = dict(cfp="r1", Propose=True, winner="b1")
CNET_CANCEL = dict(cfp="r1", CallForProposals=True, cancellation="trip called off")
R1 = {"cfp": "r1"}


def test_an_awarded_request_cannot_be_cancelled() -> None:
    state = proposed_request()
    assert state.check([instance(state.protocol, "Cancel", **CNET_CANCEL)]) is None
    assert "Cancel" in offered(state, "Customer", R1)
    perform(state, "Award", **AWARD)
    violation = refused(state, "Cancel", **CNET_CANCEL)
    assert (violation.rule, violation.attribute) == ("nono", "Award")
    assert "'Cancel' and 'Award' exclude each other (nono)" in violation.message
    assert "Cancel" not in offered(state, "Customer", R1)
    assert {"Confirmed", "Failure"} <= set(offered(state, "Hotel", R1))
    perform(state, "Confirmed", cfp="r1", Award=True, winner="b1", booking="BK-1")
    assert state.is_complete(R1)
    assert refused(state, "Cancel", **CNET_CANCEL).rule == "nono"


def test_a_cancelled_request_cannot_be_awarded() -> None:
    state = proposed_request()
    assert state.check([instance(state.protocol, "Award", **AWARD)]) is None
    perform(state, "Cancel", **CNET_CANCEL)
    assert state.is_complete(R1)
    violation = refused(state, "Award", **AWARD)
    assert (violation.rule, violation.attribute) == ("nono", "Cancel")
    assert "Award" not in offered(state, "Customer", R1)
