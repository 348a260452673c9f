"""A protocol, or a run of one, as a neutral graph that a drawer lays out.

Two shapes, both plain immutable data so that the SVG (``_svg``) and the
Mermaid (``_mermaid``) renderings say the same thing:

* :class:`ProtocolGraph`: roles (lanes), actions (boxes, each at the depth of
  its longest chain of dependencies), their parameters marked (``key``,
  ``done`` for a dependency, ``out`` for what the performer may bind, ``in``
  for what it can only carry), the dependencies (arrows), the sub-scopes (a key
  set beyond the root keys) and the nono pairs and nogo edges;
* :class:`SequenceChart`: roles as lifelines and steps as arrows from the
  performer, each with its bindings, one step possibly marked as the one that
  breaks a rule, and a closing note (a stuck enactment, steps left out).

Nothing here draws: what a protocol means stays in the model, how it looks in
the drawers.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from langshaw.model import LangshawProtocol

#: The parameter kinds, in the words the diagrams use.
KINDS = ("key", "done", "out", "in")

#: How long a binding's value may be in a chart before it is cut (with "...").
VALUE_CHARS = 40

#: A nono group of more actions than this is drawn as a chain (each action
#: linked to the next, the group named in the legend), not as every pair: a
#: line of n names would otherwise draw n(n-1)/2 curves (800 names: 125 MB).
NONO_PAIRS = 6


@dataclass(frozen=True)
class Param:
    """One attribute of an action: its name (``?`` when optional) and kind."""

    name: str
    kind: str

    def __str__(self) -> str:
        return f"{self.name} {self.kind}"


@dataclass(frozen=True)
class ActionNode:
    """An action in its role's lane: ``depth`` is its row (0 for an action that
    depends on none), ``scope`` its keys (a sub-scope when ``sub``),
    ``completes`` whether a completion clause names it."""

    name: str
    role: str
    params: tuple[Param, ...]
    depth: int
    scope: tuple[str, ...]
    sub: bool
    completes: bool


@dataclass(frozen=True)
class ProtocolGraph:
    name: str
    roles: tuple[str, ...]
    keys: tuple[str, ...]
    root_keys: tuple[str, ...]
    completion: tuple[tuple[str, ...], ...]
    actions: tuple[ActionNode, ...]
    depends: tuple[tuple[str, str], ...]  # (dependency, dependent)
    nono: tuple[tuple[str, str], ...]  # every excluded pair (of a large group: a chain)
    nogo: tuple[tuple[str, str], ...]  # (A, B): once A occurred, B may not
    scopes: tuple[tuple[str, ...], ...]  # the sub-scopes, in first-use order
    nono_chains: tuple[tuple[str, ...], ...] = ()  # the groups over NONO_PAIRS, as chains
    chained: tuple[int, ...] = ()  # for each nono pair, its chain's number (from 1), or 0

    def chain_of(self, index: int) -> tuple[int, tuple[str, ...]] | None:
        """The large nono group whose chain the ``index``-th nono pair links
        (its number from 1, and its actions), or None for a pair drawn as itself."""
        n = self.chained[index] if index < len(self.chained) else 0
        return (n, self.nono_chains[n - 1]) if n else None

    def node(self, name: str) -> ActionNode:
        return next(a for a in self.actions if a.name == name)

    @property
    def subtitle(self) -> str:
        keys = ", ".join(k + (" (root)" if k in self.root_keys else "") for k in self.keys)
        goal = " and ".join(" or ".join(c) for c in self.completion) or "(none)"
        return f"keys: {keys}; complete when: {goal}"


def protocol_graph(protocol: LangshawProtocol) -> ProtocolGraph:
    """The protocol as a graph: everything a diagram shows, nothing it doesn't."""
    depths = _depths(protocol)
    completing = {name for clause in protocol.completion for name in clause}
    root = set(protocol.root_keys)
    nodes = []
    scopes: dict[tuple[str, ...], None] = {}
    for action in protocol.actions.values():
        params = tuple(_param(protocol, action.actor, action.keys, action.dependencies, a)
                       for a in action.attributes)
        sub = set(action.keys) != root
        if sub:
            scopes[action.keys] = None
        nodes.append(ActionNode(action.name, action.actor, params, depths[action.name],
                                action.keys, sub, action.name in completing))
    depends = tuple((d, a.name) for a in protocol.actions.values() for d in a.dependencies)
    chains: list[tuple[str, ...]] = []
    nono: list[tuple[str, str]] = []
    chained: list[int] = []
    for group in protocol.nono:
        if len(group) > NONO_PAIRS:
            chains.append(group)
            pairs = list(itertools.pairwise(group))
        else:
            pairs = list(itertools.combinations(group, 2))
        nono += pairs
        chained += [len(chains) if len(group) > NONO_PAIRS else 0] * len(pairs)
    return ProtocolGraph(protocol.name, protocol.roles, protocol.keys, protocol.root_keys,
                         protocol.completion, tuple(nodes), depends, tuple(nono),
                         tuple(protocol.nogo), tuple(scopes), tuple(chains), tuple(chained))


