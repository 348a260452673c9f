"""What peers send each other, as pydantic models, and how answers are spelled.

A request carries messages, each the instances one agent performed atomically,
numbered by the sender (``seq``, its local sequence in that protocol), with the
``context``: the identities of the instances of the same enactments the sender
knew when it acted. The answer has one result per message, in order.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from langshaw.values import json_problem
from peach.peer._store import Record

# What receives a request: (path, headers, body) -> (status, JSON answer).
Endpoint = Callable[[str, Mapping[str, str], bytes], Awaitable[tuple[int, dict[str, Any]]]]

# Result statuses: kept (or already had), waiting for its context, refused, or
# not looked at now (too many waiting): the sender sends it again later.
ACCEPTED, DUPLICATE, PENDING, REFUSED, BUSY = "accepted", "duplicate", "pending", "refused", "busy"
DONE = frozenset({ACCEPTED, DUPLICATE, REFUSED})
MAX_MESSAGES = 200
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class InstanceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: str = Field(min_length=1, max_length=200)
    bindings: dict[str, Any]


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    protocol: str = Field(min_length=1, max_length=200)
    seq: int = Field(ge=1)
    instances: list[InstanceIn] = Field(min_length=1, max_length=1000)
    context: list[Any] = Field(max_length=100_000)


class EnvelopeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mas: str
    sender: str
    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)


class FlushIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mas: str
    sender: str


def not_json(bindings: Iterable[Mapping[str, Any]]) -> str | None:
    """Where and why instances with these bindings are no JSON (a NaN, an
    infinity, 1e400 read as one), so cannot travel or be kept, with the place
    the SyncServer's ``bad-json`` names (``instances[0].bindings.price is nan,
    not a JSON number``); None if they are JSON. The sender asks before it
    keeps an attempt, the receiver before it looks further: one check,
    ``langshaw.values.json_problem``, as the SyncServer's."""
    for index, each in enumerate(bindings):
        problem = json_problem(each, f"instances[{index}].bindings")
        if problem is not None:
            return problem
    return None


def envelope(mas: str, sender: str, records: Iterable[Record]) -> bytes:
    """The request carrying ``records``: the JSON ``json.dumps`` would write,
    put together from each record's JSON, encoded once (``Record.as_json``)."""
    dump = _ENCODE
    messages = []
    for r in records:
        instances, context = r.as_json()
        messages.append(
            f'{{"protocol":{dump(r.protocol)},"seq":{r.seq:d},'
            f'"instances":{instances},"context":{context}}}'
        )
    head = f'{{"mas":{dump(mas)},"sender":{dump(sender)},"messages":['
    return f"{head}{','.join(messages)}]}}".encode()


def flush(mas: str, sender: str) -> bytes:
    return json.dumps({"mas": mas, "sender": sender}, separators=(",", ":")).encode()


def error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
