"""What the model reads: the system prompt, each decision's prompt, and the tools.

The system prompt is written once per agent: how Langshaw protocols work, the
roles the agent plays, those protocols only, the tools, the goal. Each decision's
prompt shows, per enactment, what happened and what the agent may do now, the
pending external events, the agent's notes, and the outcome of earlier calls.
Enabled actions are offered as tools whose input schema is exactly what the role
must bind, so the model's choice arrives as structured tool use, never as text
to parse. Secret values are replaced before anything is shown
(:mod:`peach.llm._redact`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langshaw import ActionInstance, LangshawProtocol
from peach.adapter import PeachAdapter
from peach.feasible import FeasibleAction
from peach.llm._redact import SECRET as SECRET
from peach.llm._redact import Redactor as Redactor

SEMANTICS = """\
You act through interaction protocols written in Langshaw. How they work:
- A protocol names roles, and actions each performed by one role. An action
  binds attributes: pieces of information such as an item or a price.
- An enactment is one run of a protocol (one purchase, one checkout), identified
  by its key attributes. Several enactments may run at once; they do not mix.
- An attribute bound in an enactment never changes: later actions carry the same
  value. Such values are shown as fixed; you never bind them again.
- An action may name other actions: it can only happen after them.
- Who may bind an attribute is fixed by the protocol (sayso).
- Actions in a 'nono' group exclude each other; 'A -/> B' means that once A has
  happened, B can no longer happen.
- An enactment is complete when its completion condition holds.
- You may only perform the actions enabled for you now: they are your tools. You
  give the attributes to bind; keys of new enactments are generated for you.
  Every attempt is checked against the protocol; a refused one comes back to you
  with the reason, and changes nothing.
"""

INSTRUCTIONS = """\
How to act:
- Decide what to do now, in this decision, and call the tools for it. You may
  call several tools at once (to start several enactments, say).
- Call `wait` when nothing should be done until something else happens, naming
  the actions of others you are waiting for. Call it together with your actions
  when, after them, you only need to act again once others have acted: you are
  then not asked again about what your own actions make possible. (You are always
  asked again when others' actions make something possible for you, or when an
  event arrives.)
- Call `done` when your goal is achieved.
- External events are requests from outside (your user, other systems). Each
  stays pending until you act on it (give its id as `for_event` to the action
  that handles it) or call `dismiss_event`.
- `memory` keeps notes across decisions; they are shown to you each time.
- Bind values that serve the goal; values are JSON (strings, numbers, objects,
  lists, true/false, null).
