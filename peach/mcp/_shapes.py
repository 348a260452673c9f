"""What a role server shows its MCP client: tool definitions and answers as JSON.

The schemas come from the protocol's attribute types (``AttributeType.json_schema``)
and, for what is enabled in one enactment, from the very tool specs an
:class:`~peach.llm.LLMAgent` offers its model (:class:`peach.llm.prompting.Offer`),
so an MCP client and an LLM agent are asked for the same thing. Nothing here
decides what is enabled: the adapter's ``enabled()`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langshaw import Action, ActionInstance
from peach.adapter import PeachAdapter
from peach.feasible import FeasibleAction
from peach.llm.prompting import Offer, Redactor, render_protocol

BUILTINS = ("enactments", "history", "wait_event")
KEY_SCHEMA: dict[str, Any] = {"type": ["string", "integer"]}


def attributes_of(adapter: PeachAdapter, action: Action, provided: Iterable[str]) -> list[str]:
    """The attributes the role may be asked to bind in ``action``: those the
    protocol gives it a say over (sayso), keys and dependencies aside, less what
    hooks provide. Which of them it must bind in one enactment is the adapter's
    ``to_bind`` there; some may be fixed already."""
    sayso = adapter.protocol.sayso
    skipped = {*action.keys, *action.dependencies, *provided}
    return [
        a for a in action.attributes if a not in skipped and adapter.role in sayso.get(a, ())
    ]


def action_tool(
    adapter: PeachAdapter, action: Action, provided: Iterable[str], initiating: bool
) -> dict[str, Any]:
    """The MCP tool of one action of the role: its keys and the attributes the
    role may bind, each typed from the protocol."""
    protocol = adapter.protocol
    properties: dict[str, Any] = {}
    for key in action.keys:
        kind = protocol.types.get(key)
        schema = kind.json_schema() if kind is not None and kind.type else dict(KEY_SCHEMA)
        if key in protocol.root_keys and not initiating:
            schema["description"] = f"key of the enactment to act in ({key})"
        else:
            schema["description"] = (
                f"key {key}: give it to act in that scope; leave it out and a fresh "
                "one is generated"
            )
        properties[key] = schema
    to_bind = attributes_of(adapter, action, provided)
    for attribute in to_bind:
        kind = protocol.types.get(attribute)
        schema = kind.json_schema() if kind is not None else {}
        described = schema.get("description") or schema.get("title")
        schema["description"] = (
            f"{attribute} (attribute of {action.name})"
            + (f": {described}" if described else "")
            + (" Optional: leave it out to leave it absent." if kind and kind.optional else "")
        )
        properties[attribute] = schema
    if initiating:
        required = [a for a in to_bind if a not in protocol.optional]
        where = (
            f"Starts a new enactment of {protocol.name}; its keys "
            f"({', '.join(protocol.root_keys)}) are generated."
        )
    else:
        required = [k for k in action.keys if k in protocol.root_keys]
        after = (
            f" Possible only after {', '.join(action.dependencies)}."
            if action.dependencies
            else ""
        )
        where = (
            f"Acts in an enactment: give its {', '.join(protocol.root_keys)}.{after} "
            "Give the attributes the role must bind there (leave out those already "
            "fixed)."
        )
    doc = f" {action.doc}" if action.doc else ""
    return {
        "name": action.name,
        "description": (
            f"{action.name} ({protocol.name}, as {adapter.role}).{doc} {where} Call "
            "`enactments` or `history` to see where it is enabled now and exactly what "
            "it binds there; a call where it is not enabled is refused, naming the rule."
        ),
        "input_schema": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    }


def builtin_tools(adapter: PeachAdapter) -> list[dict[str, Any]]:
    """``enactments``, ``history`` and ``wait_event``."""
    protocol = adapter.protocol
    keys = {
        k: {
            **(protocol.types[k].json_schema() if k in protocol.types and protocol.types[k].type
               else KEY_SCHEMA),
            "description": f"the enactment's {k}",
        }
        for k in protocol.root_keys
    }
    return [
        {
            "name": "enactments",
            "description": (
                f"The enactments of {protocol.name} ({adapter.role} sees them all), most "
                "recent last: their keys, whether complete, what happened last, and "
                "what you may do in each now (the tool to call, the keys to give it and "
                "the schema of what it binds there); then the actions that start a new "
                "enactment."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    "complete": {
                        "type": "boolean",
                        "description": "include complete enactments too (default false)",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "at most this many, the most recent (default 20)",
                    },
                },
                "additionalProperties": False,
            },
        },
        {
            "name": "history",
            "description": (
                "One enactment: every action finalized in it (sequence number, action, "
                "who, bindings), whether it is complete, and what you may do in it now."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    **keys,
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "only the last this many actions (default 50)",
                    },
                },
                "required": list(protocol.root_keys),
                "additionalProperties": False,
            },
        },
        {
            "name": "wait_event",
            "description": (
                "Wait for what happens next: actions finalized (by anyone), actions "
                "newly enabled for you, enactments completed. Returns the events after "
                "sequence number `after` (default: now), at once if there are some, else "
                "when the next arrives or after `timeout` seconds. Pass the `last` it "
                "returns as the next `after` to miss nothing."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    "after": {
                        "type": "integer",
                        "description": "a sequence number: an action's `seq` (to hear what came "
                        "after it), a `seq` from history, or a previous `last`",
                    },
                    "timeout": {
                        "type": "number",
                        "minimum": 0,
                        "description": "seconds to wait at most (default 30)",
                    },
                },
                "additionalProperties": False,
            },
        },
    ]


def enabled_entry(
    adapter: PeachAdapter, feasible: FeasibleAction, provided: set[str], redactor: Redactor
) -> dict[str, Any]:
    """One enabled action, as an LLM agent's model would be offered it: its tool,
    the keys to give, and exactly what it binds there (typed)."""
    label = (
        "new"
        if feasible.initiating
        else " ".join(f"{k}={v}" for k, v in feasible.keys.items())
    )
    asks = tuple(a for a in feasible.to_bind if a not in provided)
    spec = Offer(feasible.name, adapter, feasible, label, asks).spec(redactor, False)
    return {
        "tool": feasible.name,
        "keys": feasible.keys,
        "input_schema": spec["input_schema"],
        "description": spec["description"],
    }


def shown(instance: ActionInstance, redactor: Redactor) -> dict[str, Any]:
    """An instance's bindings as shown to the client: dependencies left out (they
    are ``true``), secrets replaced."""
    return redactor.bindings(
        {k: v for k, v in instance.bindings.items() if k not in instance.action.dependencies}
    )


def instructions(adapter: PeachAdapter, name: str) -> str:
    """The server's instructions to its client: the protocol, and how to act."""
    return (
        f"You act as {name}, playing {adapter.role} in the Langshaw protocol "
        f"{adapter.protocol.name}. Each action of yours is a tool; every call is checked "
        "against the protocol and a refused one changes nothing (the error names the "
        "rule). Call `enactments` to see what you may do now and with which arguments, "
        "`history` for one enactment, and `wait_event` to wait for others to act.\n\n"
        + render_protocol(adapter)
    )
