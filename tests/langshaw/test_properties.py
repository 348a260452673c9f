"""Property tests: random attempts on every shipped protocol.

The oracle below re-states the rules of docs/semantics.md directly over the flat
history of accepted instances, with no index, so it is an independent check of
langshaw.semantics. For every attempt:

* the semantics accepts it exactly when the oracle finds it legal (so no accepted
  instance ever violates a rule, and no legal one is refused);
* it is accepted exactly when it matches an action the role has enabled (so the
  enabled set is the set of acceptable attempts);
* completion agrees with the oracle.

Attribute types are the one place the oracle defers to the library: whether a
value fits a JSON Schema is jsonschema-rs's question (``AttributeType.problem``);
where and when a value is checked (only where it is bound fresh) and what an
absent optional attribute means are the oracle's own.
"""


from __future__ import annotations

from functools import cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langshaw import ABSENT, ActionInstance, LangshawProtocol, SocialState, json_equal
from langshaw.semantics import Enablement
from tests.conftest import FIXTURES, PROTOCOLS

SHIPPED = {
    p.name: LangshawProtocol.load(p)
    for p in sorted(
        [
            *PROTOCOLS.glob("*.lsh"),
            *(FIXTURES / "lsh" / "good").glob("*.lsh"),
            *(FIXTURES / "lsh" / "typed").glob("*.lsh"),
        ]
    )
}
KEY_VALUES = ["k1", "k2", "k3", 7]
VALUES: list[Any] = ["a", "b", 1, 1.0, True, None, [1], {"x": 1}, {"x": True}]
# Values of each simple type (two of each, so that conflicts can be made).
FITTING: dict[str, list[Any]] = {
    "string": ["a", "b"],
    "integer": [1, 2],
    "number": [1, 2.5],
    "boolean": [True, False],
    "object": [{"x": 1}, {"x": True}],
    "array": [[1], [2]],
}


@cache
def pool(protocol: LangshawProtocol, attr: str) -> list[Any]:
    """Values to try for ``attr``: for a typed attribute mostly values that fit
    (a simple type's, or its schema's ``examples``), and the untyped pool too, so
    type violations come up as well."""
    kind = protocol.types.get(attr)
    if kind is None or kind.type is None:
        return VALUES
    good = FITTING.get(kind.type) or list(kind.json_schema().get("examples", []))
    return good * 4 + VALUES if good else VALUES


@cache
def good(protocol: LangshawProtocol, attr: str) -> list[Any]:
    """Values that fit ``attr``'s type (every value of the pool if it has none)."""
    fitting = [v for v in pool(protocol, attr) if fits(protocol, attr, v)]
    return list({repr(v): v for v in fitting}.values()) or VALUES


def fits(protocol: LangshawProtocol, attr: str, value: Any) -> bool:
    kind = protocol.types.get(attr)
    return kind is None or kind.problem(value) is None


# The oracle ------------------------------------------------------------------------


def _scope(inst: ActionInstance) -> dict[str, Any]:
    return {k: inst.bindings[k] for k in inst.action.keys}