"""


def compact(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_protocol(adapter: PeachAdapter) -> str:
    protocol: LangshawProtocol = adapter.protocol
    lines = [
        f"Protocol {protocol.name}: you play {adapter.role}.",
        f"  Roles: {', '.join(protocol.roles)}. Keys: {', '.join(protocol.keys)}.",
        f"  Complete when: {' and '.join(' or '.join(c) for c in protocol.completion)}.",
        "  Actions (performer: Name(attributes)):",
    ]
    for action in protocol.actions.values():
        doc = f" -- {action.doc}" if action.doc else ""
        mine = "  [yours]" if action.actor == adapter.role else ""
        lines.append(
            f"    {action.actor}: {action.name}({', '.join(action.attributes)}){mine}{doc}"
        )
    owners: dict[tuple[str, ...], list[str]] = {}
    for attribute, roles in protocol.sayso.items():
        owners.setdefault(roles, []).append(attribute)
    lines.append(
        "  Who binds what (sayso): "
        + "; ".join(f"{' > '.join(roles)}: {', '.join(attrs)}" for roles, attrs in owners.items())
    )
    if protocol.nono:
        lines.append(
            "  Mutually exclusive (nono): " + "; ".join(" / ".join(g) for g in protocol.nono)
        )
    if protocol.nogo:
        lines.append(
            "  Once the first happened, the second cannot (nogo): "
            + "; ".join(f"{a} -/> {b}" for a, b in protocol.nogo)
        )
    return "\n".join(lines)


def system_prompt(
    name: str,
    goal: str,
    adapters: Sequence[PeachAdapter],
    local_tools: Sequence[Any],
) -> str:
    roles = ", ".join(f"{a.role} in {a.protocol.name}" for a in adapters)
    parts = [
        f"You are {name}, an autonomous agent. You play: {roles}.",
        f"Your user's goal:\n{goal.strip()}",
        SEMANTICS,
        "The protocols you play:\n" + "\n\n".join(render_protocol(a) for a in adapters),
        INSTRUCTIONS,
    ]
    specs = [render_spec(a) for a in adapters if a.spec is not None]
    if specs:
        parts.append("How you play your roles:\n" + "\n\n".join(specs))
    if local_tools:
        parts.append(
            "Local tools you may call (their results come back to you at once):\n"
            + "\n".join(f"- {t.name}: {t.description}" for t in local_tools)
        )
    return "\n\n".join(parts)


def render_spec(adapter: PeachAdapter) -> str:
    """A role's spec in words. Its constraints are enforced in code whatever the
    model does; saying them spares refused attempts and tells the model why."""
    spec = adapter.spec
    assert spec is not None
    lines = [f"As {adapter.role} in {adapter.protocol.name}:"]
    if spec.goal:
        lines.append(f"- goal: {spec.goal}")
    if spec.domain:
        lines.append(f"- domain: {spec.domain}")
    for duty in spec.responsibilities:
        about = f": {duty.description}" if duty.description else ""
        actions = f" (actions {', '.join(duty.actions)})" if duty.actions else ""
        lines.append(f"- responsibility {duty.name}{about}{actions}")
        lines.extend(f"  - never: {c.description} [{c.name}]" for c in duty.must_never)
        lines.extend(f"  - always: {c.description} [{c.name}]" for c in duty.must_always)
    coded = sorted(n for n, a in spec.actions.items() if a.run is not None)
    if coded:
        lines.append(f"- performed by code, not by you: {', '.join(coded)}")
    return "\n".join(lines)


@dataclass
class Offer:
    """One enabled action offered to the model as a tool."""

    tool: str
    adapter: PeachAdapter
    feasible: FeasibleAction
    label: str  # the enactment's label, or "new"
    asks: tuple[str, ...]  # what the model binds (the rest is fixed or from hooks)

    def spec(self, redactor: Redactor, has_events: bool) -> dict[str, Any]:
        fa = self.feasible
        types = self.adapter.protocol.types
        properties: dict[str, Any] = {}
        for attribute in self.asks:
            kind = types.get(attribute)
            schema = kind.json_schema() if kind is not None else {}
            described = schema.get("description") or schema.get("title")
            optional = (
                " Optional: leave it out to leave it absent." if kind and kind.optional else ""
            )
            schema["description"] = (
                f"{attribute} (attribute of {fa.name})"
                + (f": {described}" if described else "")
                + optional
            )
            properties[attribute] = schema
        if has_events:
            properties["for_event"] = {
                "type": "string",
                "description": "id of the external event this action handles, if any",
            }
        where = "a new enactment" if self.label == "new" else f"enactment {self.label}"
        fixed = {k: v for k, v in fa.fixed.items() if k not in fa.action.dependencies}
        shown = f" Fixed: {compact(redactor.bindings(fixed), 200)}." if fixed else ""
        doc = f" {fa.action.doc}" if fa.action.doc else ""
        return {
            "name": self.tool,
            "description": (
                f"{fa.name} ({self.adapter.protocol.name}, as {self.adapter.role}) "
                f"in {where}.{doc}{shown}"
            )[:1000],
            "input_schema": {
                "type": "object",
                "properties": properties,
                "required": [a for a in self.asks if a not in self.adapter.protocol.optional],
                "additionalProperties": False,
            },
        }


BUILTIN_TOOLS: list[dict[str, Any]] = [
    {
        "name": "wait",
        "description": "Nothing (more) to do now. Name the actions of others you are waiting "
        "for: you decide again when one of them happens (and whenever others make something "
        "possible for you, or an event arrives).",
        "input_schema": {
            "type": "object",
            "properties": {
                "for_actions": {"type": "array", "items": {"type": "string"}},
                "reason": {"type": "string"},
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "done",
        "description": "Your goal is achieved: stop.",
        "input_schema": {
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "additionalProperties": False,
        },
    },
    {
        "name": "memory",
        "description": "Save a note (op=save, key, value), delete one (op=delete, key), or list "
        "them (op=recall). Notes are shown to you in every decision.",
        "input_schema": {
            "type": "object",
            "properties": {
                "op": {"type": "string", "enum": ["save", "delete", "recall"]},
                "key": {"type": "string"},
                "value": {},
            },
            "required": ["op"],
            "additionalProperties": False,
        },
    },
]

DISMISS_TOOL = {
    "name": "dismiss_event",
    "description": "Mark an external event as handled, or as not to be acted on.",
    "input_schema": {
        "type": "object",
        "properties": {"event_id": {"type": "string"}, "reason": {"type": "string"}},
        "required": ["event_id"],
        "additionalProperties": False,
    },
}


@dataclass
class Event:
    id: str
    content: Any


def user_prompt(
    *,
    number: int,
    reasons: Sequence[str],
    enactments: Sequence[tuple[str, PeachAdapter, tuple[Any, ...]]],
    offers: Sequence[Offer],
    events: Sequence[Event],
    notes: Mapping[str, Any],
    outcomes: Sequence[str],
    redactor: Redactor,
    me: set[str],
    limit: int = 12_000,
    history_limit: int = 20,
) -> str:
    """The prompt of one decision, at most ``limit`` characters: beyond that, the
    oldest complete enactments are summarized in one line, then the oldest
    history entries are dropped, then the middle is cut. What the agent may do
    now comes last and is kept whole."""
    head = [f"Decision {number}. Why now: {'; '.join(reasons) or 'start'}."]
    if events:
        head.append("Pending external events:")
        head.extend(f"  [{e.id}] {compact(e.content, 600)}" for e in events)
    else:
        head.append("No pending external events.")
    if notes:
        head.append("Your notes:")
        head.extend(f"  {k}: {compact(v, 300)}" for k, v in notes.items())
    if outcomes:
        head.append("Outcome of your last tool calls:")
        head.extend(f"  - {o}" for o in outcomes[-10:])

    by_label: dict[str, list[Offer]] = {}
    for offer in offers:
        by_label.setdefault(offer.label, []).append(offer)

    def section(label: str, adapter: PeachAdapter, root: tuple[Any, ...], full: bool) -> list[str]:
        keys = adapter.keys_of(root)
        state = "complete" if adapter.is_complete(root) else "in progress"
        title = (
            f"== {label}: {adapter.protocol.name} (you: {adapter.role}), "
            f"{' '.join(f'{k}={v}' for k, v in keys.items())} [{state}]"
        )
        history = adapter.history(root)
        if not full:
            last = history[-1][1].name if history else "nothing"
            return [f"{title}: {len(history)} actions, last {last}"]
        lines = [title, "  history:"]
        shown = history[-history_limit:]
        if len(history) > len(shown):
            lines.append(f"    ({len(history) - len(shown)} earlier actions not shown)")
        for _, instance, performer in shown:
            who = "you" if performer in me else performer
            bound = {
                k: v
                for k, v in instance.bindings.items()
                if k not in instance.action.dependencies and k not in keys
            }
            lines.append(f"    {instance.name} by {who}: {compact(redactor.bindings(bound))}")
        return lines

    def build(full_for: set[str]) -> str:
        body = list(head)
        body.append(
            "Enactments you are in or may join:" if enactments else "You are in no enactment yet."
        )
        for label, adapter, root in enactments:
            body.extend(section(label, adapter, root, label in full_for))
        return "\n".join(body)

    # What the agent may do now comes last and is never cut.
    tail = ["What you may do now (your tools):"] if offers else ["Nothing is enabled for you now."]
    for label, group in by_label.items():
        where = "new enactment" if label == "new" else label
        tail.append(
            f"  {where}: "
            + "; ".join(f"{o.tool} (binds {', '.join(o.asks) or 'nothing'})" for o in group)
        )
    tail.append(
        "Decide now: call the tools for what you do (wait if nothing, done if the "
        "goal is achieved)."
    )
    ending = "\n" + "\n".join(tail)

    room = limit - len(ending)
    full = {label for label, _, _ in enactments}
    text = build(full)
    for label, adapter, root in enactments:  # oldest first: summarize complete ones
        if len(text) <= room:
            break
        if adapter.is_complete(root) and label not in by_label:
            full.discard(label)
            text = build(full)
    while len(text) > room and history_limit > 2:
        history_limit //= 2
        text = build(full)
    if len(text) > room:  # still too long: cut the middle, keep what to do now
        cut = "\n(... more not shown, to keep this prompt short ...)"
        text = text[: max(0, room - len(cut))] + cut
    return (text + ending)[:limit]


def tool_base(adapter: PeachAdapter, action: str, several_protocols: bool) -> str:
    """The tool name of an action before numbering (``tool_names`` adds ``_N``
    when an action is offered more than once)."""
    return (f"{adapter.protocol.name}_{action}" if several_protocols else action)[:56]


def tool_names(
    offers: Iterable[tuple[PeachAdapter, FeasibleAction]], several_protocols: bool
) -> list[str]:
    """Deterministic, unique tool names: the action's name, prefixed with the
    protocol when the agent plays several, numbered when offered more than once."""
    bases = [tool_base(adapter, fa.name, several_protocols) for adapter, fa in offers]
    counts: dict[str, int] = {}
    for base in bases:
        counts[base] = counts.get(base, 0) + 1
    seen: dict[str, int] = {}
    names = []
    for base in bases:
        if counts[base] == 1:
            names.append(base)
        else:
            seen[base] = seen.get(base, 0) + 1
            names.append(f"{base}_{seen[base]}")
    return names


def describe_instance(instance: ActionInstance, redactor: Redactor) -> str:
    shown = {k: v for k, v in instance.bindings.items() if k not in instance.action.dependencies}
    return f"{instance.name} {compact(redactor.bindings(shown), 200)}"
