"""The decentralized reading of the semantics: what a peer may accept.

With no shared state, each agent keeps the instances it performed or received,
and acts on those alone (the model ``langshaw.verify`` explores under
``semantics="decentralized"``). An agent that receives instances from a peer
asks two questions of them, both answered by :class:`SocialState`:

1. Could the sender have performed them, on what it says it knew (the
   ``context``: the instances of the same enactments it had when it acted)?
   This is what refuses a forged dependency, a value the sender had no right to
   bind, or an action of a role the sender does not play.
2. Do they agree with everything the receiver knows? Instances the sender did
   not know yet are concurrent with its act; a rule broken here (a nono, a nogo,
   one attribute bound to two values) is a conflict that only a shared state
   could have prevented: exactly what the verifier reports as unsafe.

Received instances may arrive in any order: a receiver waits until it holds the
whole context before asking either question (:func:`missing`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from typing import Any

from langshaw.instances import ActionInstance, Violation
from langshaw.model import LangshawProtocol
from langshaw.semantics import SocialState

Identity = tuple[str, tuple[Any, ...]]  # (action, its key values in declared order)


def identity(instance: ActionInstance) -> Identity:
    """What makes an instance one occurrence: an action happens at most once per
    binding of its keys. Two copies with one identity are one message twice."""
    action = instance.action
    return action.name, tuple(instance.bindings.get(k) for k in action.keys)


def root(protocol: LangshawProtocol, instance: ActionInstance) -> tuple[Any, ...]:
    return tuple(instance.bindings.get(k) for k in protocol.root_keys)


def missing(context: Iterable[Identity], known: Collection[Identity]) -> list[Identity]:
    """The part of ``context`` the receiver does not hold yet."""
    return [ident for ident in context if ident not in known]


def receivable(
    state: SocialState,
    instances: Sequence[ActionInstance],
    roles: Collection[str],
    context: Iterable[ActionInstance],
    *,
    context_is_state: bool = False,
) -> Violation | None:
    """May an agent whose state is ``state`` accept ``instances``, performed
    atomically by a peer playing ``roles`` that knew ``context`` when it acted?

    ``context_is_state`` says that ``context`` is exactly what ``state`` holds of
    the enactments concerned (the common, sequential case), so one check answers
    both questions. The violation's message says which question failed.
    """
    if not context_is_state:
        seen = SocialState(state.protocol)
        seen.apply(context)
        violation = seen.check(instances, roles)
        if violation is not None:
            return replace(
                violation,
                message=f"the sender could not have performed this on what it knew: "
                f"{violation.message}",
            )
    violation = state.check(instances, roles)
    if violation is None or context_is_state:
        return violation
    return replace(
        violation,
        message=f"conflicts with what this agent knows (concurrent actions): {violation.message}",
    )


def encode_identity(ident: Identity) -> list[Any]:
    """An identity as JSON: ``[action, [key values]]``."""
    return [ident[0], list(ident[1])]


def decode_identity(value: Any) -> Identity | None:
    """The identity a JSON value names, or None when it is not one."""
    if (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], list)
        and all(isinstance(v, str | int) and not isinstance(v, bool) for v in value[1])
    ):
        return value[0], tuple(value[1])
    return None
