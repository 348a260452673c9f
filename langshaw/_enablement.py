"""The one evaluation behind both questions: is this action enabled, is this
attempt legal. Sharing it is what makes the enabled set exactly the set of
attempts that would be accepted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langshaw._compiled import (
    _AMBIGUOUS,
    _MISSING,
    Enactment,
    _agrees,
    _Compiled,
    _occurred_in,
    _Scope,
)
from langshaw.instances import FRESH, Enablement, ScopeKey, Violation
from langshaw.model import Action
from langshaw.values import JSON, json_equal


def _show(value: JSON) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _initiating(compiled: _Compiled, role: str) -> tuple[Enablement, ...]:
    """Initiating actions depend only on the protocol, so they are computed once."""
    cache_ = compiled.initiating
    if role not in cache_:
        found = []
        for action in compiled.roles_actions.get(role, ()):
            candidate = tuple((k, FRESH) for k in compiled.ordered_keys[action.name])
            outcome = _evaluate(compiled, None, action, candidate)
            if isinstance(outcome, Enablement):
                found.append(outcome)
        cache_[role] = tuple(found)
    return cache_[role]


def _evaluate(
    c: _Compiled, enactment: Enactment | None, action: Action, candidate: ScopeKey
) -> Enablement | Violation:
    """Is ``action`` enabled in the ``candidate`` scope, and how? What
    ``enabled`` lists, and what the verifier asks of one scope."""
    scope, refused = _gate(c, enactment, action, candidate)
    if refused is not None:
        return refused
    found = _bindings(c, enactment, action, candidate, scope)
    if isinstance(found, Violation):
        return found
    fixed, to_bind = found
    keys: dict[str, Any] = {}
    new_keys: list[str] = []
    for k, v in candidate:
        if v is FRESH:
            new_keys.append(k)
        else:
            keys[k] = v
    return Enablement(action, keys, tuple(new_keys), {**keys, **fixed}, tuple(to_bind))


def _required(
    c: _Compiled, enactment: Enactment | None, action: Action, candidate: ScopeKey
) -> dict[str, Any] | Violation:
    """What an instance in ``candidate`` must carry, or why it may not occur:
    the same decision as :func:`_evaluate`, reduced to what a check compares
    (keys need no comparing: they made the scope)."""
    scope, refused = _gate(c, enactment, action, candidate)
    if refused is not None:
        return refused
    found = _bindings(c, enactment, action, candidate, scope)
    return found if isinstance(found, Violation) else found[0]


def _gate(
    c: _Compiled, enactment: Enactment | None, action: Action, candidate: ScopeKey
) -> tuple[_Scope | None, Violation | None]:
    """The rules about occurrences: not a duplicate, every dependency met, no
    excluding action occurred. Returns the scope (if anything happened there)
    and the violation."""
    name = action.name
    scopes: dict[ScopeKey, _Scope] = enactment.scopes if enactment is not None else {}
    scope = scopes.get(candidate)
    if scope is not None and name in scope.bindings:
        duplicate = c.refusals.get(("duplicate", name, ""))
        if duplicate is None:
            duplicate = c.refusals["duplicate", name, ""] = Violation(
                "duplicate", f"'{name}' has already occurred in this scope", action=name
            )
        return scope, duplicate
    values: dict[str, Any] | None = None

    for dependency, relation, their_keys, at in c.dependencies[name]:
        if relation == "same-or-up":
            # The same scope or an ancestor: exactly one scope can hold it.
            there = scopes.get(candidate if at is None else tuple([candidate[i] for i in at]))
            met = there is not None and dependency in there.bindings
        elif relation == "down":
            if values is None:
                values = dict(candidate)
            met = any(
                _occurred_in(s, dependency, their_keys) and _agrees(s.key, values)
                for s in scopes.values()
            )
        else:
            met = False
        if not met:
            unmet = c.refusals.get(("dependency", name, dependency))
            if unmet is None:
                unmet = c.refusals["dependency", name, dependency] = Violation(
                    "dependency",
                    f"'{name}' needs '{dependency}' to have occurred first in this enactment",
                    action=name,
                    attribute=dependency,
                )
            return scope, unmet
    if scopes and c.exclusions[name]:
        hit = next(_excluded(c, scopes, name, candidate), None)
        if hit is not None:
            return scope, hit
    return scope, None


def _bindings(
    c: _Compiled,
    enactment: Enactment | None,
    action: Action,
    candidate: ScopeKey,
    scope: _Scope | None,
) -> tuple[dict[str, Any], list[str]] | Violation:
    """By the binding rules alone: what the instance must carry (its
    dependencies, and each attribute bound in its scope or inherited) and what
    its performer binds now; a Violation where no value is available (rule
    ``sayso``) or the enclosing scopes disagree (the first such attribute)."""
    fixed: dict[str, Any] = {}
    for dependency in action.dependencies:
        fixed[dependency] = True
    to_bind: list[str] = []
    for attribute, value in _each_binding(c, enactment, action, candidate, scope):
        if value is _FREE:
            to_bind.append(attribute)
        elif type(value) is Violation:
            return value
        else:
            fixed[attribute] = value
    return fixed, to_bind


_FREE: Any = object()  # the performer binds it now


def _each_binding(
    c: _Compiled,
    enactment: Enactment | None,
    action: Action,
    candidate: ScopeKey,
    scope: _Scope | None,
) -> Iterator[tuple[str, Any]]:
    """Each data attribute with the value the instance must carry, ``_FREE``
    where its performer binds it now, or the Violation that leaves it without
    one (all of them: ``SocialState.violations`` reports every attribute)."""
    name = action.name
    bound = scope.bindings if scope is not None else None
    for attribute, may_bind in c.data[name]:
        if bound is not None and attribute in bound:
            yield attribute, bound[attribute]
        elif may_bind:
            yield attribute, _FREE
        else:
            inherited = _inherited(c, enactment, action, candidate, attribute)
            if inherited is _MISSING:
                refusal = c.refusals.get(("sayso", name, attribute))
                if refusal is None:
                    owners = " > ".join(c.protocol.sayso.get(attribute, ())) or "nobody"
                    refusal = c.refusals["sayso", name, attribute] = Violation(
                        "sayso",
                        f"{action.actor} may not bind '{attribute}' (sayso gives it to "
                        f"{owners}) and it is not bound yet, so '{name}' is not enabled",
                        action=name,
                        attribute=attribute,
                    )
                yield attribute, refusal
            elif inherited is _AMBIGUOUS:
                yield attribute, Violation(
                    "bound",
                    f"'{attribute}' is bound to different values in enclosing scopes",
                    action=name,
                    attribute=attribute,
                )
            else:
                yield attribute, inherited


def _excluded(
    c: _Compiled, scopes: dict[ScopeKey, _Scope], name: str, candidate: ScopeKey
) -> Iterator[Violation]:
    """Every nono or nogo partner of ``name`` that occurred in a correlated
    instance: the first decides enablement; all of them are what one
    concurrent instance breaks (``SocialState.violations``)."""
    values: dict[str, Any] | None = None
    for other, rule, relation, their_keys, at in c.exclusions[name]:
        if relation == "same-or-up":
            there = scopes.get(candidate if at is None else tuple([candidate[i] for i in at]))
            hit = there is not None and other in there.bindings
        else:
            if values is None:
                values = dict(candidate)
            hit = any(
                _occurred_in(s, other, their_keys) and _agrees(s.key, values)
                for s in scopes.values()
            )
        if hit:
            refusal = c.refusals.get((rule, name, other))
            if refusal is None:
                if rule == "nono":
                    message = (
                        f"'{name}' and '{other}' exclude each other (nono), and '{other}' "
                        "occurred"
                    )
                else:
                    message = f"'{other}' occurred, and '{other} -/> {name}' (nogo)"
                refusal = c.refusals[rule, name, other] = Violation(
                    rule, message, action=name, attribute=other
                )
            yield refusal


def _inherited(
    c: _Compiled,
    enactment: Enactment | None,
    action: Action,
    candidate: ScopeKey,
    attribute: str,
) -> Any:
    """The value of ``attribute`` in the nearest ancestor scope that binds it."""
    if enactment is None:
        return _MISSING
    found: list[Any] = []
    size = -1
    for keys in c.ancestor_at[action.name]:
        if found and len(keys) < size:
            break
        scope = enactment.scopes.get(tuple([candidate[i] for i in keys]))
        if scope is not None and attribute in scope.bindings:
            found.append(scope.bindings[attribute])
            size = len(keys)
    if not found:
        return _MISSING
    first = found[0]
    if all(json_equal(first, other) for other in found[1:]):
        return first
    return _AMBIGUOUS
