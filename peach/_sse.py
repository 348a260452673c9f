"""Server-sent events, decoded from the bytes of an event stream as they arrive.

Follows the rules of the HTML specification for lines (ended by CRLF, LF or
CR), fields (``name: value``, a lone ``name``, ``:`` comments) and dispatch (on
a blank line, only if some ``data`` arrived), for the fields an event stream
of the SyncServer uses: ``event``, ``data`` and ``id``.
"""

from __future__ import annotations

from typing import NamedTuple


class Event(NamedTuple):
    event: str
    data: str
    id: str | None  # the last event id seen on the stream, this one's if it has one


class Decoder:
    """Feed it chunks in order; it returns the events they complete."""

    def __init__(self) -> None:
        self._buffer = b""
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        buffer = self._buffer + chunk
        tail = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):  # perhaps the first half of a CRLF
                buffer, tail = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *blocks, rest = buffer.split(b"\n\n")
        self._buffer = rest + tail
        events = []
        for block in blocks:
            event = self._event(block)
            if event is not None:
                events.append(event)
        return events

    def _event(self, block: bytes) -> Event | None:
        kind = "message"
        data: list[bytes] = []
        for line in block.split(b"\n"):
            if not line or line[0] == 58:  # blank, or a ":" comment
                continue
            name, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                data.append(value)
            elif name == b"event":
                kind = value.decode("utf-8", "replace")
            elif name == b"id" and b"\0" not in value:
                self._last_id = value.decode("utf-8", "replace")
        if not data:
            return None
        return Event(kind, b"\n".join(data).decode("utf-8", "replace"), self._last_id)