def _agree(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(b[k] == v for k, v in a.items() if k in b)


def _correlated(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return bool(set(a) & set(b)) and _agree(a, b)


def oracle_legal(
    protocol: LangshawProtocol, history: list[ActionInstance], inst: ActionInstance
) -> bool:
    action = protocol.actions.get(inst.action.name)
    if action is None or not (
        set(action.attributes) - protocol.optional <= set(inst.bindings) <= set(action.attributes)
    ):
        return False
    if any(type(inst.bindings[k]) not in (str, int) for k in action.keys):
        return False
    if not all(fits(protocol, k, inst.bindings[k]) for k in action.keys):
        return False
    mine = _scope(inst)
    if any(h.action.name == action.name and _scope(h) == mine for h in history):
        return False
    for dep in action.dependencies:
        if inst.bindings[dep] is not True:
            return False
        if not any(
            h.action.name == dep
            and _agree(_scope(h), mine)
            and (set(_scope(h)) <= set(mine) or set(mine) <= set(_scope(h)))
            for h in history
        ):
            return False
    excluded = {o for g in protocol.nono if action.name in g for o in g if o != action.name}
    excluded |= {before for before, after in protocol.nogo if after == action.name}
    if any(h.action.name in excluded and _correlated(_scope(h), mine) for h in history):
        return False
    for attr in action.attributes:
        if attr in protocol.keys or attr in protocol.actions:
            continue
        # An instance that leaves an optional attribute absent decides it as ABSENT.
        given = inst.bindings.get(attr, ABSENT)
        here = [
            h.bindings.get(attr, ABSENT)
            for h in history
            if _scope(h) == mine and attr in h.action.attributes
        ]
        if here:
            if not json_equal(here[0], given):
                return False
            continue
        if action.actor in protocol.sayso.get(attr, ()):
            if given is not ABSENT and not fits(protocol, attr, given):
                return False
            continue
        ancestors = [
            (len(_scope(h)), h.bindings.get(attr, ABSENT))
            for h in history
            if attr in h.action.attributes
            and set(_scope(h)) < set(mine)
            and _agree(_scope(h), mine)
        ]
        if not ancestors:
            return False
        nearest = max(size for size, _ in ancestors)
        values = [v for size, v in ancestors if size == nearest]
        if not all(json_equal(values[0], v) for v in values):
            return False
        if not json_equal(values[0], given):
            return False
    return True


def oracle_complete(protocol: LangshawProtocol, history: list[ActionInstance], root: tuple) -> bool:
    mine = [h for h in history if tuple(h.bindings[k] for k in protocol.root_keys) == root]
    return all(
        any(h.action.name == n or n in h.bindings for h in mine for n in clause)
        for clause in protocol.completion
    )


def matches(state: SocialState, enablement: Enablement, inst: ActionInstance) -> bool:
    """Does ``inst`` perform ``enablement`` (binding its to_bind attributes freely)?"""
    if enablement.action.name != inst.action.name:
        return False
    protocol = state.protocol
    absent = {k for k, v in enablement.fixed.items() if v is ABSENT}
    optional = absent | (set(enablement.to_bind) & protocol.optional)
    attributes = set(enablement.action.attributes)
    if not attributes - optional <= set(inst.bindings) <= attributes - absent:
        return False
    if any(
        not json_equal(inst.bindings[k], v) for k, v in enablement.fixed.items() if k not in absent
    ):
        return False
    if any(type(inst.bindings[k]) not in (str, int) for k in enablement.action.keys):
        return False
    if not all(
        fits(protocol, a, inst.bindings[a])
        for a in (*enablement.to_bind, *enablement.action.keys)
        if a in inst.bindings
    ):
        return False
    if enablement.new_keys:
        # Values for the new keys must really be fresh: used by no scope of the
        # enactment (any used value is offered as an enablement of its own).
        root = state.root_of(inst.bindings)
        enactment = state.enactment(root)
        if enablement.initiating:
            return enactment is None
        assert enactment is not None
        for scope in enactment.scopes:
            values = dict(scope)
            if any(k in values and values[k] == inst.bindings[k] for k in enablement.new_keys):
                return False
    return True


# Generation ------------------------------------------------------------------------


def _from_enablement(
    data: st.DataObject, enablement: Enablement, protocol: LangshawProtocol
) -> ActionInstance:
    bindings = {k: v for k, v in enablement.fixed.items() if v is not ABSENT}
    for key in enablement.new_keys:
        bindings[key] = data.draw(st.sampled_from(KEY_VALUES))
    for attr in enablement.to_bind:
        if attr in protocol.optional and data.draw(st.integers(0, 2)) == 0:
            continue  # left absent
        bindings[attr] = data.draw(st.sampled_from(pool(protocol, attr)))
    return ActionInstance(enablement.action, bindings)


def _arbitrary(
    data: st.DataObject, protocol: LangshawProtocol, history: list[ActionInstance]
) -> ActionInstance:
    action = data.draw(st.sampled_from(list(protocol.actions.values())))
    bindings: dict[str, Any] = {}
    known = [h.bindings for h in history]
    for attr in action.attributes:
        if attr in protocol.keys:
            bindings[attr] = data.draw(st.sampled_from(KEY_VALUES))
        elif attr in protocol.actions:
            bindings[attr] = data.draw(st.sampled_from([True, True, 1]))
        else:
            seen = [b[attr] for b in known if attr in b]
            bindings[attr] = data.draw(st.sampled_from(seen + pool(protocol, attr)[:6]))
    mutation = data.draw(st.sampled_from(["none", "none", "none", "drop", "extra", "badkey"]))
    if mutation == "drop":
        bindings.pop(data.draw(st.sampled_from(list(bindings))))
    elif mutation == "extra":
        bindings["not_an_attribute"] = 1
    elif mutation == "badkey":
        bindings[action.keys[0]] = data.draw(st.sampled_from([None, True, 1.5, ["k1"]]))
    return ActionInstance(action, bindings)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data(), name=st.sampled_from(sorted(SHIPPED)))
def test_random_attempts_agree_with_the_oracle_and_the_enabled_set(
    data: st.DataObject, name: str
) -> None:
    protocol = SHIPPED[name]
    state = SocialState(protocol)
    history: list[ActionInstance] = []
    for _ in range(data.draw(st.integers(5, 25))):
        role = data.draw(st.sampled_from(protocol.roles))
        enabled = state.enabled(role)
        if enabled and data.draw(st.booleans()):
            inst = _from_enablement(data, data.draw(st.sampled_from(enabled)), protocol)
        else:
            inst = _arbitrary(data, protocol, history)
        performer_roles = {role} if data.draw(st.integers(0, 4)) == 0 else {inst.action.actor}
        violation = state.check([inst], performer_roles)
        legal = inst.action.actor in performer_roles and oracle_legal(protocol, history, inst)
        assert (violation is None) == legal, (inst, violation, history)
        if inst.action.actor in performer_roles and "not_an_attribute" not in inst.bindings:
            in_enabled = any(matches(state, e, inst) for e in state.enabled(inst.action.actor))
            attributes = set(inst.action.attributes)
            if attributes - protocol.optional <= set(inst.bindings) <= attributes:
                assert in_enabled == (violation is None), (inst, violation, history)
        # Every enablement really is acceptable.
        for enablement in enabled:
            candidate = _from_enablement(data, enablement, protocol)
            if matches(state, enablement, candidate):
                assert state.check([candidate], {role}) is None, (enablement, history)
        if violation is None:
            assert state.attempt([inst], performer_roles) is None
            history.append(inst)
        for root in {tuple(h.bindings[k] for k in protocol.root_keys) for h in history}:
            assert state.is_complete(root) == oracle_complete(protocol, history, root)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(SHIPPED)))
