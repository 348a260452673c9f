"""The enactment semantics, step by step on SimpleUCP, IncrementalUCP and Purchase."""

from __future__ import annotations

from typing import Any

import pytest

from langshaw import ActionInstance, LangshawProtocol, SocialState, Violation
from langshaw.semantics import Enablement
from tests.conftest import PAYMENT_DATA, paper


def instance(protocol: LangshawProtocol, name: str, **bindings: Any) -> ActionInstance:
    return ActionInstance(protocol.action(name), bindings)


def names(enabled: list[Enablement]) -> list[str]:
    return sorted(e.action.name for e in enabled)


def only(enabled: list[Enablement], name: str) -> Enablement:
    found = [e for e in enabled if e.action.name == name]
    assert len(found) == 1, found
    return found[0]


CREATE = dict(
    line_items=[{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}],
    currency="USD",
    buyer={"email": "a@example.com"},
    payment_pref={},
)
CREATED = dict(Create=True, id="chk_1", totals=[], payment={})


def items(name: str) -> list[dict[str, Any]]:
    """Line items that fit the UCP type, told apart by ``name``."""
    return [{"item": {"id": name, "title": name}, "quantity": 1}]


class TestSimpleUCP:
    @pytest.fixture
    def state(self, simple_ucp: LangshawProtocol) -> SocialState:
        return SocialState(simple_ucp)

    def create(self, state: SocialState, cid: str = "c1") -> None:
        assert state.attempt([instance(state.protocol, "Create", cid=cid, **CREATE)]) is None

    def created(self, state: SocialState, cid: str = "c1") -> None:
        assert state.attempt([instance(state.protocol, "Created", cid=cid, **CREATED)]) is None

    def test_at_start_platform_may_only_create_in_a_new_scope(self, state: SocialState) -> None:
        enabled = state.enabled("Platform")
        assert names(enabled) == ["Create"]
        create = enabled[0]
        assert create.new_keys == ("cid",) and create.keys == {} and create.initiating
        assert create.to_bind == (
            "line_items",
            "currency",
            "buyer",
            "payment_pref",
            "discount_codes",
            "fulfillment_pref",
        )
        assert state.enabled("Business") == []

    def test_after_create_business_may_answer_and_platform_waits(self, state: SocialState) -> None:
        self.create(state)
        assert names(state.enabled("Business", {"cid": "c1"})) == ["Created", "Failed"]
        assert state.enabled("Platform", {"cid": "c1"}) == []
        # Platform may still open other checkouts.
        assert names(state.enabled("Platform")) == ["Create"]
        created = only(state.enabled("Business", ("c1",)), "Created")
        assert created.fixed == {"cid": "c1", "Create": True}
        assert created.to_bind == ("id", "totals", "payment", "discounts", "fulfillment")

    def test_after_created_failed_is_disabled_and_id_is_fixed(self, state: SocialState) -> None:
        self.create(state)
        self.created(state)
        assert names(state.enabled("Business", ("c1",))) == []
        violation = state.check(
            [instance(state.protocol, "Failed", cid="c1", Create=True, reason="x")]
        )
        assert violation is not None and violation.rule == "nono"
        enabled = state.enabled("Platform", ("c1",))
        assert names(enabled) == ["Cancel", "Complete"]
        complete = only(enabled, "Complete")
        assert complete.fixed == {"cid": "c1", "Created": True, "id": "chk_1"}
        assert complete.to_bind == ("payment_data", "risk_signals")
        assert only(enabled, "Cancel").to_bind == ()

    def test_business_can_never_bind_line_items(self, state: SocialState) -> None:
        create = instance(state.protocol, "Create", cid="c1", **CREATE)
        violation = state.check([create], roles={"Business"})
        assert violation == Violation(
            "role",
            "'Create' is performed by Platform, a role this agent does not play"
            " (it plays Business)",
            action="Create",
        )
        # Even if Business played the action's role, line_items is Platform's (sayso):
        # an action of Business carrying line_items could never bind it.
        protocol = LangshawProtocol.parse(
            "P\nwho Platform, Business\nwhat cid key, Echo\ndo\n"
            "  Business : Echo(cid, line_items)\nsayso\n  Platform : line_items\n"
        )
        echo = SocialState(protocol)
        violation = echo.check(
            [ActionInstance(protocol.action("Echo"), {"cid": "c", "line_items": []})]
        )
        assert violation is not None and violation.rule == "sayso"
        assert violation.attribute == "line_items"
        assert echo.enabled("Business") == []

    def test_rebinding_id_with_another_value_is_rejected(self, state: SocialState) -> None:
        self.create(state)
        self.created(state)
        complete = instance(
            state.protocol,
            "Complete",
            cid="c1",
            Created=True,
            id="chk_OTHER",
            payment_data=PAYMENT_DATA,
            risk_signals={},
        )
        violation = state.check([complete])
        assert violation is not None
        assert violation.rule == "bound" and violation.attribute == "id"
        assert "'id' is already bound to 'chk_1'" in violation.message

    @pytest.mark.parametrize("outcome", ["Completed", "Failed"])
    def test_completion_after_completed_or_failed(self, state: SocialState, outcome: str) -> None:
        protocol = state.protocol
        self.create(state)
        assert not state.is_complete(("c1",))
        if outcome == "Failed":
            completed = state.apply(
                [instance(protocol, "Failed", cid="c1", Create=True, reason="500")]
            )
        else:
            self.created(state)
            assert not state.is_complete(("c1",))
            state.attempt(
                [
                    instance(
                        protocol,
                        "Complete",
                        cid="c1",
                        Created=True,
                        id="chk_1",
                        payment_data=PAYMENT_DATA,
                        risk_signals={},
                    )
                ]
            )
            assert not state.is_complete(("c1",))
            completed = state.apply(
                [instance(protocol, "Completed", cid="c1", Complete=True, order={})]
            )
        assert completed == [("c1",)]
        assert state.is_complete(("c1",))

    def test_complete_and_cancel_exclude_each_other(self, state: SocialState) -> None:
        """nono Complete Cancel: of the two in one list, the second is refused."""
        self.create(state)
        self.created(state)
        both = [
            instance(
                state.protocol,
                "Complete",
                cid="c1",
                Created=True,
                id="chk_1",
                payment_data=PAYMENT_DATA,
                risk_signals={},
            ),
            instance(state.protocol, "Cancel", cid="c1", Created=True, id="chk_1"),
        ]
        assert state.check(both).rule == "nono"  # type: ignore[union-attr]
        assert state.check(both[::-1]).rule == "nono"  # type: ignore[union-attr]
        assert state.attempt(both[:1]) is None and state.attempt(both[1:]) is not None

    def test_every_rule_has_a_violation(self, state: SocialState) -> None:
        p = state.protocol
        self.create(state)

        def rule(*instances: ActionInstance, roles: set[str] | None = None) -> str | None:
            violation = state.check(list(instances), roles)
            return violation.rule if violation else None

        create = dict(cid="c1", **CREATE)
        ghost = ActionInstance(
            LangshawProtocol.parse(
                "G\nwho Platform\nwhat cid key, Ghost\ndo\n  Platform : Ghost(cid)\n"
            ).action("Ghost"),
            {"cid": "c1"},
        )
        assert rule(ghost) == "unknown-action"
        assert rule(instance(p, "Create", **{**create, "cid": "c2"}), roles={"Business"}) == "role"
        assert (
            rule(instance(p, "Create", **{**create, "cid": "c2", "extra": 1}))
            == "unknown-attribute"
        )
        missing = {k: v for k, v in create.items() if k != "currency"}
        assert rule(instance(p, "Create", **{**missing, "cid": "c2"})) == "missing-attribute"
        assert rule(instance(p, "Create", **{**create, "cid": None})) == "key"
        assert rule(instance(p, "Create", **{**create, "cid": True})) == "key"
        assert rule(instance(p, "Create", **{**create, "cid": 1.5})) == "key"
        assert rule(instance(p, "Create", **create)) == "duplicate"
        assert rule(instance(p, "Completed", cid="c1", Complete=True, order={})) == "dependency"
        assert rule(instance(p, "Created", cid="c1", **{**CREATED, "Create": 1})) == "dependency"
        self.created(state)
        assert rule(instance(p, "Failed", cid="c1", Create=True, reason="r")) == "nono"
        assert rule(instance(p, "Cancel", cid="c1", Created=True, id="other")) == "bound"

    def test_atomic_list_is_all_or_nothing(self, state: SocialState) -> None:
        p = state.protocol
        good = instance(p, "Create", cid="c1", **CREATE)
        bad = instance(p, "Created", cid="c9", **CREATED)  # no Create in c9
        violation = state.attempt([good, bad])
        assert violation is not None and violation.index == 1 and violation.rule == "dependency"
        assert len(state) == 0 and state.enactment(("c1",)) is None
        # Later instances are checked against the earlier ones of the same list.
        follow = instance(p, "Created", cid="c1", **CREATED)
        assert state.attempt([good, follow]) is None
        assert names(state.enabled("Platform", ("c1",))) == ["Cancel", "Complete"]

    def test_values_compare_as_json(self) -> None:
        p = LangshawProtocol.parse(
            "P\nwho A, B\nwhat id key, Done\ndo\n  A : Go(id, x)\n  B : Done(id, Go, x)\n"
            "sayso\n  A : x\n"
        )
        state = SocialState(p)
        assert state.attempt([instance(p, "Go", id="c1", x=1)]) is None
        assert state.check([instance(p, "Done", id="c1", Go=True, x=1.0)]) is None
        violation = state.check([instance(p, "Done", id="c1", Go=True, x=True)])
        assert violation is not None and violation.rule == "bound"

    def test_enabled_for_one_enactment_ignores_the_others(self, state: SocialState) -> None:
        """Cost must not grow with other enactments: they are never even looked at."""
        for i in range(1000):
            self.create(state, f"c{i}")

        class Untouchable(dict):
            def values(self):
                raise AssertionError("another enactment was scanned")

            items = values
            __iter__ = values

        for root in list(state.roots()):
            if root != ("c500",):
                enactment = state.enactment(root)
                assert enactment is not None
                enactment.scopes = Untouchable(enactment.scopes)
        assert names(state.enabled("Business", ("c500",))) == ["Created", "Failed"]
        assert state.check([instance(state.protocol, "Created", cid="c500", **CREATED)]) is None


