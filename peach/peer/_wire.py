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
MAX_BODY = 8 * 1024 * 1024
"""The largest request a peer reads (``_app`` answers 413 past it); a sender
packs its requests under it, and refuses an attempt whose message alone
would pass it (it could never be delivered)."""
MAX_INSTANCES = 1000
MAX_CONTEXT = 100_000
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class InstanceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: str = Field(min_length=1, max_length=200)
    bindings: dict[str, Any]


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    protocol: str = Field(min_length=1, max_length=200)
    seq: int = Field(ge=1)
    instances: list[InstanceIn] = Field(min_length=1, max_length=MAX_INSTANCES)
    context: list[Any] = Field(max_length=MAX_CONTEXT)


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


def _message(r: Record) -> str:
    instances, context = r.as_json()
    return (
        f'{{"protocol":{_ENCODE(r.protocol)},"seq":{r.seq:d},'
        f'"instances":{instances},"context":{context}}}'
    )


def envelope(mas: str, sender: str, records: Iterable[Record]) -> bytes:
    """The request carrying ``records``: the JSON ``json.dumps`` would write,
    put together from each record's JSON, encoded once (``Record.as_json``)."""
    return pack(mas, sender, records, limit=None)[0]


def pack(
    mas: str, sender: str, records: Iterable[Record], limit: int | None = MAX_BODY
) -> tuple[bytes, int]:
    """The request carrying as many of ``records`` as fit in ``limit`` bytes
    (at least the first), and how many it carries."""
    head = f'{{"mas":{_ENCODE(mas)},"sender":{_ENCODE(sender)},"messages":['
    size = len(head.encode()) + 2
    messages: list[str] = []
    for r in records:
        text = _message(r)
        cost = len(text.encode()) + (1 if messages else 0)
        if messages and limit is not None and size + cost > limit:
            break
        messages.append(text)
        size += cost
    return f"{head}{','.join(messages)}]}}".encode(), len(messages)


def too_large(mas: str, sender: str, record: Record) -> str | None:
    """Why ``record`` could never be delivered (a receiver refuses it whatever
    the moment: the request alone passes :data:`MAX_BODY`, or the message
    holds more instances or context than a peer reads), or None. The sender
    asks before it keeps an attempt: kept, it would be sent again forever."""
    if len(record.instances) > MAX_INSTANCES:
        return f"it holds {len(record.instances)} instances; a peer reads at most {MAX_INSTANCES}"
    if len(record.context) > MAX_CONTEXT:
        return (
            f"its enactment has {len(record.context)} instances a peer must be told of; "
            f"a message carries at most {MAX_CONTEXT}"
        )
    instances, context = record.as_json()
    if (len(instances) + len(context)) * 4 < MAX_BODY // 2:
        return None  # far under, however many bytes each character takes
    size = len(envelope(mas, sender, [record]))
    if size > MAX_BODY:
        return f"its message is {size} bytes; a peer reads at most {MAX_BODY}"
    return None


def flush(mas: str, sender: str) -> bytes:
    return json.dumps({"mas": mas, "sender": sender}, separators=(",", ":")).encode()


def error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