def test_apply_and_rollback_leave_identical_states(data: st.DataObject, name: str) -> None:
    """A rejected atomic list leaves the state exactly as it was."""
    protocol = SHIPPED[name]
    state = SocialState(protocol)
    for _ in range(data.draw(st.integers(3, 12))):
        role = data.draw(st.sampled_from(protocol.roles))
        enabled = state.enabled(role)
        if not enabled:
            continue
        batch = [
            _from_enablement(data, data.draw(st.sampled_from(enabled)), protocol)
            for _ in range(3)
        ]
        before = {
            r: {s: dict(sc.bindings) for s, sc in state.enactment(r).scopes.items()}  # type: ignore[union-attr]
            for r in state.roots()
        }
        violation = state.attempt(batch, {role})
        if violation is not None:
            after = {
                r: {s: dict(sc.bindings) for s, sc in state.enactment(r).scopes.items()}  # type: ignore[union-attr]
                for r in state.roots()
            }
            assert after == before


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(SHIPPED)))
def test_fingerprint_mode_decides_exactly_like_values_mode(data: st.DataObject, name: str) -> None:
    """The SyncServer keeps digests of values; it must reach the same verdicts."""
    protocol = SHIPPED[name]
    values, digests = SocialState(protocol), SocialState(protocol, fingerprints=True)
    history: list[ActionInstance] = []
    for _ in range(data.draw(st.integers(5, 25))):
        role = data.draw(st.sampled_from(protocol.roles))
        enabled = values.enabled(role)
        if enabled and data.draw(st.booleans()):
            inst = _from_enablement(data, data.draw(st.sampled_from(enabled)), protocol)
        else:
            inst = _arbitrary(data, protocol, history)
        roles = {inst.action.actor}
        expected, got = values.check([inst], roles), digests.check([inst], roles)
        assert (expected and expected.rule) == (got and got.rule), (inst, expected, got)
        assert sorted(repr(e.ident) for e in values.enabled(role)) == sorted(
            repr(e.ident) for e in digests.enabled(role)
        )
        if expected is None:
            values.attempt([inst], roles)
            digests.attempt([inst], roles)
            history.append(inst)
