"""Roles as run-time entities: identity, responsibilities, constraints, actions.

The protocol already says what a role *may* do. A role as an agent plays it says
more: what it is for (its goal and domain), what it answers for (its
responsibilities), what it must never do and what must always hold while it
plays, and which code performs which action. :class:`RoleSpec` declares all of
that once, in a small object that a :class:`~peach.PeachAdapter` (through
``adopt``) and an LLM agent both read, so that the declaration is what runs and
what an inspection shows, not a comment beside the code.

Constraints are code, not prose for a model to heed: a must-never constraint is
checked before an attempt leaves the agent (the attempt is refused, naming it),
and a must-always one after each batch the agent observes (a breach is reported
to ``on_breach`` listeners and counted). The protocol's own rules stay in the
semantics; these are the agent's own, stricter ones.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from langshaw import ActionInstance, Violation
from peach.errors import ActionRejected

if TYPE_CHECKING:
    from peach.feasible import FeasibleAction

# The adapter that plays the role (peach.adapter imports this module, so the
# type is named here only in words: a PeachAdapter).
PeachAdapter = Any

#: How an action is carried out (the hybrid role architecture's action types).
ActionKind = Literal["local", "web", "llm", "mcp"]
KINDS: tuple[str, ...] = ("local", "web", "llm", "mcp")

NeverCheck = Callable[[ActionInstance, PeachAdapter], bool]
AlwaysCheck = Callable[[PeachAdapter], bool]
Implementation = Callable[["FeasibleAction"], Awaitable[Any]]


@dataclass(frozen=True)
class MustNever:
    """``check(instance, adapter)`` is True when attempting ``instance`` would do
    what the role must never do; such an attempt is refused before it is sent."""

    name: str
    description: str
    check: NeverCheck


@dataclass(frozen=True)
class MustAlways:
    """``check(adapter)`` is True while the property holds; it is checked after
    every batch the adapter observes, and a breach is reported, not prevented
    (another agent's action may cause it)."""

    name: str
    description: str
    check: AlwaysCheck


@dataclass(frozen=True)
class Responsibility:
    """An obligation of the role: the actions that serve it and its constraints."""

    name: str
    description: str = ""
    actions: tuple[str, ...] = ()
    must_never: tuple[MustNever, ...] = ()
    must_always: tuple[MustAlways, ...] = ()


@dataclass(frozen=True)
class ActionSpec:
    """Who performs an action of the role: code run when it is enabled."""

    action: str
    kind: ActionKind
    description: str
    run: Implementation | None  # None: left to a decider, such as an LLM agent


class ConstraintRefused(ActionRejected):
    """An attempt refused by the agent's own must-never constraint, before it
    left the agent. ``rule`` is ``must-never``; ``constraint`` names which."""

    def __init__(self, constraint: MustNever, instance: ActionInstance, index: int) -> None:
        super().__init__(
            Violation(
                "must-never",
                f"{instance.action.name} would break the role's constraint "
                f"{constraint.name!r}: {constraint.description}",
                action=instance.action.name,
                index=index,
            ),
            [instance],
        )
        self.constraint = constraint.name


@dataclass
class RoleSpec:
    """One role as an agent plays it. ``role`` names the protocol's role.

    ``state`` returns the fields the role exposes to inspection (say, a
    seller's stock); it is called on each inspection, so keep it cheap and
    free of secrets. Action implementations are registered with :meth:`action`.
    """

    role: str
    goal: str = ""
    domain: str = ""
    responsibilities: Sequence[Responsibility] = ()
    state: Callable[[], Mapping[str, Any]] | None = None
    actions: dict[str, ActionSpec] = field(default_factory=dict)

    def action(
        self, name: str, kind: ActionKind = "local", description: str = ""
    ) -> Callable[[Implementation], Implementation]:
        """Decorator: ``@spec.action("Offer")`` runs the coroutine each time Offer is
        enabled for the role (as ``on_enabled`` would), once the spec is adopted."""
        if kind not in KINDS:
            raise ValueError(f"action kind {kind!r}: one of {', '.join(KINDS)}")

        def register(fn: Implementation) -> Implementation:
            if name in self.actions:
                raise ValueError(f"{self.role} already has an implementation of {name}")
            text = description or (fn.__doc__ or "").strip().split("\n")[0]
            self.actions[name] = ActionSpec(name, kind, text, fn)
            return fn

        return register

    def decided_by(self, names: Iterable[str], kind: ActionKind = "llm") -> None:
        """Declare actions that a decider (an LLM agent, a person) performs, so that
        an inspection lists them with their kind though no code runs them."""
        for name in names:
            self.actions.setdefault(name, ActionSpec(name, kind, "", None))

    @property
    def must_never(self) -> list[MustNever]:
        return [c for r in self.responsibilities for c in r.must_never]

    @property
    def must_always(self) -> list[MustAlways]:
        return [c for r in self.responsibilities for c in r.must_always]

    def named_actions(self) -> set[str]:
        """Every action name the spec mentions (checked against the protocol)."""
        return {a for r in self.responsibilities for a in r.actions} | set(self.actions)

    def refusal(self, instances: Sequence[ActionInstance], adapter: PeachAdapter) -> None:
        """Raise :class:`ConstraintRefused` for the first instance that a
        must-never constraint forbids."""
        for index, instance in enumerate(instances):
            for constraint in self.must_never:
                if constraint.check(instance, adapter):
                    raise ConstraintRefused(constraint, instance, index)

    def breaches(self, adapter: PeachAdapter) -> list[MustAlways]:
        """The must-always constraints that do not hold now."""
        return [c for c in self.must_always if not c.check(adapter)]

    def describe(self, adapter: PeachAdapter | None = None) -> dict[str, Any]:
        """The declaration as data, with each must-always's current truth when an
        adapter is given (what an inspection shows)."""
        return {
            "role": self.role,
            "goal": self.goal,
            "domain": self.domain,
            "responsibilities": [
                {
                    "name": r.name,
                    "description": r.description,
                    "actions": list(r.actions),
                    "must_never": [
                        {"name": c.name, "description": c.description} for c in r.must_never
                    ],
                    "must_always": [
                        {
                            "name": c.name,
                            "description": c.description,
                            **({"holds": _holds(c, adapter)} if adapter is not None else {}),
                        }
                        for c in r.must_always
                    ],
                }
                for r in self.responsibilities
            ],
            "actions": {
                a.action: {"kind": a.kind, "description": a.description, "coded": a.run is not None}
                for a in sorted(self.actions.values(), key=lambda a: a.action)
            },
        }


def _holds(constraint: MustAlways, adapter: PeachAdapter) -> bool | str:
    try:
        return bool(constraint.check(adapter))
    except Exception as exc:  # an inspection must not fail on a faulty check
        return f"check failed: {type(exc).__name__}: {exc}"
