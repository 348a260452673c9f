"""A remote A2A task's lifecycle, read as the A2ATask actions it makes.

:class:`~peach.a2a.remote.RemoteAgent` follows a task on a remote A2A agent and
enacts what it hears as the Agent's actions of protocols/a2a-task.lsh. What to
enact for one remote state is decided here, without I/O: from the state, its
status message and what the enactment already holds (:class:`Seen`). The
protocol decides whether each step may happen (the proxy attempts it and
reports a refusal); this module only says which steps a remote state stands for,
in the order the protocol's dependencies put them (a task the remote reports
``completed`` was submitted and worked on, so Submitted and Working come first
if they have not been said yet).

It also converts between A2A's protobuf messages and the JSON the enactment
holds (A2A's JSON binding: camelCase names, data parts as JSON).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers.proto_helpers import new_data_part
from a2a.types import Message, Role, TaskState, TaskStatus
from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.message import Message as Proto  # type: ignore[import-untyped]

from langshaw.values import whole_numbers

#: A2ATask's actions, by who performs them: what a protocol must have for the proxy.
CLIENT_ACTIONS = ("Send", "Reply", "Cancel")
AGENT_ACTIONS = ("Submitted", "Working", "InputRequired", "Resumed", "Completed",
                 "Failed", "Rejected", "Canceled")
TERMINAL = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
                      TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED})
ASKING = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})


class Misbehaved(Exception):
    """The remote agent said something that cannot be its task's (another task's
    id, artifacts past the bound, a number JSON has not): the task fails, saying this."""


@dataclass
class Seen:
    """What the enactment of one task holds already, as far as the mapping needs."""

    names: set[str] = field(default_factory=set)
    asked: set[str] = field(default_factory=set)  # turns of InputRequired
    replied: set[str] = field(default_factory=set)  # turns of Reply
    resumed: set[str] = field(default_factory=set)  # turns of Resumed

    @classmethod
    def of(cls, history: Iterable[tuple[int, Any, str]]) -> Seen:
        seen = cls()
        turns = {"InputRequired": seen.asked, "Reply": seen.replied, "Resumed": seen.resumed}
        for _, instance, _ in history:
            seen.names.add(instance.name)
            if instance.name in turns:
                turns[instance.name].add(instance.bindings["turn"])
        return seen


Step = tuple[str, dict[str, Any]]


def steps(state: int, task_id: str, status: TaskStatus, artifacts: list[Any],
          seen: Seen) -> list[Step]:
    """The A2ATask actions that the remote task's ``state`` stands for, given what
    the enactment holds (``seen``); [] when it says nothing new."""
    out: list[Step] = []
    if state == TaskState.TASK_STATE_REJECTED:
        return [("Rejected", {"rejection": as_json(status.message)})]
    if "Submitted" not in seen.names and state != TaskState.TASK_STATE_UNSPECIFIED:
        out.append(("Submitted", {"task_id": task_id}))
    if state == TaskState.TASK_STATE_FAILED:
        return [*out, ("Failed", {"error": as_json(status.message)})]
    if state == TaskState.TASK_STATE_CANCELED:
        return [*out, ("Canceled", {})]
    if state not in ASKING | {TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED}:
        return out  # submitted, or a state A2A may add later: nothing more to say
    turn = turn_of(task_id, status)
    if state in ASKING and turn in seen.asked:
        return out  # the question already asked (a stale report, or the same one again)
    if "Working" not in seen.names:
        out.append(("Working", {}))
    # The remote took the Client's replies: it went on (working, asking anew, done).
    out.extend(("Resumed", {"turn": t}) for t in sorted(seen.replied - seen.resumed))
    if state in ASKING:
        out.append(("InputRequired", {"turn": turn, "question": as_json(status.message)}))
    elif state == TaskState.TASK_STATE_COMPLETED:
        out.append(("Completed", {"artifacts": artifacts}))
    return out


def turn_of(task_id: str, status: TaskStatus) -> str:
    """An input-required round's turn: its question's messageId (A2ATask), or, for a
    question without one, the task and the status's time (the same on each report)."""
    if status.message.message_id:
        return str(status.message.message_id)
    return f"{task_id}@{status.timestamp.ToJsonString()}"


def settled(state: int, turn: str, seen: Seen) -> bool:
    """Whether the remote task waits for nothing but the Client (or is over): a
    terminal state, or a question the Client has not answered yet."""
    return state in TERMINAL or (state in ASKING and turn not in seen.replied)


def to_message(value: Any, message_id: str, context_id: str, task_id: str = "") -> Message:
    """The A2A message a Send's ``message`` (or a Reply's ``reply``) stands for: an
    object with ``parts`` is an A2A message in JSON (1.0's binding; 0.3's ``kind``
    and ``"role": "user"`` are read too), any other object one data part. Its
    messageId is ``message_id`` unless it has one; raises ValueError if it cannot be
    one."""
    if not isinstance(value, dict):
        raise ValueError(f"an A2A message is an object, not {type(value).__name__}")
    message = Message()
    if "parts" in value:
        data = dict(value)
        role = data.get("role")
        if isinstance(role, str) and role.lower() in ("user", "agent"):
            data["role"] = f"ROLE_{role.upper()}"
        try:
            json_format.ParseDict(data, message, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise ValueError(f"not an A2A message: {exc}") from None
    else:
        message.parts.append(new_data_part(value))
    if not message.message_id:
        message.message_id = message_id
    if message.role == Role.ROLE_UNSPECIFIED:
        message.role = Role.ROLE_USER
    message.context_id = context_id
    if task_id:
        message.task_id = task_id
    return message


def as_json(message: Proto) -> Any:
    """A protobuf message in A2A's JSON binding, whole numbers as integers ({} for
    none: a status without a message). Misbehaved for a number JSON cannot write
    (NaN, an infinity: protobuf's Value holds them, JSON has none)."""
    try:
        return integers(json_format.MessageToDict(message))
    except json_format.SerializeToJsonError as exc:
        raise Misbehaved(f"the remote agent sent what JSON cannot hold ({exc})") from None


integers = whole_numbers  # one definition: langshaw.values
