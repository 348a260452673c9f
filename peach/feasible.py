"""FeasibleAction: an action the role may perform now, ready to be bound."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langshaw import Action, ActionInstance, Enablement
from langshaw.values import json_problem, valid_key_value
from peach.errors import BindError


class FeasibleAction:
    """An enabled action in one scope.

    ``fixed`` holds the bindings the instance will carry whatever the agent does
    (keys, earlier bindings, dependencies); ``to_bind`` the attributes the agent
    must give to :meth:`bind`; ``new_keys`` the keys of a new scope, which the
    adapter fills with fresh values unless the agent gives them.
    """

    __slots__ = ("_new_key", "enablement", "role")

    def __init__(self, enablement: Enablement, role: str, new_key: Callable[[], str]) -> None:
        self.enablement = enablement
        self.role = role
        self._new_key = new_key

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
        return dict(self.enablement.fixed)

    @property
    def to_bind(self) -> tuple[str, ...]:
        return self.enablement.to_bind

    @property
    def initiating(self) -> bool:
        return self.enablement.initiating

    def bind(self, **attributes: Any) -> ActionInstance:
        """The instance with ``attributes`` bound; raises BindError naming any
        attribute that is unknown, fixed, not this role's to bind, missing, or not
        a JSON value."""
        return self.bind_from(attributes)

    def bind_from(self, attributes: Mapping[str, Any]) -> ActionInstance:
        action = self.action
        fixed = self.enablement.fixed
        to_bind = self.enablement.to_bind
        new_keys = self.enablement.new_keys
        for name, value in attributes.items():
            if name in to_bind:
                problem = json_problem(value, name)
                if problem:
                    raise BindError(f"{action.name}: {problem}", name)
                continue
            if name in new_keys:
                if not valid_key_value(value):
                    raise BindError(
                        f"{action.name}: key {name!r} must be a string or an integer, "
                        f"not {value!r}",
                        name,
                    )
                continue
            raise BindError(self._why_not(name, fixed), name)
        missing = [a for a in to_bind if a not in attributes]
        if missing:
            raise BindError(
                f"{action.name} needs {', '.join(repr(m) for m in missing)} bound "
                f"(it binds {', '.join(to_bind)})",
                missing[0],
            )
        bindings = dict(fixed)
        for key in new_keys:
            bindings[key] = attributes[key] if key in attributes else self._new_key()
        for name in to_bind:
            bindings[name] = attributes[name]
        return ActionInstance(action, {a: bindings[a] for a in action.attributes})

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
        if name in fixed:
            shown = repr(fixed[name])
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            return f"{name!r} is already bound to {shown} here and cannot be bound again"
        return f"{self.role} may not bind {name!r} in {action.name}"

    def __repr__(self) -> str:
        scope = ", ".join(f"{k}={v!r}" for k, v in self.enablement.keys.items())
        scope += "".join(f", {k}=<new>" if scope else f"{k}=<new>" for k in self.new_keys)
        return f"<FeasibleAction {self.name}({scope}) to bind: {', '.join(self.to_bind) or '-'}>"
