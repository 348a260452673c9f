"""What makes two texts of a protocol the same protocol: its meaning as
canonical data, a digest of it, and what differs between two.

Two texts mean the same protocol when they agree on everything the enactment
rules read: the roles, the keys, the goal, each action's performer and
attributes, sayso, nono, nogo, and each attribute's type (the schema itself,
with every file it refers to inlined, not where the file is). Comments, the
order of declarations, whitespace and the file's path do not count. A log
written under one meaning holds what that meaning allowed, and another may
forbid it (a ``nono`` added) or allow what the first forbade (one removed):
the SyncServer records the meaning with the log and refuses to serve the log
under another (``syncserver.server``).

The digests of bound values are another matter (``langshaw.fingerprint``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from langshaw.model import LangshawProtocol
from langshaw.types import AttributeType

__all__ = ["describe_changes", "meaning", "meaning_digest", "meaning_text"]


def meaning(protocol: LangshawProtocol) -> dict[str, Any]:
    """The protocol as canonical JSON data: equal for texts that mean the same."""
    return {
        "name": protocol.name,
        "roles": sorted(protocol.roles),
        "keys": list(protocol.keys),
        "root_keys": list(protocol.root_keys),
        "completion": sorted(sorted(clause) for clause in protocol.completion),
        "actions": {
            name: {"actor": action.actor, "attributes": sorted(action.attributes)}
            for name, action in sorted(protocol.actions.items())
        },
        "sayso": {attribute: list(roles) for attribute, roles in sorted(protocol.sayso.items())},
        "nono": sorted(sorted(group) for group in protocol.nono),
        "nogo": sorted([before, after] for before, after in protocol.nogo),
        "types": {name: _type(t) for name, t in sorted(protocol.types.items())},
    }


def meaning_text(protocol: LangshawProtocol) -> str:
    """:func:`meaning` as compact JSON text, keys sorted: what a log records."""
    return json.dumps(meaning(protocol), sort_keys=True, separators=(",", ":"))


def meaning_digest(text: str) -> str:
    """A SHA-256 digest (hex) of a meaning's text, the same in every process."""
    return hashlib.sha256(text.encode()).hexdigest()


def describe_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What changed from meaning ``before`` to meaning ``after``, one short
    phrase each (``nono Accept Reject removed``); empty if they are equal."""
    changes: list[str] = []
    for section in ("name", "roles", "keys", "root_keys", "completion", "nono", "nogo"):
        old, new = before.get(section), after.get(section)
        if old == new:
            continue
        if section in ("roles", "completion", "nono", "nogo"):
            gone = [item for item in old or [] if item not in (new or [])]
            came = [item for item in new or [] if item not in (old or [])]
            changes += [f"{_shown(section, item)} removed" for item in gone]
            changes += [f"{_shown(section, item)} added" for item in came]
        else:
            changes.append(f"{section.replace('_', ' ')} {_words(old)} became {_words(new)}")
    for section, label in (("actions", "action"), ("sayso", "sayso of"), ("types", "type of")):
        old_map, new_map = before.get(section) or {}, after.get(section) or {}
        for name in sorted(old_map.keys() | new_map.keys()):
            if name not in new_map:
                changes.append(f"{label} {name} removed")
            elif name not in old_map:
                changes.append(f"{label} {name} added")
            elif old_map[name] != new_map[name]:
                changes.append(_changed(section, label, name, old_map[name], new_map[name]))
    return changes


def _type(attribute: AttributeType) -> dict[str, Any]:
    schema = attribute.json_schema() if attribute.type is not None else {}
    return {"optional": attribute.optional, "schema": _portable(schema)}


def _portable(node: Any) -> Any:
    """A schema with each reference to a file (a circular one, left by inlining)
    made relative to nothing: the file's name, not where it is on this machine."""
    if isinstance(node, dict):
        return {
            k: v.rsplit("/", 1)[-1] if k == "$ref" and str(v).startswith("file:") else _portable(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_portable(v) for v in node]
    return node


def _words(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "(none)"
    return str(value)


def _shown(section: str, item: Any) -> str:
    """One item of a section that is a set (a role, a goal clause, a group)."""
    if section == "roles":
        return f"role {item}"
    if section == "completion":
        return f"goal clause {' or '.join(item)}"
    if section == "nono":
        return f"nono {' '.join(item)}"
    return f"nogo {item[0]} -/> {item[1]}"


def _changed(section: str, label: str, name: str, old: Any, new: Any) -> str:
    if section == "actions":
        parts = []
        if old.get("actor") != new.get("actor"):
            parts.append(f"performer {old.get('actor')} became {new.get('actor')}")
        gone = [a for a in old.get("attributes", []) if a not in new.get("attributes", [])]
        came = [a for a in new.get("attributes", []) if a not in old.get("attributes", [])]
        parts += [f"lost {a}" for a in gone] + [f"gained {a}" for a in came]
        return f"{label} {name} " + ", ".join(parts or ["changed"])
    if section == "sayso":
        return f"{label} {name} {' > '.join(old)} became {' > '.join(new)}"
    if old.get("optional") != new.get("optional"):
        return f"{name} became {'optional' if new.get('optional') else 'required'}"
    return f"{label} {name} changed"