class TestIncrementalUCP:
    @pytest.fixture
    def state(self, incremental_ucp: LangshawProtocol) -> SocialState:
        return self.created(incremental_ucp)

    @pytest.fixture
    def listing9(self) -> SocialState:
        """Listing 9 as the paper prints it: Complete and Cancel per version. The
        shipped protocol takes them out of the versions (a checkout is completed
        or cancelled once: tests/langshaw/test_domain_rules.py); the paper's
        still shows how keys scope nono, nogo and dependencies."""
        return self.created(paper("incremental-ucp.lsh"), buyer=None)

    def created(self, p: LangshawProtocol, **create: Any) -> SocialState:
        state = SocialState(p)
        assert (
            state.attempt(
                [
                    instance(
                        p,
                        "Create",
                        eid="e1",
                        line_items=items("1"),
                        currency="USD",
                        payment={},
                        **create,
                    ),
                    instance(
                        p,
                        "Created",
                        eid="e1",
                        Create=True,
                        id="chk",
                        payment_config={},
                        messages=[],
                    ),
                ]
            )
            is None
        )
        return state

    def update(self, state: SocialState, v: str, items: list) -> Violation | None:
        return state.attempt(
            [
                instance(
                    state.protocol,
                    "Update",
                    eid="e1",
                    v=v,
                    Created=True,
                    id="chk",
                    line_items=items,
                    currency="USD",
                )
            ]
        )

    def test_update_opens_a_new_version_with_id_inherited(self, state: SocialState) -> None:
        update = only(state.enabled("Platform", ("e1",)), "Update")
        assert update.keys == {"eid": "e1"} and update.new_keys == ("v",)
        assert update.fixed == {"eid": "e1", "Created": True, "id": "chk"}
        # line_items is bound in the root scope, but Platform re-binds it per version.
        assert update.to_bind == ("line_items", "currency")

    def test_two_updates_bind_different_line_items(self, state: SocialState) -> None:
        assert self.update(state, "v1", items("a")) is None
        assert self.update(state, "v2", items("b")) is None
        enactment = state.enactment(("e1",))
        assert enactment is not None
        assert enactment.bindings((("eid", "e1"), ("v", "v1")))["line_items"] == items("a")
        assert enactment.bindings((("eid", "e1"), ("v", "v2")))["line_items"] == items("b")
        assert enactment.bindings((("eid", "e1"),))["line_items"] == items("1")
        # Within one version the binding is fixed.
        violation = self.update(state, "v1", items("c"))
        assert violation is not None and violation.rule == "duplicate"
        updated = [e for e in state.enabled("Business", ("e1",)) if e.action.name == "Updated"]
        fixed = {e.keys["v"]: e.fixed["line_items"] for e in updated}
        assert fixed == {"v1": items("a"), "v2": items("b")}

    def test_cancel_blocks_complete_in_its_version_only(self, listing9: SocialState) -> None:
        state = listing9
        p = state.protocol
        self.update(state, "v1", items("a"))
        self.update(state, "v2", items("b"))
        assert (
            state.attempt([instance(p, "Cancel", eid="e1", v="v1", Created=True, id="chk")]) is None
        )

        def complete(v: str) -> ActionInstance:
            return instance(
                p,
                "Complete",
                eid="e1",
                v=v,
                Create=True,
                id="chk",
                payment_data=PAYMENT_DATA,
                risk_signals={},
            )

        violation = state.check([complete("v1")])
        assert violation is not None and violation.rule == "nogo"
        assert state.check([complete("v2")]) is None
        versions = {
            e.keys.get("v")
            for e in state.enabled("Platform", ("e1",))
            if e.action.name == "Complete"
        }
        assert versions == {None, "v2"}  # a new version, or v2; never v1
        # nogo is directional: Complete first does not block Cancel.
        assert state.attempt([complete("v2")]) is None
        assert (
            state.check([instance(p, "Cancel", eid="e1", v="v2", Created=True, id="chk")]) is None
        )

    def test_completion_through_a_correlated_completed(self, listing9: SocialState) -> None:
        state = listing9
        p = state.protocol
        state.attempt(
            [
                instance(
                    p,
                    "Complete",
                    eid="e1",
                    v="v7",
                    Create=True,
                    id="chk",
                    payment_data=PAYMENT_DATA,
                    risk_signals={},
                )
            ]
        )
        assert not state.is_complete({"eid": "e1"})
        shipped = instance(
            p,
            "Shipped",
            eid="e1",
            Completed=True,
            order_id="o1",
            tracking_number="1Z",
            tracking_url="u",
            carrier="UPS",
        )
        assert state.check([shipped]).rule == "dependency"  # type: ignore[union-attr]
        completed = state.apply(
            [
                instance(
                    p, "Completed", eid="e1", v="v7", Complete=True, order={"id": "o1"}, messages=[]
                )
            ]
        )
        assert completed == [("e1",)] and state.is_complete({"eid": "e1"})
        # Shipped, in the root scope, depends on Completed in a descendant scope.
        assert state.check([shipped]) is None

    def test_nono_applies_to_correlated_instances_only(self, listing9: SocialState) -> None:
        state = listing9
        p = state.protocol
        state.apply(
            [
                instance(
                    p,
                    "Complete",
                    eid="e1",
                    v="v1",
                    Create=True,
                    id="chk",
                    payment_data=PAYMENT_DATA,
                    risk_signals={},
                ),
                instance(p, "Completed", eid="e1", v="v1", Complete=True, order={}, messages=[]),
                instance(p, "Cancel", eid="e1", v="v2", Created=True, id="chk"),
            ]
        )
        # Cancelled in v2 is not correlated with Completed in v1.
        assert (
            state.check([instance(p, "Cancelled", eid="e1", v="v2", Cancel=True, messages=[])])
            is None
        )


