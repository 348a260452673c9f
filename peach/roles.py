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

import inspect
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


def _check_constraint(kind: str, name: Any, check: Any) -> None:
    """A constraint's check is a plain function: it runs synchronously, where the
    attempt or the batch is, and a coroutine function would never be awaited."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a {kind} constraint needs a name, not {name!r}")
    if not callable(check):
        raise TypeError(f"{kind} {name!r}: check must be a function, not {type(check).__name__}")
    if inspect.iscoroutinefunction(check):
        raise TypeError(
            f"{kind} {name!r}: check is a coroutine function; constraints are checked "
            "synchronously (use def, not async def, and keep the check cheap)"
        )


@dataclass(frozen=True)
class MustNever:
    """``check(instance, adapter)`` is True when attempting ``instance`` would do
    what the role must never do; such an attempt is refused before it is sent.
    A check that raises refuses the attempt too (what cannot be shown harmless
    is not sent)."""

    name: str
    description: str
    check: NeverCheck

    def __post_init__(self) -> None:
        _check_constraint("must-never", self.name, self.check)


@dataclass(frozen=True)
class MustAlways:
    """``check(adapter)`` is True while the property holds; it is checked after
    every batch the adapter observes, and a breach is reported, not prevented
    (another agent's action may cause it)."""

    name: str
    description: str
    check: AlwaysCheck

    def __post_init__(self) -> None:
        _check_constraint("must-always", self.name, self.check)


def evaluate(check: Callable[..., Any], *args: Any) -> bool:
    """Run a constraint's check and return its truth; what the check raises
    propagates (a check returning an awaitable raises TypeError: the awaitable
    would be true whatever it checks)."""
    result = check(*args)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()  # a coroutine never awaited, closed without a warning
        raise TypeError("the check returned an awaitable; it must return True or False")
    return bool(result)


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

    def __init__(
        self,
        constraint: MustNever,
        instance: ActionInstance,
        index: int,
        error: BaseException | None = None,
    ) -> None:
        if error is None:
            message = (
                f"{instance.action.name} would break the role's constraint "
                f"{constraint.name!r}: {constraint.description}"
            )
        else:
            message = (
                f"{instance.action.name} is refused: the check of the role's constraint "
                f"{constraint.name!r} ({constraint.description}) failed with "
                f"{type(error).__name__}: {error}"
            )
        super().__init__(
            Violation("must-never", message, action=instance.action.name, index=index),
            [instance],
        )
        self.constraint = constraint.name
        #: The exception the check raised, when it failed rather than refused.
        self.check_error = error


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
    #: The adapter that adopted the spec (set by ``PeachAdapter.adopt``).
    adopted_by: str | None = field(default=None, init=False, compare=False, repr=False)

    def action(
        self, name: str, kind: ActionKind = "local", description: str = ""
    ) -> Callable[[Implementation], Implementation]:
        """Decorator: ``@spec.action("Offer")`` runs the coroutine each time Offer is
        enabled for the role (as ``on_enabled`` would), once the spec is adopted."""
        if kind not in KINDS:
            raise ValueError(f"action kind {kind!r}: one of {', '.join(KINDS)}")
        self._not_adopted(f"an implementation of {name}")

        def register(fn: Implementation) -> Implementation:
            if not callable(fn) or (
                inspect.isfunction(fn) and not inspect.iscoroutinefunction(fn)
            ):
                raise TypeError(
                    f"the implementation of {name} must be a coroutine function "
                    f"(async def), like an on_enabled handler, not {fn!r}"
                )
            self._not_adopted(f"an implementation of {name}")
            if name in self.actions:
                raise ValueError(f"{self.role} already has an implementation of {name}")
            text = description or (fn.__doc__ or "").strip().split("\n")[0]
            self.actions[name] = ActionSpec(name, kind, text, fn)
            return fn

        return register

    def decided_by(self, names: Iterable[str], kind: ActionKind = "llm") -> None:
        """Declare actions that a decider (an LLM agent, a person) performs, so that
        an inspection lists them with their kind though no code runs them."""
        if isinstance(names, str):
            names = [names]
        for name in names:
            self.actions.setdefault(name, ActionSpec(name, kind, "", None))

    def _not_adopted(self, what: str) -> None:
        if self.adopted_by is not None:
            raise ValueError(
                f"the spec of {self.role} was adopted by {self.adopted_by} already: add "
                f"{what} before adopt(), or it would never run"
            )

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
        must-never constraint forbids, or whose check fails (raises): an attempt
        the role cannot show harmless is not sent."""
        for index, instance in enumerate(instances):
            for constraint in self.must_never:
                try:
                    forbidden = evaluate(constraint.check, instance, adapter)
                except Exception as exc:
                    raise ConstraintRefused(constraint, instance, index, exc) from exc
                if forbidden:
                    raise ConstraintRefused(constraint, instance, index)

    def breaches(self, adapter: PeachAdapter) -> list[MustAlways]:
        """The must-always constraints that do not hold now (a check that fails
        is not counted: nothing is known of it)."""
        return [c for c in self.must_always if _holds(c, adapter) is False]

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
        return evaluate(constraint.check, adapter)
    except Exception as exc:  # an inspection must not fail on a faulty check
        return f"check failed: {type(exc).__name__}: {exc}"
