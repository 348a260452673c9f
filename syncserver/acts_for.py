"""What an agent acts for: bindings a MAS holds one agent to.

A Langshaw protocol says which *role* performs an action, not which agent: any
agent playing Seller may perform ``Price(seller, ...)`` for any ``seller``.
Where a key or attribute names an agent (the seller whose price it is, the
owner of a queue, the author of a post), the MAS configuration says so with
``acts_for``: the agent may only perform an instance that binds the attribute
to its value. The server refuses anything else (rule ``acts-for``, 403), and an
adapter whose executor states its pins does not offer an action in a scope
held for another, so an LLM agent is not even shown a rival's price to set.

A pin is ``"attribute"`` (every action that has it) or ``"Action.attribute"``
(that action only: a queue's owner takes from its own queue, ``Take.queue``,
while ``Send.queue`` names the recipient).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from langshaw import ABSENT, ActionInstance, Enablement, LangshawProtocol, Violation

__all__ = ["ActsFor"]

#: Values a pin may hold: what a key may be (a list or an object names no one).
_SCALARS = (str, int)


@dataclass(frozen=True)
class ActsFor:
    """An agent's pins: ``(action or None, attribute, value)``."""

    pins: tuple[tuple[str | None, str, Any], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.pins)

    @classmethod
    def parse(
        cls,
        value: Any,
        protocols: Iterable[LangshawProtocol],
        where: str,
        problem: Callable[[str, str], None],
        roles: Mapping[str, Collection[str]] | None = None,
    ) -> ActsFor:
        """From a configuration's ``acts_for`` table; each mistake goes to
        ``problem`` (a pin naming no attribute of the MAS's protocols would
        silently hold nothing, so it is an error)."""
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            problem(where, 'must be a table, e.g. { "Price.seller" = "cutter" }')
            return cls()
        protocols = list(protocols)
        pins: list[tuple[str | None, str, Any]] = []
        for target, pinned in value.items():
            here = f"{where}.{target}"
            if not isinstance(target, str):
                problem(
                    where,
                    f"{target!r}: a pin is named by a string, 'attribute' or 'Action.attribute'",
                )
                continue
            if isinstance(pinned, bool) or not isinstance(pinned, _SCALARS):
                problem(here, f"must be a string or an integer, not {_short(pinned)}")
                continue
            action, dot, attribute = target.rpartition(".")
            if (dot and not action) or not attribute:
                problem(here, "must be 'attribute' or 'Action.attribute'")
                continue
            reason = _unmet(protocols, action, attribute, pinned, roles)
            if reason is not None:
                problem(here, reason)
                continue
            pins.append((action or None, attribute, pinned))
        held: dict[tuple[str, str], Any] = {}  # (action, attribute) -> value
        for only, attribute, pinned in pins:
            names = (
                [only]
                if only
                else [
                    a for p in protocols for a in p.actions if attribute in p.actions[a].attributes
                ]
            )
            for name in names:
                other = held.setdefault((name, attribute), pinned)
                if not _same(other, pinned):
                    problem(
                        where,
                        f"{name}.{attribute} is pinned to both {other!r} and "
                        f"{pinned!r}: no instance could meet both",
                    )
                    return cls()
        return cls(tuple(pins))

    @classmethod
    def of(cls, pins: Mapping[str, Any]) -> ActsFor:
        """From :meth:`describe`'s form, as a server stated it (already checked)."""
        split = ((t.rpartition("."), v) for t, v in pins.items())
        return cls(tuple((a or None, attr, v) for (a, _, attr), v in split))

    def _held(self, action: str) -> Iterable[tuple[str, Any]]:
        for pinned_action, attribute, value in self.pins:
            if pinned_action is None or pinned_action == action:
                yield attribute, value

    def refuses(self, agent: str, instance: ActionInstance, index: int = 0) -> Violation | None:
        """The ``acts-for`` violation of ``instance`` performed by ``agent``, if any
        (an optional attribute left absent names no one, and breaks no pin)."""
        name = instance.action.name
        for attribute, value in self._held(name):
            bound = instance.bindings.get(attribute, value)
            if bound is not ABSENT and not _same(bound, value):
                return Violation(
                    "acts-for",
                    f"agent {agent!r} acts for {attribute} {value!r} only: this {name} binds "
                    f"{attribute} to {_short(bound)}",
                    action=name,
                    attribute=attribute,
                    index=index,
                )
        return None

    def check(self, agent: str, instances: Iterable[ActionInstance]) -> Violation | None:
        """The first ``acts-for`` violation of an atomic list, if any."""
        if self.pins:
            for index, instance in enumerate(instances):
                violation = self.refuses(agent, instance, index)
                if violation is not None:
                    return violation
        return None

    def narrow(
        self, enablement: Enablement, used: Callable[[str], Collection[Any]] | None = None
    ) -> Enablement | None:
        """``enablement`` as this agent may take it, or None.

        None when a binding it fixes (a key of its scope, say) is held for
        another: that scope is not this agent's. A pinned key of a new scope in
        a known enactment (a buyer's own scope in a round) becomes a key of the
        agent's value, or the enablement is None when that scope exists already
        (``used(key)`` gives the values in use): the agent has one scope there,
        and whatever it may do in it is offered as that scope's. A pinned key
        of a new enactment stays the performer's to pick (fixing it would make
        an initiating action look like one in a known scope); the server still
        refuses another value. An attribute the agent binds is left to it."""
        held = list(self._held(enablement.action.name))
        if not held:
            return enablement
        fixed = enablement.fixed
        moved: dict[str, Any] = {}
        for attribute, value in held:
            if attribute in fixed:
                if fixed[attribute] is not ABSENT and not _same(fixed[attribute], value):
                    return None
            elif attribute in enablement.new_keys and used is not None and enablement.keys:
                if value in used(attribute):
                    return None
                moved[attribute] = value
        if not moved:
            return enablement
        return replace(
            enablement,
            keys={**enablement.keys, **moved},
            new_keys=tuple(k for k in enablement.new_keys if k not in moved),
            fixed={**fixed, **moved},
        )

    def describe(self) -> dict[str, Any]:
        """As the configuration writes it (for ``GET /mas/{mas}``)."""
        return {(f"{a}.{attr}" if a else attr): v for a, attr, v in self.pins}


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values of the same kind (``True`` is not ``1``, nor ``1.0``)."""
    return type(a) is type(b) and a == b


def _short(value: Any, limit: int = 80) -> str:
    """``repr`` of a value, cut: a refusal must not echo a forged megabyte."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _unmet(
    protocols: list[LangshawProtocol],
    action: str,
    attribute: str,
    value: Any,
    roles: Mapping[str, Collection[str]] | None = None,
) -> str | None:
    """Why a pin could hold nothing (it names no attribute, a dependency, or a
    value its type refuses; with ``roles``, the roles the agent plays per
    protocol, only actions of those roles), or None."""
    found = [
        (p, a)
        for p in protocols
        for a in p.actions.values()
        if (not action or a.name == action) and attribute in a.attributes
    ]
    if not found:
        if action:
            if any(action in p.actions for p in protocols):
                return f"{action} has no attribute {attribute!r}"
            return f"no protocol here has an action {action!r}"
        return f"no action of this MAS's protocols has an attribute {attribute!r}"
    if roles is not None:
        found = [(p, a) for p, a in found if a.actor in roles.get(p.name, ())]
        if not found:
            what = f"{action} is" if action else f"no action with {attribute!r} is"
            return f"{what} performed by a role this agent plays: the pin would hold nothing"
    for protocol, act in found:
        if attribute in act.dependencies:
            return f"{attribute!r} is a dependency of {act.name} (always true), not a name"
        declared = protocol.type_of(attribute)
        if declared is not None and not declared.fits(value):
            return f"{value!r} does not fit {attribute}'s type in {protocol.name}"
    return None