class TestPurchase:
    @pytest.fixture
    def state(self, purchase: LangshawProtocol) -> SocialState:
        state = SocialState(purchase)
        p = purchase
        assert state.attempt([instance(p, "RFQ", ID="p1", item="pen", budget=10)]) is None
        return state

    def test_competing_sellers_quote_in_their_own_scopes(self, state: SocialState) -> None:
        p = state.protocol
        quote = only(state.enabled("Seller", ("p1",)), "Quote")
        assert quote.new_keys == ("qid",) and quote.fixed["item"] == "pen"
        for qid, price in (("q1", 5), ("q2", 4)):
            assert (
                state.attempt(
                    [instance(p, "Quote", ID="p1", qid=qid, RFQ=True, item="pen", price=price)]
                )
                is None
            )
        # The buyer accepts in the root scope, depending on quotes in descendant scopes.
        accept = only(state.enabled("Buyer", ("p1",)), "Accept")
        assert accept.to_bind == ("chosen", "price", "address")
        assert (
            state.attempt(
                [
                    instance(
                        p, "Accept", ID="p1", Quote=True, chosen="q2", price=4, address="1 Main St"
                    )
                ]
            )
            is None
        )
        assert "Reject" not in names(state.enabled("Buyer", ("p1",)))

    def test_priority_claims(self, state: SocialState) -> None:
        p = state.protocol
        state.apply(
            [
                instance(p, "Quote", ID="p1", qid="q1", RFQ=True, item="pen", price=5),
                instance(p, "Accept", ID="p1", Quote=True, chosen="q1", price=5, address="x"),
            ]
        )
        prefer = instance(p, "PreferDate", ID="p1", Accept=True, delivery_date="mon")
        ship = instance(
            p, "Ship", ID="p1", Accept=True, item="pen", address="x", delivery_date="tue"
        )
        scope = (("ID", "p1"),)
        assert state.claims(prefer) == [(scope, "delivery_date", 0)]
        assert state.claims(ship) == [(scope, "delivery_date", 1)]
        # Whoever binds first fixes the value for the other.
        assert state.attempt([ship]) is None
        assert state.check([prefer]).rule == "bound"  # type: ignore[union-attr]

    def test_cancel_and_ship_exclude_each_other(self, state: SocialState) -> None:
        p = state.protocol
        state.apply(
            [
                instance(p, "Quote", ID="p1", qid="q1", RFQ=True, item="pen", price=5),
                instance(p, "Accept", ID="p1", Quote=True, chosen="q1", price=5, address="x"),
            ]
        )
        ship = instance(p, "Ship", ID="p1", Accept=True, item="pen", address="x", delivery_date="d")
        cancel = instance(p, "Cancel", ID="p1", Accept=True, reason="changed my mind")
        assert state.check([cancel, ship]).rule == "nogo"  # type: ignore[union-attr]
        assert state.check([ship, cancel]).rule == "nogo"  # type: ignore[union-attr]


