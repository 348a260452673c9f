"""FeasibleAction: an action the role may perform now, ready to be bound."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langshaw import ABSENT, Action, ActionInstance, Enablement, SocialState
from langshaw.values import json_fault, valid_key_value
from peach.errors import BindError


class FeasibleAction:
    """An enabled action in one scope.

    ``fixed`` holds the bindings the instance will carry whatever the agent does
    (keys, earlier bindings, dependencies), and ``absent`` the optional
    attributes it leaves absent because they were left absent before;
    ``to_bind`` the attributes the agent gives to :meth:`bind` (``optional``
    ones it may leave out); ``new_keys`` the keys of a new scope, which the
    adapter fills with fresh values unless the agent gives them.
    """

    __slots__ = ("_new_key", "_state", "enablement", "role")

    def __init__(
        self,
        enablement: Enablement,
        role: str,
        new_key: Callable[[], str],
        state: SocialState | None = None,
    ) -> None:
        self.enablement = enablement
        self.role = role
        self._new_key = new_key
        self._state = state  # whose protocol's types bind() checks values against

    @property
    def action(self) -> Action:
        return self.enablement.action

    @property
    def name(self) -> str:
        return self.enablement.action.name

    @property
    def keys(self) -> dict[str, Any]:
        return dict(self.enablement.keys)

    @property
    def new_keys(self) -> tuple[str, ...]:
        return self.enablement.new_keys

    @property
    def fixed(self) -> dict[str, Any]:
        return {k: v for k, v in self.enablement.fixed.items() if v is not ABSENT}

    @property
    def absent(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.enablement.fixed.items() if v is ABSENT)

    @property
    def optional(self) -> tuple[str, ...]:
        """The attributes of ``to_bind`` that :meth:`bind` may leave absent."""
        if self._state is None:
            return ()
        optional = self._state.protocol.optional
        return tuple(a for a in self.enablement.to_bind if a in optional)

    @property
    def to_bind(self) -> tuple[str, ...]:
        return self.enablement.to_bind

    @property
    def initiating(self) -> bool:
        return self.enablement.initiating

    def bind(self, **attributes: Any) -> ActionInstance:
        """The instance with ``attributes`` bound; raises BindError naming any
        attribute that is unknown, fixed, not this role's to bind, missing, not a
        JSON value, or not of its declared type (with where inside the value).
        An optional attribute left out is absent from the instance."""
        return self.bind_from(attributes)

    def bind_from(self, attributes: Mapping[str, Any]) -> ActionInstance:
        action = self.action
        fixed = self.enablement.fixed
        to_bind = self.enablement.to_bind
        new_keys = self.enablement.new_keys
        state = self._state
        for name, value in attributes.items():
            if name in to_bind or name in new_keys:
                if name in to_bind:
                    # One level down: the server checks the bindings whole, so a
                    # value is as deep as bind() sees it plus the bindings' object.
                    fault = json_fault(value, name, depth=1)
                    if fault:
                        raise BindError(f"{action.name}: {fault[1]}", name, path=fault[0])
                elif not valid_key_value(value):
                    raise BindError(
                        f"{action.name}: key {name!r} must be a string or an integer, "
                        f"not {value!r}",
                        name,
                    )
                if state is not None:
                    violation = state.type_violation(action.name, name, value)
                    if violation is not None:
                        raise BindError(
                            violation.message, name, path=violation.path, rule=violation.rule
                        )
                continue
            raise BindError(self._why_not(name, fixed), name)
        optional = state.protocol.optional if state is not None else frozenset()
        missing = [a for a in to_bind if a not in attributes and a not in optional]
        if missing:
            raise BindError(
                f"{action.name} needs {', '.join(repr(m) for m in missing)} bound "
                f"(it binds {', '.join(to_bind)})",
                missing[0],
                missing=True,
            )
        bindings = dict(fixed)
        for key in new_keys:
            bindings[key] = attributes[key] if key in attributes else self._new_key()
        for name in to_bind:
            if name in attributes:
                bindings[name] = attributes[name]
        return ActionInstance(
            action,
            {
                a: bindings[a]
                for a in action.attributes
                if a in bindings and bindings[a] is not ABSENT
            },
        )

    def _why_not(self, name: str, fixed: Mapping[str, Any]) -> str:
        action = self.action
        if name not in action.attributes:
            return (
                f"{name!r} is not an attribute of {action.name} "
                f"(attributes: {', '.join(action.attributes)})"
            )
        if name in action.dependencies:
            return (
                f"{name!r} records that {name} occurred: the adapter fills it in, "
                f"{action.name} cannot bind it"
            )
        if name in fixed and fixed[name] is ABSENT:
            return f"{name!r} was left absent here, so {action.name} leaves it absent too"
        if name in fixed:
            shown = repr(fixed[name])
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            return f"{name!r} is already bound to {shown} here and cannot be bound again"
        return f"{self.role} may not bind {name!r} in {action.name}"

    def __repr__(self) -> str:
        scope = ", ".join(f"{k}={v!r}" for k, v in self.enablement.keys.items())
        scope += "".join(f", {k}=<new>" if scope else f"{k}=<new>" for k in self.new_keys)
        return f"<FeasibleAction {self.name}({scope}) to bind: {', '.join(self.to_bind) or '-'}>"


def not_enabled(
    state: SocialState,
    role: str,
    action: Action,
    bindings: Mapping[str, Any],
    given: Mapping[str, Any],
    new_key: Callable[[], str],
) -> tuple[str, str | None]:
    """Why ``action`` is not enabled for ``role`` where ``given`` (its keys in
    ``bindings``) names: the message of build_action's BindError, and its rule."""
    optional = state.protocol.optional
    probe = {a: bindings.get(a) for a in action.attributes if a in bindings or a not in optional}
    for dependency in action.dependencies:
        probe[dependency] = True
    for key in action.keys:
        if key not in given:
            probe[key] = new_key()
    violation = state.violation(ActionInstance(action, probe), {role})
    where = ", ".join(f"{k}={v!r}" for k, v in given.items()) or "a new enactment"
    reason = f": {violation.message}" if violation else ""
    rule = violation.rule if violation else None
    return f"{action.name} is not enabled for {role} in {where}{reason}", rule