def _param(protocol: LangshawProtocol, actor: str, keys: tuple[str, ...],
           dependencies: tuple[str, ...], attribute: str) -> Param:
    optional = "?" if attribute in protocol.optional else ""
    if attribute in keys:
        kind = "key"
    elif attribute in dependencies:
        kind = "done"
    elif actor in protocol.sayso.get(attribute, ()):
        kind = "out"
    else:
        kind = "in"
    return Param(attribute + optional, kind)


def _depths(protocol: LangshawProtocol) -> dict[str, int]:
    """Each action's longest chain of dependencies (a cycle, which validation
    lets through as dead actions, is cut where it closes)."""
    # Depth first with a stack of our own, not recursion: a chain of a thousand
    # actions written upwards would otherwise exceed Python's recursion limit.
    depths: dict[str, int] = {}
    visiting: set[str] = set()
    for start in protocol.actions:
        if start in depths:
            continue
        visiting.add(start)
        stack = [(start, iter(protocol.actions[start].dependencies))]
        while stack:
            name, below = stack[-1]
            for d in below:
                if d in protocol.actions and d not in visiting and d not in depths:
                    visiting.add(d)
                    stack.append((d, iter(protocol.actions[d].dependencies)))
                    break
            else:
                stack.pop()
                visiting.discard(name)
                done = [depths[d] for d in protocol.actions[name].dependencies
                        if d in depths]
                depths[name] = 1 + max(done) if done else 0
    return depths


# Sequence charts ------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One step of a chart: ``role`` performs ``action``, drawn as an arrow to
    ``target`` (itself when nobody else follows up on it); ``label`` holds the
    bindings, ``note`` what to say beside it; ``broken`` marks the step that
    breaks a rule."""

    role: str
    action: str
    target: str
    label: str
    note: str = ""
    broken: bool = False


@dataclass(frozen=True)
class SequenceChart:
    title: str
    roles: tuple[str, ...]
    messages: tuple[Message, ...]
    ending: str = ""  # a closing note across the lifelines


def binding_text(name: str, value: Any) -> str:
    """``name=value`` as a chart shows it (a dependency's ``True``: the name
    alone), the value cut at VALUE_CHARS."""
    if value is True:
        return name
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    text = " ".join(text.split())
    if len(text) > VALUE_CHARS:
        text = text[: VALUE_CHARS - 3] + "..."
    return f"{name}={text}"


def chart(
    protocol: LangshawProtocol,
    title: str,
    steps: Iterable[tuple[str, str, Mapping[str, Any] | Iterable[tuple[str, Any]], str]],
    *,
    broken: int | None = None,
    broken_note: str = "",
    ending: str = "",
    limit: int | None = None,
) -> SequenceChart:
    """A chart of ``steps``, each ``(role, action, bindings, note)``. ``broken``
    (0-based) marks the step that breaks a rule, with ``broken_note``; at most
    ``limit`` steps are drawn, the ending saying how many were left out."""
    receivers = _receivers(protocol)
    messages: list[Message] = []
    left = 0
    for i, (role, action, bindings, note) in enumerate(steps):
        if limit is not None and len(messages) >= limit:
            left += 1
            continue
        pairs = bindings.items() if isinstance(bindings, Mapping) else bindings
        label = f"{action}({', '.join(binding_text(k, v) for k, v in pairs)})"
        others = [r for r in receivers.get(action, ()) if r != role]
        is_broken = broken is not None and i == broken
        if is_broken:
            note = f"{note}; {broken_note}" if note and broken_note else note or broken_note
        messages.append(Message(role, action, others[0] if others else role, label, note,
                                is_broken))
    if left:
        more = f"{left} more step(s) not shown"
        ending = f"{ending}; {more}" if ending else more
    roles = tuple(protocol.roles)
    extra = tuple(dict.fromkeys(m.role for m in messages if m.role not in roles))
    return SequenceChart(title, roles + extra, tuple(messages), ending)


def _receivers(protocol: LangshawProtocol) -> dict[str, tuple[str, ...]]:
    """For each action, the roles that perform an action depending on it, in
    role order: whom the arrow of a step points to."""
    found: dict[str, set[str]] = {}
    for action in protocol.actions.values():
        for dependency in action.dependencies:
            found.setdefault(dependency, set()).add(action.actor)
    return {name: tuple(r for r in protocol.roles if r in roles)
            for name, roles in found.items()}
