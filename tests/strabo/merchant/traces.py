"""Reading the recorded UCP wire traces (``tests/fixtures/ucp/*.md``).

Each trace file is a list of cases, one ``## N. [section] title`` heading each, then
``**Request** `METHOD URL` `` with a header block and an optional body block, then
``**Response** `STATUS` `` with a header block and a body block. One pseudo-case,
``**Request** `- -` ``, lists the webhook events the recording agent received; its
"status" is their number.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ucp"
TRACE_FILES = ("merchant-2026-01-11-traces.md", "merchant-2026-01-11-traces-extra.md")
RECORDED_BASE = "http://127.0.0.1:8182"
"""Where the reference merchant listened when the traces were recorded."""

_HEADING = re.compile(r"^## (\d+)\. \[([^\]]+)\] (.*)$")
_REQUEST = re.compile(r"^\*\*Request\*\* `([^ `]+) ([^`]+)`$")
_RESPONSE = re.compile(r"^\*\*Response\*\* `(\d+)`$")
_INDEX_ROW = re.compile(r"^\| (\d+) \| [^|]+ \| [^|]+ \| (\d+) \|$")


@dataclass
class TraceCase:
    """One recorded request and the reference merchant's response."""

    number: int
    section: str
    title: str
    method: str
    url: str
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    request_body: str | None = None
    status: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: str | None = None

    @property
    def label(self) -> str:
        """``#N [section] title``, for messages."""
        return f"#{self.number} [{self.section}] {self.title}"

    @property
    def is_webhook_log(self) -> bool:
        """Whether this is the pseudo-case listing received webhook events."""
        return self.method == "-"

    @property
    def path(self) -> str:
        """The request URL relative to the recorded server."""
        return self.url.removeprefix(RECORDED_BASE)

    def response_json(self) -> Any:
        """The response body parsed as JSON (None when there is no body)."""
        if self.response_body is None:
            return None
        return json.loads(self.response_body)

    @property
    def response_is_json(self) -> bool:
        """Whether the recorded response was JSON (the 500 is plain text)."""
        return self.response_headers.get("content-type", "").startswith("application/json") or (
            self.is_webhook_log
        )


def _blocks(lines: list[str]) -> list[tuple[int, str]]:
    """Fenced blocks as (line index of the opening fence, text)."""
    blocks, index = [], 0
    while index < len(lines):
        if lines[index].startswith("```"):
            start = index
            index += 1
            body = []
            while not lines[index].startswith("```"):
                body.append(lines[index])
                index += 1
            blocks.append((start, "\n".join(body)))
        index += 1
    return blocks


def _headers(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            pairs.append((name.strip().lower(), value.strip()))
    return pairs


def _case(number: int, section: str, title: str, lines: list[str]) -> TraceCase:
    request_at = next(i for i, line in enumerate(lines) if _REQUEST.match(line))
    response_at = next(i for i, line in enumerate(lines) if _RESPONSE.match(line))
    request = _REQUEST.match(lines[request_at])
    response = _RESPONSE.match(lines[response_at])
    assert request is not None and response is not None
    case = TraceCase(number, section, title, request.group(1), request.group(2))
    case.status = int(response.group(1))
    blocks = _blocks(lines)
    before = [text for at, text in blocks if request_at < at < response_at]
    after = [text for at, text in blocks if at > response_at]
    case.request_headers = _headers(before[0]) if before else []
    case.request_body = before[1] if len(before) > 1 else None
    case.response_headers = dict(_headers(after[0])) if after else {}
    case.response_body = after[1] if len(after) > 1 else None
    return case


def _index(lines: list[str]) -> dict[int, int]:
    """The status each case has in the file's index table."""
    return {
        int(match.group(1)): int(match.group(2))
        for line in lines
        if (match := _INDEX_ROW.match(line))
    }


def load_trace(name: str) -> list[TraceCase]:
    """The cases of one trace file, in order; checks them against the file's index."""
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    starts = [(i, _HEADING.match(line)) for i, line in enumerate(lines)]
    headings = [(i, match) for i, match in starts if match]
    cases = []
    for position, (start, match) in enumerate(headings):
        end = headings[position + 1][0] if position + 1 < len(headings) else len(lines)
        number, section, title = int(match.group(1)), match.group(2), match.group(3)
        cases.append(_case(number, section, title, lines[start + 1 : end]))
    index = _index(lines)
    assert [c.number for c in cases] == sorted(index), f"{name}: cases do not match its index"
    assert all(index[c.number] == c.status for c in cases), f"{name}: statuses differ from index"
    return cases
