"""Mandates: what a principal allows its agent to do, beyond what its role may.

A protocol says what a role *may* do; it does not say how much of it. A model
playing a buyer may legally create sixty checkouts and pay for each, or create
one for a hundred bouquets because a merchant's message told it to. A mandate,
in the spirit of the Agent Payments Protocol's intent mandates, is the
principal's bound on its agent, enforced like ``acts_for`` by the code that
finalizes (the SyncServer, the agent's adapter), never by a prompt:

* ``actions``: how many times an action may be performed, per enactment and
  per run (``per_enactment``, ``per_run``), counted per protocol (each
  protocol's ledger keeps its own counts: an agent with roles in two protocols
  is held to each count in each);
* ``enactments``: how many enactments the agent may start, in all the MAS's
  protocols;
* ``values``: bounds on what an attribute may be bound to (``min``, ``max``,
  ``total`` for the sum, ``in`` for allowed values), optionally on the parts of
  a JSON value a JSONPath selects (each line item's quantity, say);
* ``ceiling``: a number the agent may not act beyond, read from what the
  protocol bound in the enactment (UCP's ``totals``) when it attempts one of the
  ``on`` actions (the payment);
* ``approval``: actions a human approves first (the agent asks its principal:
  a callback, or a prompt in ``strabo agent``). Only the agent's side can ask,
  so only the adapter enforces it.

A refusal is a :class:`~langshaw.Violation` of rule ``mandate`` whose message
names the clause (``mandate actions.Complete.per_run = 1``), so an LLM agent is
told why, as for a protocol refusal. The same :meth:`Mandate.check` runs in the
adapter and in the server; each supplies the counts it keeps (:class:`Counts`).
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import field_validator

from langshaw import ABSENT, ActionInstance, LangshawProtocol, SocialState, Violation
from langshaw.values import valid_key_value
from syncserver._mandate_parse import Checker, json_path
from syncserver.settings import Problems, SettingsError, Table, must

__all__ = ["Counts", "Mandate", "MandateError", "read_mandate"]

RULE = "mandate"


class MandateError(SettingsError):
    """A mandate that cannot be used; ``problems`` lists every mistake."""


class Counts(Protocol):
    """What the agent has done so far, as the checker's side knows it."""

    def performed(self, action: str, root: tuple[Any, ...] | None) -> int:
        """How many instances of ``action`` the agent performed in ``root``
        (None: in the whole run), attempts still in flight included."""
        ...

    def started(self) -> int:
        """How many enactments the agent started (performed their first action)."""
        ...

    def root(self, instance: ActionInstance) -> tuple[Any, ...]:
        """The root enactment ``instance`` belongs to."""
        ...

    def exists(self, root: tuple[Any, ...]) -> bool:
        """Whether ``root`` was started already (by anyone)."""
        ...


# The shape, as written -------------------------------------------------------------


class _Times(Table):
    per_enactment: int | None = must("a whole number, 0 or more", ge=0)
    per_run: int | None = must("a whole number, 0 or more", ge=0)


