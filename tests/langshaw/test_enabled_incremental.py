"""``SocialState.enabled`` kept up to date from what changed gives exactly the
answer of deciding every candidate scope again.

The reference below is the algorithm ``enabled`` used before its answers were
kept (every action of the role, every value each non-root key has in the
enactment and a fresh one, each candidate decided by the shared evaluation).
Seeded random walks over the shipped protocols and over random protocols with
one and two sub-keys apply enabled and arbitrary instances, check and attempt
lists (rolled back when refused), and apply with a journal and undo; after
every step each role's answer, in every enactment and overall, must equal the
reference in content and order. The threshold under which nothing is kept is
lowered to 0 for most walks, so that every enactment keeps its answers.
"""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any

import pytest

import langshaw._enabled_cache as enabled_cache
from langshaw import ABSENT, FRESH, ActionInstance, LangshawProtocol, SocialState
from langshaw._enablement import _evaluate
from langshaw.semantics import Enablement
from tests.conftest import FIXTURES, PROTOCOLS
from tests.langshaw.randproto import protocols

SEED = 20260111
SHIPPED = [
    LangshawProtocol.load(p)
    for p in sorted(
        [
            *PROTOCOLS.rglob("*.lsh"),
            *(FIXTURES / "lsh" / "good").glob("*.lsh"),
            *(FIXTURES / "lsh" / "typed").glob("*.lsh"),
        ]
    )
]
RANDOM = [p for p in protocols(SEED, 60) if len(p.keys) > 1]
KEY_VALUES: list[Any] = ["k1", "k2", "k3", 7]
VALUES: list[Any] = ["a", "b", 1, 1.0, True, None, [1], {"x": 1}]


def reference(state: SocialState, role: str, root: tuple[Any, ...]) -> list[Enablement]:
    """Every candidate scope decided from the state alone."""
    enactment = state.enactment(root)
    if enactment is None:
        return []
    c = state._c
    fixed = dict(zip(state.protocol.root_keys, root, strict=True))
    result = []
    for action in c.roles_actions.get(role, ()):
        keys = c.ordered_keys[action.name]
        choices = [[fixed[k]] if k in fixed else [*enactment.values_of(k), FRESH] for k in keys]
        for values in itertools.product(*choices):
            outcome = _evaluate(c, enactment, action, tuple(zip(keys, values, strict=True)))
            if isinstance(outcome, Enablement):
                result.append(outcome)
    return result


def shown(enablements: list[Enablement]) -> list[str]:
    """What the comparison sees: everything, ``repr`` telling 1, 1.0 and True apart."""
    return [
        repr((e.action.name, e.keys, e.new_keys, list(e.fixed.items()), e.to_bind))
        for e in enablements
    ]


def assert_agrees(state: SocialState) -> None:
    for role in state.protocol.roles:
        everywhere: list[Enablement] = []
        for root in state.roots():
            expected = reference(state, role, root)
            assert shown(state.enabled(role, root)) == shown(expected), (role, root)
            everywhere += expected
        everywhere += state.initiating(role)
        assert shown(state.enabled(role)) == shown(everywhere), role


def from_enablement(
    rng: random.Random, e: Enablement, protocol: LangshawProtocol
) -> ActionInstance:
    bindings = {k: v for k, v in e.fixed.items() if v is not ABSENT}
    for key in e.new_keys:
        bindings[key] = rng.choice(KEY_VALUES)
    for attr in e.to_bind:
        if attr in protocol.optional and rng.random() < 0.3:
            continue
        bindings[attr] = rng.choice(VALUES)
    return ActionInstance(e.action, bindings)


def arbitrary(rng: random.Random, protocol: LangshawProtocol) -> ActionInstance:
    action = rng.choice(list(protocol.actions.values()))
    bindings: dict[str, Any] = {}
    for attr in action.attributes:
        if attr in protocol.keys:
            bindings[attr] = rng.choice(KEY_VALUES)
        elif attr in protocol.actions:
            bindings[attr] = True
        else:
            bindings[attr] = rng.choice(VALUES)
    return ActionInstance(action, bindings)


def walk(protocol: LangshawProtocol, rng: random.Random, steps: int, fingerprints: bool) -> None:
    """Random steps, the answers compared after each."""
    state = SocialState(protocol, fingerprints=fingerprints)
    journals: list[list[Any]] = []
    for _ in range(steps):
        role = rng.choice(protocol.roles)
        enabled = state.enabled(role)
        if enabled and rng.random() < 0.75:
            instance = from_enablement(rng, rng.choice(enabled), protocol)
        else:
            instance = arbitrary(rng, protocol)
        move = rng.random()
        if move < 0.15 and journals:
            state.undo(journals.pop())
        elif move < 0.35 and state.violation(instance) is None:
            journal: list[Any] = []
            state.apply([instance], journal)
            journals.append(journal)
        elif move < 0.5:
            # Checked together with another: refused ones are rolled back.
            other = from_enablement(rng, rng.choice(enabled), protocol) if enabled else instance
            state.check([instance, other])
            if rng.random() < 0.5:
                state.attempt([instance, other])
        elif not journals:
            state.attempt([instance])
        assert_agrees(state)
    while journals:
        state.undo(journals.pop())
        assert_agrees(state)


@pytest.fixture
def keep_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(enabled_cache, "THRESHOLD", 0)


@pytest.mark.usefixtures("keep_all")
@pytest.mark.parametrize("protocol", SHIPPED, ids=lambda p: p.name)
def test_shipped_protocols_agree_with_the_reference(protocol: LangshawProtocol) -> None:
    rng = random.Random(f"{SEED}/{protocol.name}")
    for walk_number in range(6):
        walk(protocol, rng, 30, fingerprints=walk_number % 3 == 2)


