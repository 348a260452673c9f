"""Enactment semantics: what a role may do now, and whether an attempt is legal.

This module, with the evaluation it shares with enablement
(``langshaw._enablement``, over the tables of ``langshaw._compiled``), is the
only place the protocol rules live. Adapters compute their enabled actions with
it and the SyncServer checks attempts with it, so the two can never disagree.
It is pure: no I/O, no clock, no randomness; the state changes only through
:meth:`SocialState.apply` and :meth:`SocialState.attempt`.

The rules (``docs/semantics.md`` explains them with examples):

* An instance binds every attribute of its action; its *scope* is its key values.
  Two instances are *correlated* when they agree on every key they share and
  share at least one. A *root enactment* is one assignment of the root keys (the
  keys every action carries), so correlated instances always share a root.
* An action occurs at most once per scope. An attribute naming another action is
  a dependency on it, met by a correlated occurrence in the same scope, an
  ancestor scope (a subset of the keys) or a descendant one (a superset).
* For each other attribute ``p`` of ``A`` performed by ``R`` in scope ``S``: if ``p``
  is bound in ``S`` the instance must carry that value; otherwise, if ``R`` is in
  ``p``'s sayso chain, ``R`` binds it now; otherwise it is inherited from the
  nearest ancestor scope that binds it; otherwise ``A`` is not enabled.
* ``A`` is disabled in ``S`` when a nono partner, or an ``X`` with ``X -/> A``, has
  occurred in a correlated instance.
* A root enactment is complete when every completion clause names an action that
  occurred in it or an attribute bound in it.
* A typed attribute's value must fit its type (rule ``type``), checked where it
  is bound fresh; a value equal to an earlier binding fitted when that was bound.
  An optional attribute may be left absent where it would be bound fresh;
  absence is then recorded (``ABSENT``) and holds like a binding: later
  instances in that scope, and the scopes inheriting from it, leave it absent
  too. An absent attribute does not satisfy a completion clause.

Checking and enabling share one evaluation (``_gate`` and ``_bindings`` behind
``_evaluate`` and ``_required``), so the enabled set is
exactly the set of attempts that would be accepted.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from langshaw._compiled import _BOUND, Enactment, _compile, _Scope
from langshaw._enabled_cache import enabled_in
from langshaw._enablement import (
    _FREE,
    _each_binding,
    _evaluate,
    _excluded,
    _initiating,
    _required,
    _show,
)
from langshaw.fingerprint import canonical, fingerprint
from langshaw.instances import (
    ABSENT,
    FRESH,
    RULES,
    ActionInstance,
    Enablement,
    ScopeKey,
    Violation,
)
from langshaw.model import Action, AttributeType, LangshawProtocol
from langshaw.values import JSON, json_equal, valid_key_value

__all__ = [
    "ABSENT",
    "FRESH",
    "RULES",
    "ActionInstance",
    "Enablement",
    "Enactment",
    "ScopeKey",
    "SocialState",
    "Violation",
    "canonical",
    "fingerprint",
]


class SocialState:
    """The social state of one protocol: every root enactment, indexed by scope.

    Lookups go through the enactment's root keys, so the cost of deciding about
    one enactment does not grow with the number of other enactments.

    With ``fingerprints=True`` bound values (other than keys, null and booleans)
    are kept as 64-bit digests of their canonical JSON: enough to decide every
    rule, in constant memory per binding whatever the size of the value. The
    SyncServer uses this; the fixed values its ``enabled`` reports are then
    digests, not values.
    """

    def __init__(self, protocol: LangshawProtocol, *, fingerprints: bool = False) -> None:
        self.protocol = protocol
        self.fingerprints = fingerprints
        self._c = _compile(protocol)
        self._root_keys = frozenset(protocol.root_keys)
        self._enactments: dict[tuple[Any, ...], Enactment] = {}

    # Reading ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._enactments)

    def roots(self) -> Iterator[tuple[Any, ...]]:
        """Every root enactment's root-key values, in order of creation."""
        return iter(self._enactments)

    def root_of(self, bindings: Mapping[str, Any]) -> tuple[Any, ...]:
        """The root enactment an instance (or a dict of key values) belongs to."""
        return tuple(bindings[k] for k in self.protocol.root_keys)

    def enactment(self, root: tuple[Any, ...] | Mapping[str, Any]) -> Enactment | None:
        return self._enactments.get(self._root(root))

    def is_complete(self, root: tuple[Any, ...] | Mapping[str, Any]) -> bool:
        enactment = self._enactments.get(self._root(root))
        return bool(enactment and enactment.complete)

    def _root(self, root: tuple[Any, ...] | Mapping[str, Any]) -> tuple[Any, ...]:
        if isinstance(root, Mapping):
            return self.root_of(root)
        return tuple(root)

    def scope_of(self, action: Action, bindings: Mapping[str, Any]) -> ScopeKey:
        return tuple((k, bindings[k]) for k in self._c.ordered_keys[action.name])

    # Enabled actions ----------------------------------------------------------------

    def enabled(
        self, role: str, root: tuple[Any, ...] | Mapping[str, Any] | None = None
    ) -> list[Enablement]:
        """What ``role`` may do now.

        With ``root``: in that root enactment only (its existing scopes and the new
        sub-scopes it may open). Without: in every enactment, plus the initiating
        actions that open a new one.
        """
        if root is not None:
            enactment = self._enactments.get(self._root(root))
            return self._enabled_in(role, enactment) if enactment else []
        result: list[Enablement] = []
        for enactment in self._enactments.values():
            result.extend(self._enabled_in(role, enactment))
        result.extend(self.initiating(role))
        return result

    def initiating(self, role: str) -> list[Enablement]:
        """The actions ``role`` may perform to open a new root enactment."""
        return list(_initiating(self._c, role))

    def _enabled_in(self, role: str, enactment: Enactment) -> list[Enablement]:
        # Kept up to date from what changed (langshaw._enabled_cache): deciding
        # every candidate scope again would cost as much as the history is long.
        return enabled_in(self._c, enactment, role)

    # Checking and applying ----------------------------------------------------------

    def check(
        self, instances: Sequence[ActionInstance], roles: Collection[str] | None = None
    ) -> Violation | None:
        """Would this atomic list be accepted? Each instance is checked against the
        state plus the earlier instances of the list; the state is left unchanged."""
        undo: list[tuple[Any, ...]] = []
        try:
            return self._attempt(instances, roles, undo)
        finally:
            self._rollback(undo)

    def attempt(
        self, instances: Sequence[ActionInstance], roles: Collection[str] | None = None
    ) -> Violation | None:
        """Check the atomic list and, if every instance is legal, apply all of it.

        Returns the first violation (and applies nothing) or None (all applied).
        ``roles``, when given, are the roles the performer plays; performing an
        action of another role is a ``role`` violation.
        """
        undo: list[tuple[Any, ...]] = []
        violation = self._attempt(instances, roles, undo)
        if violation is not None:
            self._rollback(undo)
        return violation

    def apply(
        self, instances: Iterable[ActionInstance], journal: list[Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Record finalized instances without checking them (they were checked when
        finalized). Returns the roots of enactments that became complete.

        With ``journal`` (a list), what changed is noted in it so that
        :meth:`undo` can take it back: how the verifier walks the enactments of a
        protocol without copying states."""
        completed = []
        for instance in instances:
            root = self._apply_one(instance, journal)
            if root is not None:
                completed.append(root)
        return completed

    def undo(self, journal: list[Any]) -> None:
        """Take back what :meth:`apply` noted in ``journal`` (and empty it)."""
        self._rollback(journal)

    def evaluate(self, action: str, keys: Mapping[str, Any]) -> Enablement | Violation:
        """Is ``action`` enabled in the one scope ``keys`` names (a value for each of
        its keys, FRESH for a new one), and if not, which rule says so?

        The question :meth:`enabled` asks of every candidate scope, asked of one:
        the verifier uses the rule to learn what could enable the action later."""
        act = self.protocol.actions[action]
        candidate = tuple([(k, keys[k]) for k in self._c.ordered_keys[action]])
        root = tuple([keys[k] for k in self.protocol.root_keys])
        outcome: Enablement | Violation = _evaluate(
            self._c, self._enactments.get(root), act, candidate
        )
        return outcome

    def violation(
        self, instance: ActionInstance, roles: Collection[str] | None = None
    ) -> Violation | None:
        """The violation one instance would commit in the current state, if any."""
        return self.check([instance], roles)

    def violations(
        self, instance: ActionInstance, roles: Collection[str] | None = None
    ) -> list[Violation]:
        """Every rule one instance breaks in the current state, not just the first.

        Where the instance meets its dependencies but clashes with what occurred
        (an excluding action, a different binding), each nono or nogo partner
        that occurred and each attribute that differs is its own violation;
        otherwise this is :meth:`check`'s one answer. The verifier asks it of a
        step taken on partial knowledge, which can break several rules at once."""
        first = self.check([instance], roles)
        if first is None:
            return []
        if first.rule not in ("nono", "nogo", "bound"):
            return [first]
        action = self.protocol.actions[instance.name]
        bindings = instance.bindings
        key = self.scope_of(action, bindings)
        enactment = self._enactments.get(self.root_of(bindings))
        scopes = enactment.scopes if enactment is not None else {}
        found = list(_excluded(self._c, scopes, action.name, key))
        fixed: dict[str, Any] = dict.fromkeys(action.dependencies, True)
        for attribute, value in _each_binding(self._c, enactment, action, key, scopes.get(key)):
            if type(value) is Violation:
                found.append(value)  # enclosing scopes disagree
            elif value is not _FREE:
                fixed[attribute] = value
        found.extend(self._mismatches(action.name, fixed, bindings))
        return found

    def type_violation(self, action: str, attribute: str, value: JSON) -> Violation | None:
        """Would ``value`` fit ``attribute`` where ``action`` binds it? The check an
        attempt makes, for an agent to make before it attempts (``bind()``)."""
        kind = self.protocol.types.get(attribute)
        if kind is None or kind.fits(value):
            return None
        return _type_violation(action, kind, value)

    def claims(self, instance: ActionInstance) -> list[tuple[ScopeKey, str, int]]:
        """The attributes this instance binds fresh where a sayso chain sets priorities.

        Each claim is ``(scope, attribute, rank)`` with rank 0 for the chain's first
        role. Batched finalization orders conflicting claims by rank.
        """
        action = self.protocol.actions.get(instance.name)
        if action is None or not all(
            valid_key_value(instance.bindings.get(k)) for k in action.keys
        ):
            return []  # an instance the check will refuse claims nothing
        try:
            scope = self.scope_of(action, instance.bindings)
            root = tuple(instance.bindings[k] for k in self.protocol.root_keys)
        except KeyError:
            return []
        outcome = _evaluate(self._c, self._enactments.get(root), action, scope)
        if not isinstance(outcome, Enablement):
            return []
        result = []
        for attribute in outcome.to_bind:
            chain = self.protocol.sayso.get(attribute, ())
            if len(chain) > 1:
                result.append((scope, attribute, chain.index(action.actor)))
        return result

    def _attempt(
        self,
        instances: Sequence[ActionInstance],
        roles: Collection[str] | None,
        undo: list[tuple[Any, ...]],
    ) -> Violation | None:
        for index, instance in enumerate(instances):
            checked = self._check_one(instance, roles)
            if type(checked) is Violation:
                return replace(checked, index=index) if index else checked
            self._apply_one(instance, undo, checked)  # type: ignore[arg-type]
        return None

    def _check_one(
        self, instance: ActionInstance, roles: Collection[str] | None
    ) -> Violation | tuple[tuple[Any, ...], ScopeKey]:
        """The violation, or where the instance goes: (root, scope)."""
        protocol = self.protocol
        name = instance.action.name
        action = protocol.actions.get(name)
        if action is None:
            return Violation(
                "unknown-action",
                f"{protocol.name} has no action '{name}' (actions: {', '.join(protocol.actions)})",
                action=name,
            )
        if roles is not None and action.actor not in roles:
            return Violation(
                "role",
                f"'{name}' is performed by {action.actor}, a role this agent does not play"
                f" (it plays {', '.join(sorted(roles)) or 'none'})",
                action=name,
            )
        bindings = instance.bindings
        attributes = self._c.attribute_sets[name]
        if len(bindings) != len(attributes) or bindings.keys() != attributes:
            for attribute in bindings:
                if attribute not in attributes:
                    return Violation(
                        "unknown-attribute",
                        f"'{name}' has no attribute '{attribute}' "
                        f"(it has {', '.join(action.attributes)})",
                        action=name,
                        attribute=attribute,
                    )
            optional = self._c.optional
            for attribute in action.attributes:
                if attribute not in bindings and attribute not in optional:
                    return Violation(
                        "missing-attribute",
                        f"'{name}' must bind '{attribute}' (only optional attributes may be "
                        "left absent)",
                        action=name,
                        attribute=attribute,
                    )
        for key in action.keys:
            if not valid_key_value(bindings[key]):
                return Violation(
                    "key",
                    f"key '{key}' of '{name}' must be a string or an integer, "
                    f"not {bindings[key]!r}",
                    action=name,
                    attribute=key,
                )
        scope = tuple([(k, bindings[k]) for k in self._c.ordered_keys[name]])
        root = tuple([bindings[k] for k in protocol.root_keys])
        enactment = self._enactments.get(root)
        outcome = _required(self._c, enactment, action, scope)
        if isinstance(outcome, Violation):
            return outcome
        mismatch = next(self._mismatches(name, outcome, bindings), None)
        if mismatch is not None:
            return mismatch
        for attribute, kind in self._c.typed[name]:
            # Only what this instance binds fresh: a value equal to an earlier
            # binding was checked when that was bound.
            if attribute in outcome:
                continue
            given = bindings.get(attribute, ABSENT)
            if given is ABSENT or kind.fits(given):
                continue
            return _type_violation(name, kind, given)
        return root, scope

    def _mismatches(
        self, name: str, fixed: dict[str, Any], bindings: Mapping[str, Any]
    ) -> Iterator[Violation]:
        """Each attribute whose given value differs from the one it must carry."""
        for attribute, expected in fixed.items():
            given = bindings.get(attribute, ABSENT)
            if json_equal(self._store(given, attribute), expected):
                continue
            if given is ABSENT or expected is ABSENT:
                yield self._absence(name, attribute, given, expected)
            elif attribute in self.protocol.actions:
                yield Violation(
                    "dependency",
                    f"'{attribute}' records that the action occurred: bind it to true, "
                    f"not {given!r}",
                    action=name,
                    attribute=attribute,
                )
            else:
                shown = "another value" if self.fingerprints else _show(expected)
                yield Violation(
                    "bound",
                    f"'{attribute}' is already bound to {shown} here, so '{name}' "
                    f"must carry that value, not {_show(given)}",
                    action=name,
                    attribute=attribute,
                )

    def _absence(self, name: str, attribute: str, given: JSON, expected: JSON) -> Violation:
        if given is ABSENT:
            shown = "a value" if self.fingerprints else _show(expected)
            message = (
                f"'{attribute}' is bound to {shown} here, so '{name}' must carry that "
                "value; it leaves it absent"
            )
        else:
            message = (
                f"'{attribute}' was left absent here, so '{name}' must leave it absent "
                f"too, not bind {_show(given)}"
            )
        return Violation("bound", message, action=name, attribute=attribute)

    def _apply_one(
        self,
        instance: ActionInstance,
        undo: list[tuple[Any, ...]] | None,
        located: tuple[tuple[Any, ...], ScopeKey] | None = None,
    ) -> tuple[Any, ...] | None:
        """Record one instance (already checked, or finalized elsewhere); returns its
        root if this made the enactment complete. Hot: kept free of helper calls."""
        c = self._c
        action = self.protocol.actions[instance.action.name]
        bindings = instance.bindings
        if located is None:
            root = tuple([bindings[k] for k in self.protocol.root_keys])
            key = tuple([(k, bindings[k]) for k in c.ordered_keys[action.name]])
        else:
            root, key = located
        enactment = self._enactments.get(root)
        if enactment is None:
            enactment = self._enactments[root] = Enactment(root)
            if undo is not None:
                undo.append(("enactment", root))
        scope = enactment.scopes.get(key)
        if scope is None:
            scope = enactment.scopes[key] = _Scope(key)
            if undo is not None:
                undo.append(("scope", enactment, key))
            if len(key) > len(root):
                self._count_keys(enactment, key, 1)
        scope_bindings = scope.bindings
        if enactment.watch is not None:
            enactment.watch.applied(key, action, scope_bindings)
        fingerprints = self.fingerprints
        for attribute in action.attributes:
            if attribute not in scope_bindings:
                value = bindings.get(attribute, ABSENT)
                if fingerprints:
                    value = self._store(value, attribute)
                scope_bindings[attribute] = value
                if undo is not None:
                    undo.append(("bind", scope, attribute))
        if undo is not None:
            if action.name not in scope_bindings:  # (a dependent may have bound it)
                undo.append(("bind", scope, action.name))
            undo.append(("occurred", enactment, enactment.complete))
        scope_bindings[action.name] = True
        if not enactment.complete and c.may_complete[action.name] and self._holds(enactment):
            enactment.complete = True
            return root
        return None

    def _count_keys(self, enactment: Enactment, key: ScopeKey, delta: int) -> None:
        """Track which values the non-root keys take in this enactment."""
        if enactment.key_values is None:
            enactment.key_values = {}
        for name, value in key:
            if name in self._root_keys:
                continue
            seen = enactment.key_values.setdefault(name, {})
            count = seen.get(value, 0) + delta
            if count:
                seen[value] = count
            else:
                del seen[value]
            if enactment.watch is not None and (not count or (delta > 0 and count == 1)):
                enactment.watch.value(name, value, bool(count))  # came into use, or went

    def _store(self, value: JSON, attribute: str) -> JSON:
        """How a bound value is kept: itself, or (fingerprint mode) a digest of it,
        or nothing but the fact that it is bound when no rule can ever compare it
        (an attribute that a single action carries)."""
        if (
            not self.fingerprints
            or value is None
            or value is True
            or value is False
            or value is ABSENT
        ):
            return value
        if attribute not in self._c.shared:
            return _BOUND
        if attribute in self._c.key_order:
            return value
        return fingerprint(value)

    def _holds(self, enactment: Enactment) -> bool:
        scopes = enactment.scopes.values()
        return all(
            any(
                scope.bindings.get(name, ABSENT) is not ABSENT
                for scope in scopes
                for name in clause
            )
            for clause in self.protocol.completion
        )

    def _rollback(self, undo: list[tuple[Any, ...]]) -> None:
        watch = None  # of the enactment whose binds follow (its "occurred" comes first)
        for entry in reversed(undo):
            kind = entry[0]
            if kind == "bind":
                _, scope, attribute = entry
                del scope.bindings[attribute]
                if watch is not None:
                    watch.touched(scope.key, (attribute,))
            elif kind == "occurred":
                _, enactment, was_complete = entry
                enactment.complete = was_complete
                watch = enactment.watch
            elif kind == "scope":
                _, enactment, key = entry
                enactment.scopes.pop(key)
                if len(key) > len(enactment.root):
                    self._count_keys(enactment, key, -1)
            elif kind == "enactment":
                del self._enactments[entry[1]]
        undo.clear()


def _type_violation(action: str, kind: AttributeType, value: JSON) -> Violation:
    """Rule ``type`` for a value that does not fit, saying where inside it."""
    problem = kind.problem(value)
    return Violation(
        "type",
        f"'{action}': {problem}",
        action=action,
        attribute=kind.attribute,
        path=problem.path if problem is not None else kind.attribute,
    )