class TestNestedScopes:
    """Inheritance takes the nearest enclosing scope; equal-sized ones must agree."""

    @pytest.fixture
    def state(self) -> SocialState:
        from tests.conftest import FIXTURES

        protocol = LangshawProtocol.load(FIXTURES / "lsh" / "good" / "nested.lsh")
        state = SocialState(protocol)
        assert (
            state.attempt(
                [
                    instance(protocol, "Open", a="r", x="root"),
                    instance(protocol, "Refine", a="r", b="b1", Open=True, x="refined"),
                ]
            )
            is None
        )
        return state

    def uses(self, state: SocialState) -> dict[tuple, Any]:
        return {
            (e.keys.get("b"), e.keys.get("c")): e.fixed["x"]
            for e in state.enabled("B", ("r",))
            if e.action.name == "Use"
        }

    def test_nearest_scope_wins(self, state: SocialState) -> None:
        assert self.uses(state) == {(None, None): "root", ("b1", None): "refined"}

    def test_disagreeing_scopes_of_one_size_disable(self, state: SocialState) -> None:
        p = state.protocol
        assert state.attempt([instance(p, "Side", a="r", c="c1", Open=True, x="side")]) is None
        assert self.uses(state) == {
            (None, None): "root",
            ("b1", None): "refined",
            (None, "c1"): "side",
            # (b1, c1) has two nearest scopes, (r, b1) and (r, c1), that disagree.
        }
        use = instance(p, "Use", a="r", b="b1", c="c1", Open=True, x="refined", y=1)
        violation = state.check([use])
        assert violation is not None and violation.rule == "bound"
        assert "bound to different values in enclosing scopes" in violation.message