@pytest.mark.usefixtures("keep_all")
def test_random_protocols_with_sub_keys_agree_with_the_reference() -> None:
    assert len(RANDOM) >= 30
    assert any(
        sum(k != "id" for k in action.keys) == 2 for p in RANDOM for action in p.actions.values()
    ), "some action must have two sub-keys"
    for number, protocol in enumerate(RANDOM):
        rng = random.Random(SEED + number)
        for _ in range(3):
            walk(protocol, rng, 25, fingerprints=False)


def test_the_default_threshold_agrees_with_the_reference() -> None:
    """Enactments grow past the threshold during a walk: afresh, then kept."""
    protocol = next(p for p in SHIPPED if p.name == "IncrementalUCP")
    rng = random.Random(SEED)
    for _ in range(3):
        walk(protocol, rng, 60, fingerprints=False)
    for number, protocol in enumerate(RANDOM[:10]):
        walk(protocol, random.Random(number), 40, fingerprints=False)


# IncrementalUCP with many versions -------------------------------------------------

ITEMS = [{"item": {"id": "sku"}, "quantity": 1}]


def versions(protocol: LangshawProtocol, count: int) -> SocialState:
    p = protocol
    state = SocialState(p)
    state.apply(
        [
            ActionInstance(
                p.action("Create"),
                dict(eid="e1", line_items=ITEMS, currency="USD", payment={}),
            ),
            ActionInstance(p.action("Created"), dict(eid="e1", Create=True, id="chk")),
        ]
    )
    for i in range(count):
        state.apply(
            [
                ActionInstance(
                    p.action("Update"),
                    dict(eid="e1", v=f"v{i}", Created=True, id="chk", line_items=ITEMS,
                         currency="USD"),
                ),
                ActionInstance(
                    p.action("Updated"),
                    dict(eid="e1", v=f"v{i}", Update=True, line_items=ITEMS, messages=[]),
                ),
            ]
        )
    return state


def set_buyer(protocol: LangshawProtocol, v: str) -> ActionInstance:
    return ActionInstance(
        protocol.action("SetBuyer"), dict(eid="e1", v=v, Created=True, id="chk", buyer={})
    )


def test_a_change_decides_only_the_candidates_it_touches(
    incremental_ucp: LangshawProtocol, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One instance in one version, or one new version, makes the next call
    decide a handful of candidates however many versions there are."""
    decided: list[str] = []
    real = enabled_cache._evaluate

    def counting(c: Any, enactment: Any, action: Any, candidate: Any) -> Any:
        decided.append(action.name)
        return real(c, enactment, action, candidate)

    monkeypatch.setattr(enabled_cache, "_evaluate", counting)
    counts = {}
    for count in (10, 300):
        state = versions(incremental_ucp, count)
        for role in ("Platform", "Business"):
            state.enabled(role, ("e1",))
            state.enabled(role, ("e1",))
        per_change = []
        for change in (
            set_buyer(incremental_ucp, "v3"),
            ActionInstance(
                incremental_ucp.action("Update"),
                dict(eid="e1", v="new", Created=True, id="chk", line_items=ITEMS,
                     currency="USD"),
            ),
        ):
            journal: list[Any] = []
            state.apply([change], journal)
            decided.clear()
            for role in ("Platform", "Business"):
                state.enabled(role, ("e1",))
            per_change.append(len(decided))
            state.undo(journal)
            decided.clear()
            for role in ("Platform", "Business"):
                state.enabled(role, ("e1",))
            per_change.append(len(decided))
        counts[count] = per_change
        assert_agrees(state)
    assert counts[10] == counts[300], counts
    assert max(counts[300]) <= 20, counts


def test_forks_and_replicas_go_their_own_way(incremental_ucp: LangshawProtocol) -> None:
    """A state deep-copied with its protocol and compiled tables shared (they
    hold validators, which cannot be copied), or a replica rebuilt from the
    same instances, keeps answers of its own: what happens to one is not seen
    by the other."""
    state = versions(incremental_ucp, 60)
    for role in incremental_ucp.roles:
        state.enabled(role, ("e1",))
        state.enabled(role, ("e1",))
    fork = copy.deepcopy(state, {id(incremental_ucp): incremental_ucp, id(state._c): state._c})
    replica = versions(incremental_ucp, 60)
    replica.enabled("Platform", ("e1",))
    state.apply([set_buyer(incremental_ucp, "v1")])
    fork.apply([set_buyer(incremental_ucp, "v2")])
    replica.apply([set_buyer(incremental_ucp, "v3")])
    answers = set()
    for each in (state, fork, replica):
        assert_agrees(each)
        answers.add(tuple(shown(each.enabled("Platform", ("e1",)))))
    assert len(answers) == 3


def test_a_view_left_unasked_does_not_pile_up_events(
    incremental_ucp: LangshawProtocol, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values that come and go while a role does not ask (checks opening a new
    version and rolling it back) drop its view past a bound; the next answer
    is still right, and keeps being kept."""
    monkeypatch.setattr(enabled_cache, "EVENTS", 6)
    state = versions(incremental_ucp, 30)
    state.enabled("Business", ("e1",))
    state.enabled("Business", ("e1",))
    enactment = state.enactment(("e1",))
    assert enactment is not None and "Business" in enactment.watch.views
    for i in range(4):
        update = ActionInstance(
            incremental_ucp.action("Update"),
            dict(eid="e1", v=f"new{i}", Created=True, id="chk", line_items=ITEMS, currency="USD"),
        )
        assert state.check([update]) is None
    assert "Business" not in enactment.watch.views
    assert_agrees(state)
    assert "Business" in enactment.watch.views