class _Values(Table):
    path: str | None = must("a JSONPath, e.g. '$[*].quantity'", min_length=1)
    min: float | None = must("a number")
    max: float | None = must("a number")
    total: float | None = must("a number (the most the selected numbers may add up to)")
    allowed: list[Any] | None = must("a list of allowed values")  # written "in"

    @field_validator("min", "max", "total", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return _as_float(value)


def _as_float(value: Any) -> Any:
    """An integer as the float the clause compares with; one too large for a
    float is left as it is, for the strict check to report at its place."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return value
    return value


class _Ceiling(Table):
    attribute: str = must("the name of an attribute the protocol binds", ..., min_length=1)
    max: float = must("a number", ...)
    on: list[str] = must("a non-empty list of action names", ..., min_length=1)
    path: str | None = must("a JSONPath, e.g. \"$[?(@.type == 'total')].amount\"", min_length=1)

    @field_validator("max", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return _as_float(value)


class _Mandate(Table):
    actions: dict[str, Any] | None = must("a table of action names")
    enactments: int | None = must("a whole number, 0 or more", ge=0)
    values: dict[str, Any] | None = must("a table of 'Action.attribute' or 'attribute' names")
    ceiling: dict[str, Any] | None = must("a table with attribute, max and on")
    approval: list[str] | None = must("a list of action names")


# The checked form -----------------------------------------------------------------


@dataclass(frozen=True)
class _Bound:
    where: str  # as written: "Create.line_items"
    action: str | None
    attribute: str
    path: Any  # a parsed JSONPath, or None for the value itself
    low: float | None
    high: float | None
    total: float | None
    allowed: tuple[Any, ...] | None


@dataclass(frozen=True)
class _Limit:
    attribute: str
    path: Any
    high: float
    on: frozenset[str]


@dataclass(frozen=True)
class Mandate:
    """A principal's bounds on one agent (see the module's docstring)."""

    times: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)
    enactments: int | None = None
    bounds: tuple[_Bound, ...] = ()
    ceiling: _Limit | None = None
    approval: frozenset[str] = frozenset()
    source: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __bool__(self) -> bool:
        return bool(
            self.times or self.enactments is not None or self.bounds or self.ceiling
            or self.approval
        )

    # Reading ---------------------------------------------------------------------

    @classmethod
    def parse(
        cls,
        value: Any,
        protocols: Iterable[LangshawProtocol],
        where: str | tuple[str, ...],
        problem: Callable[[tuple[str, ...], str], None],
        roles: Mapping[str, Iterable[str]] | None = None,
    ) -> Mandate:
        """From a configuration's ``mandate`` table; each mistake goes to
        ``problem`` (a clause naming an action or attribute the protocols lack
        would silently bound nothing, so it is an error). Given ``roles`` (the
        agent's, by protocol name), so is a clause on an action those roles
        never perform, or on an attribute none of their actions binds."""
        here = tuple(where.split(".")) if isinstance(where, str) else tuple(where)
        if value is None:
            return cls()
        checker = Checker(problem)
        spec = checker.check(_Mandate, value, here)
        if spec is None:
            return cls()
        protocols = list(protocols)
        actions = {a: p for p in protocols for a in p.actions}
        attributes = {attr for p in protocols for a in p.actions.values() for attr in a.attributes}

        played = None if roles is None else {p: frozenset(r) for p, r in roles.items()}
        bound_here = attributes  # what a clause without an action may name
        if played is not None:
            # Every protocol's action: two protocols may name an action alike,
            # and the agent performs it if it does in either.
            own = [
                act for p in protocols for act in p.actions.values()
                if act.actor in played.get(p.name, ())
            ]
            mine = {act.name for act in own}
            bound_here = {attr for act in own for attr in act.attributes}

        def known_action(name: Any, at: tuple[str, ...]) -> bool:
            if name not in actions:
                problem(
                    at, f"no protocol here has an action {name!r} (actions: {', '.join(actions)})"
                )
                return False
            if played is None or name in mine:
                return True
            actor = " or ".join(
                sorted({p.actions[name].actor for p in protocols if name in p.actions})
            )
            plays = ", ".join(sorted(r for rs in played.values() for r in rs)) or "no role"
            problem(
                at,
                f"{name!r} is performed by {actor}, and this agent plays {plays}: "
                "a bound on it would bound nothing",
            )
            return False

        times: dict[str, tuple[int | None, int | None]] = {}
        for name, table in (spec.actions or {}).items():
            at = (*here, "actions", name)
            if not known_action(name, at):
                continue
            limit = checker.check(_Times, table, at)
            if limit is None:
                continue
            if limit.per_enactment is None and limit.per_run is None:
                # As for values: an entry that bounds nothing is a mistake, not a bound.
                problem(at, "bounds nothing: give per_enactment or per_run")
                continue
            times[name] = (limit.per_enactment, limit.per_run)
        bounds: list[_Bound] = []
        for target, table in (spec.values or {}).items():
            at = (*here, "values", target)
            action, dot, attribute = target.rpartition(".")
            if dot and not known_action(action, at):
                continue
            has = (
                any(
                    attribute in p.actions[action].attributes
                    for p in protocols
                    if action in p.actions
                    and (played is None or p.actions[action].actor in played.get(p.name, ()))
                )
                if action
                else attribute in bound_here
            )
            if not has:
                # "no action ... has an attribute": not "has no attribute" twice over.
                owner = (
                    f"{action} has no" if action
                    else "no action of these protocols has an" if attribute not in attributes
                    else "no action this agent performs has an"
                )
                problem(at, f"{owner} attribute {attribute!r}")
                continue
            if isinstance(table, Mapping):  # "in" is a Python keyword: "allowed" inside
                table = {("allowed" if k == "in" else k): v for k, v in table.items()}
            bound = checker.check(_Values, table, at)
            if bound is None:
                continue
            path = json_path(bound.path, (*at, "path"), problem)
            if bound.path is not None and path is None:
                continue
            given = (bound.min, bound.max, bound.total, bound.allowed)
            if all(v is None for v in given):
                problem(at, "bounds nothing: give min, max, total or in")
                continue
            if bound.min is not None and bound.max is not None and bound.min > bound.max:
                # Every value would be refused: surely min and max swapped, not a bound.
                problem(at, f"min {_number(bound.min)} is above max {_number(bound.max)}")
                continue
            bounds.append(
                _Bound(
                    target, action or None, attribute, path, bound.min, bound.max,
                    bound.total, tuple(bound.allowed) if bound.allowed is not None else None,
                )
            )
        ceiling = None
        if spec.ceiling is not None:
            at = (*here, "ceiling")
            found = checker.check(_Ceiling, spec.ceiling, at)
            if found is not None:
                path = json_path(found.path, (*at, "path"), problem)
                # A list, not all(...) after an ``and``: each unknown action is
                # reported, even after a bad path or another unknown action.
                known = [known_action(a, (*at, "on")) for a in found.on]
                fine = (found.path is None or path is not None) and all(known)
                if found.attribute not in attributes:
                    problem((*at, "attribute"), f"no action here binds {found.attribute!r}")
                elif fine:
                    ceiling = _Limit(found.attribute, path, found.max, frozenset(found.on))
        approval = [a for a in spec.approval or () if known_action(a, (*here, "approval"))]
        return cls(
            times, spec.enactments, tuple(bounds), ceiling, frozenset(approval),
            dict(value) if isinstance(value, Mapping) else {},
        )

    # Checking --------------------------------------------------------------------

    def check(
        self,
        agent: str,
        instances: Sequence[ActionInstance],
        counts: Counts,
        state: SocialState | None = None,
    ) -> Violation | None:
        """The first clause an atomic list of ``agent``'s instances breaks, or
        None. ``state`` (with values, not fingerprints) is where a ceiling's
        attribute is read; without it a ceiling is not checked."""
        return (
            self.check_values(instances)
            or self.check_counts(agent, instances, counts)
            or (self.check_ceiling(instances, state) if state is not None else None)
        )

    def check_values(self, instances: Sequence[ActionInstance]) -> Violation | None:
        """The first value bound out of bounds (needs no state)."""
        for index, instance in enumerate(instances):
            for bound in self.bounds:
                if bound.action not in (None, instance.action.name):
                    continue
                value = instance.bindings.get(bound.attribute, ABSENT)
                if value is ABSENT or bound.attribute not in instance.action.attributes:
                    continue
                broken = _breaks(bound, value)
                if broken is not None:
                    return _violation(
                        f"values.{bound.where}", broken, instance, index, bound.attribute
                    )
        return None

    def check_counts(
        self, agent: str, instances: Sequence[ActionInstance], counts: Counts
    ) -> Violation | None:
        """The first count the attempt would take past its limit."""
        if not self.times and self.enactments is None:
            return None
        here: dict[tuple[str, tuple[Any, ...] | None], int] = {}
        new_roots: set[tuple[Any, ...]] = set()
        roots = [counts.root(instance) for instance in instances]
        if not all(_is_root(root) for root in roots):
            # A root key unbound, or bound to what cannot be a key: the protocol
            # refuses the attempt (checked next, or already); counting it would
            # raise instead (a 500, or a whole batched window failed with it).
            return None
        for index, instance in enumerate(instances):
            name = instance.action.name
            root = roots[index]
            if self.enactments is not None and not counts.exists(root) and root not in new_roots:
                new_roots.add(root)
                if counts.started() + len(new_roots) > self.enactments:
                    return _violation(
                        f"enactments = {self.enactments}",
                        f"agent {agent!r} may start {self.enactments} enactment(s) and "
                        f"has started {counts.started()}",
                        instance,
                        index,
                    )
            limits = self.times.get(name)
            if limits is None:
                continue
            for scope, limit, clause, where in (
                (root, limits[0], "per_enactment", "in this enactment"),
                (None, limits[1], "per_run", "in this run"),
            ):
                if limit is None:
                    continue
                key = (name, scope)
                here[key] = here.get(key, 0) + 1
                done = counts.performed(name, scope)
                if done + here[key] > limit:
                    return _violation(
                        f"actions.{name}.{clause}",
                        f"agent {agent!r} may perform {name} {limit} time(s) {where} and "
                        f"has performed it {done} time(s)"
                        + (f" ({here[key]} more in this attempt)" if here[key] > 1 else ""),
                        instance,
                        index,
                        shown=f"actions.{name}.{clause} = {limit}",
                    )
        return None

    def check_ceiling(
        self, instances: Sequence[ActionInstance], state: SocialState
    ) -> Violation | None:
        """A ceiling's attribute, as bound in the enactment, above its maximum
        (or not bound at all: then nothing says the payment is within it)."""
        ceiling = self.ceiling
        if ceiling is None:
            return None
        for index, instance in enumerate(instances):
            if instance.action.name not in ceiling.on:
                continue
            found = _bound_values(state, instance, ceiling.attribute)
            clause = f"ceiling.max = {_number(ceiling.high)}"
            if not found:
                return _violation(
                    "ceiling",
                    f"{ceiling.attribute} is not bound where {instance.action.name} is "
                    f"attempted, so the ceiling of {_number(ceiling.high)} cannot be checked",
                    instance, index, ceiling.attribute, shown=clause,
                )
            for value in found:
                numbers = _numbers(ceiling.path, value)
                picked = (
                    [m.value for m in ceiling.path.find(value)]
                    if ceiling.path is not None
                    else [value]
                )
                # A part it cannot read as a number (text, a number too large)
                # beside one it can would let the one hide the other: refused.
                if not numbers or len(numbers) < len(picked):
                    return _violation(
                        "ceiling",
                        f"{ceiling.attribute} has no number, or a part that is no "
                        "number, where the ceiling's path points, so the ceiling "
                        "cannot be checked",
                        instance, index, ceiling.attribute, shown=clause,
                    )
                high = max(numbers)
                if high > ceiling.high:
                    return _violation(
                        "ceiling",
                        f"{instance.action.name} would act on {ceiling.attribute} "
                        f"{_number(high)}, above the ceiling of {_number(ceiling.high)}",
                        instance, index, ceiling.attribute, shown=clause,
                    )
        return None

    def needs_approval(self, instances: Sequence[ActionInstance]) -> list[str]:
        """The actions of an attempt that a human must approve first."""
        return sorted({i.action.name for i in instances if i.action.name in self.approval})

    def describe(self) -> dict[str, Any]:
        """As the configuration writes it (for ``GET /mas/{mas}`` and inspection)."""
        return dict(self.source)


def read_mandate(
    path: str | Path,
    protocols: Iterable[LangshawProtocol],
    roles: Mapping[str, Iterable[str]] | None = None,
) -> Mandate:
    """A mandate file (TOML, or JSON by its ``.json`` suffix: the ``mandate``
    table alone), checked against ``protocols`` (and the agent's ``roles``, by
    protocol name, as :meth:`Mandate.parse`); MandateError lists every mistake."""
    path = Path(path)
    problems = Problems(str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MandateError([f"{path}: cannot read it: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:  # a binary file, or another encoding's text
        raise MandateError([f"{path}: not UTF-8 text"]) from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise MandateError([f"{path}: not valid {kind}: {exc}"]) from None
    if path.suffix != ".json":
        problems = Problems(str(path), text)
    if isinstance(data, Mapping) and set(data) == {"mandate"}:
        data = data["mandate"]
    mandate = Mandate.parse(data, protocols, (), problems.add, roles)
    if problems:
        raise MandateError(problems.messages)
    return mandate


# Helpers ----------------------------------------------------------------------------


def _numbers(path: Any, value: Any) -> list[float]:
    """The numbers ``path`` selects in ``value`` (the value itself without one);
    a string of digits counts (some APIs write amounts as strings)."""
    picked = [m.value for m in path.find(value)] if path is not None else [value]
    numbers: list[float] = []
    for item in picked:
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            # float() of an int past 1e308 raises (OverflowError): such a number
            # is left out, so the bound refuses it as no number, never a 500.
            if abs(item) < 10**300:
                numbers.append(float(item))
        elif isinstance(item, float) and math.isfinite(item):
            numbers.append(item)
        elif isinstance(item, str):
            try:
                number = float(item)
            except ValueError:
                continue
            if math.isfinite(number):
                numbers.append(number)
    return numbers


def _breaks(bound: _Bound, value: Any) -> str | None:
    """Why ``value`` breaks ``bound``, or None."""
    picked = [m.value for m in bound.path.find(value)] if bound.path is not None else [value]
    if not picked and value not in ([], {}):
        # The path finds nothing in a value that holds something: the value is
        # not shaped as the mandate expects, so nothing says it is within it.
        return f"the bound's path selects nothing in {_short(value)}, so it cannot be checked"
    if bound.allowed is not None:
        for item in picked:
            if not any(type(item) is type(a) and item == a for a in bound.allowed):
                return f"{_short(item)} is not among the allowed {list(bound.allowed)!r}"
    if bound.low is None and bound.high is None and bound.total is None:
        return None
    numbers = _numbers(bound.path, value)
    if len(numbers) < len(picked):
        return f"{_short(value)} is not a number where the bound applies"
    for number in numbers:
        if bound.low is not None and number < bound.low:
            return f"{_number(number)} is below the minimum of {_number(bound.low)}"
        if bound.high is not None and number > bound.high:
            return f"{_number(number)} is above the maximum of {_number(bound.high)}"
    if bound.total is not None and sum(numbers) > bound.total:
        return f"the values add up to {_number(sum(numbers))}, above {_number(bound.total)}"
    return None


def _bound_values(state: SocialState, instance: ActionInstance, attribute: str) -> list[Any]:
    """``attribute``'s values bound by the instance itself, or in its scope or the
    scopes above it (those whose keys the instance binds to the same values)."""
    own = instance.bindings.get(attribute, ABSENT)
    if own is not ABSENT and attribute in instance.action.attributes:
        return [own]
    enactment = state.enactment(state.root_of(instance.bindings))
    if enactment is None:
        return []
    found = []
    for scope in enactment.scopes:
        if all(
            k in instance.bindings and _same(instance.bindings[k], v) for k, v in scope
        ):
            value = enactment.bindings(scope).get(attribute, ABSENT)
            if value is not ABSENT and value is not None:
                found.append(value)
    return found


def _is_root(root: tuple[Any, ...]) -> bool:
    """Whether ``root`` can name an enactment: the protocol's own test of keys."""
    return all(valid_key_value(v) for v in root)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _violation(
    clause: str,
    message: str,
    instance: ActionInstance,
    index: int,
    attribute: str | None = None,
    *,
    shown: str | None = None,
) -> Violation:
    """A refusal naming the clause broken, as the mandate writes it."""
    return Violation(
        RULE,
        f"mandate {shown or clause}: {message}",
        action=instance.action.name,
        attribute=attribute,
        index=index,
    )