# Every rule one instance breaks --------------------------------------------------


def test_violations_lists_every_rule_one_instance_breaks() -> None:
    protocol = LangshawProtocol.parse(
        "P\nwho A, B\nwhat id key, X\ndo\n  A: X(id, x, y)\n  B: Y(id, x, y)\n"
        "sayso\n  A > B: x\n  A > B: y\nnono\n  X Y\n"
    )
    state = SocialState(protocol)
    state.apply([ActionInstance(protocol.action("X"), {"id": "r", "x": 1, "y": 2})])
    clash = ActionInstance(protocol.action("Y"), {"id": "r", "x": 3, "y": 4})
    found = state.violations(clash, {"B"})
    assert [(v.rule, v.attribute) for v in found] == [("nono", "X"), ("bound", "x"), ("bound", "y")]
    assert state.check([clash], {"B"}) == found[0]  # check stops at the first
    # A rule that is not a clash is the one answer, as check gives it.
    stranger = ActionInstance(protocol.action("Y"), {"id": "r", "x": 1, "y": 2, "z": 0})
    assert [v.rule for v in state.violations(stranger)] == ["unknown-attribute"]
    agreeing = ActionInstance(protocol.action("Y"), {"id": "s", "x": 1, "y": 2})
    assert state.violations(agreeing, {"B"}) == []
