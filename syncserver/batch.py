"""Finalized batches: what the log records and what subscribers receive.

A batch is a group of instances finalized together under one sequence number:
one attempt under instant finalization, the accepted attempts of a window
under batched finalization (several batches if they are large:
``syncserver._window``). Its JSON and server-sent-event encodings are
computed once, however many subscribers receive it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from langshaw import ActionInstance


class Entry:
    """One finalized instance and the agent that performed it. Read-only by
    convention (a plain slotted class: built for every finalized action)."""

    __slots__ = ("_json", "attempt_id", "instance", "performer")

    def __init__(
        self, instance: ActionInstance, performer: str, attempt_id: str | None = None
    ) -> None:
        self.instance = instance
        self.performer = performer
        self.attempt_id = attempt_id
        self._json: str | None = None

    @property
    def bindings_json(self) -> str:
        """The bindings as compact JSON text, encoded once for both the log's row
        and the batch's event frame (the largest part of either); the frame,
        built after the row is written, lets it go (:attr:`Batch.sse_frame`)."""
        if self._json is None:
            self._json = json.dumps(self.instance.bindings, separators=(",", ":"))
        return self._json

    def frame_size(self) -> int:
        """This entry's bytes in its batch's event frame, estimated from its
        bindings' JSON (:meth:`Batch.frame_size`); what a window's batches are
        bounded by (``syncserver._window``)."""
        return (
            len(self.bindings_json)
            + _quoted(self.instance.action.name)
            + _quoted(self.performer)
            + 48
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.instance.action.name,
            "bindings": dict(self.instance.bindings),
            "performer": self.performer,
        }

    def __repr__(self) -> str:
        return f"Entry({self.instance!r} by {self.performer!r})"


class Batch:
    """Instances finalized together under one sequence number. Read-only by convention."""

    __slots__ = ("_frame", "entries", "protocol", "seq")

    def __init__(self, protocol: str, seq: int, entries: tuple[Entry, ...]) -> None:
        self.protocol = protocol
        self.seq = seq
        self.entries = entries
        self._frame: bytes | None = None

    def only(self, keep: Callable[[Entry], bool]) -> Batch:
        """This batch restricted to some of its entries."""
        return Batch(self.protocol, self.seq, tuple(e for e in self.entries if keep(e)))

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "protocol": self.protocol,
            "instances": [e.to_json() for e in self.entries],
        }

    def frame_size(self) -> int:
        """The bytes of :attr:`sse_frame`, made or not: what the log's tail
        measures a batch by without making the frame for it. Not made, it is
        estimated from the bindings' JSON (which the log's row made anyway)
        and the names around it, within a few bytes of the frame."""
        if self._frame is not None:
            return len(self._frame)
        return 64 + len(str(self.seq)) * 2 + _quoted(self.protocol) + sum(
            e.frame_size() for e in self.entries
        )

    @property
    def sse_frame(self) -> bytes:
        """The batch as one server-sent event, with its seq as the event id.

        Built once and shared by every subscriber: a thousand streams of one
        batch hold one copy of it, and its length is what a subscriber's backlog
        is measured in."""
        if self._frame is None:
            texts = [e.bindings_json for e in self.entries]
            if any("NaN" in t or "Infinity" in t for t in texts):
                # Perhaps not JSON (a NaN, an infinity): encoded strictly, which
                # refuses them rather than send what no client can read.
                data = json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False)
            else:
                instances = ",".join(
                    f'{{"action":{_text(e.instance.action.name)},"bindings":{t},'
                    f'"performer":{_text(e.performer)}}}'
                    for e, t in zip(self.entries, texts, strict=True)
                )
                data = (
                    f'{{"seq":{self.seq},"protocol":{_text(self.protocol)},'
                    f'"instances":[{instances}]}}'
                )
            self._frame = b"id: %d\nevent: batch\ndata: %s\n\n" % (self.seq, data.encode())
            for entry in self.entries:
                # The frame holds the text now: a batch kept for streams (the log's
                # tail, pages shared by readers) would otherwise hold it twice.
                entry._json = None
        return self._frame

    def __repr__(self) -> str:
        return f"Batch({self.protocol} #{self.seq}: {list(self.entries)!r})"


def _text(value: str) -> str:
    return json.dumps(value)


def _quoted(value: str) -> int:
    """The length of ``value`` as a JSON string (without encoding the usual one)."""
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return len(value) + 2
    return len(_text(value))
