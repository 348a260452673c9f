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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from langshaw import ActionInstance, Enablement, LangshawProtocol, Violation

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
            if isinstance(pinned, bool) or not isinstance(pinned, _SCALARS):
                problem(here, f"must be a string or an integer, not {pinned!r}")
                continue
            action, _, attribute = target.rpartition(".")
            actions = [
                a
                for p in protocols
                for a in p.actions.values()
                if (not action or a.name == action) and attribute in a.attributes
            ]
            if not actions:
                if action:
                    known = [p.name for p in protocols if action in p.actions]
                    reason = (
                        f"{action} has no attribute {attribute!r}"
                        if known
                        else f"no protocol here has an action {action!r}"
                    )
                else:
                    reason = f"no action of this MAS's protocols has an attribute {attribute!r}"
                problem(here, reason)
                continue
            pins.append((action or None, attribute, pinned))
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
        """The ``acts-for`` violation of ``instance`` performed by ``agent``, if any."""
        name = instance.action.name
        for attribute, value in self._held(name):
            bound = instance.bindings.get(attribute, value)
            if bound != value or type(bound) is not type(value):
                return Violation(
                    "acts-for",
                    f"agent {agent!r} acts for {attribute} {value!r} only: this {name} binds "
                    f"{attribute} to {bound!r}",
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

    def narrow(self, enablement: Enablement) -> Enablement | None:
        """``enablement``, or None when a binding it fixes (a key of its scope,
        say) is held for another: that is not this agent's to take. An
        attribute the agent binds itself is left to it; a wrong value is
        refused by the server, naming the pin."""
        fixed = enablement.fixed
        for attribute, value in self._held(enablement.action.name):
            if attribute in fixed and fixed[attribute] != value:
                return None
        return enablement

    def describe(self) -> dict[str, Any]:
        """As the configuration writes it (for ``GET /mas/{mas}``)."""
        return {(f"{a}.{attr}" if a else attr): v for a, attr, v in self.pins}
