"""Replaying the reference merchant's recorded traces against our merchant.

Every case of both trace files is sent, in order, to a fresh merchant; each answer
must have the recorded status code and the recorded body's shape (see ``shapes``).
Ids the reference generated (sessions, line items, orders) are mapped to the ids our
merchant answered with, so later requests name our sessions. The agent profile the
traces point at is our mock agent, and the last pseudo-case compares the webhook
events it received with the ones the recording agent received.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from strabo.merchant import create_app
from strabo.serving import serve

from .conftest import SIMULATION_SECRET, MockAgent
from .profile_rules import profile_problems
from .shapes import differences
from .traces import RECORDED_BASE, TRACE_FILES, TraceCase, load_trace

RECORDED_AGENT = "http://127.0.0.1:8295"
"""Where the recording agent served its profile (the one declaring a webhook)."""

SPEC_OVER_TRACE = {
    "/.well-known/ucp": (
        "the reference's discovery profile is not valid against the UCP 2026-01-11 "
        "discovery schema (nulls where strings and objects are required) and lacks "
        "mock_payment_handler, which the UCP conformance suite requires; ours follows "
        "the spec and the suite, so it is checked against the spec's rules instead"
    ),
}
"""Paths where the recorded body's shape is knowingly not followed, and why."""

#: Webhook headers ours add: order.md signs webhooks (RFC 9421 at 2026-04-08, a
#: detached JWS at 2026-01-11) with Standard Webhooks' id and timestamp; the
#: recording reference sent them unsigned.
SIGNED = {
    "content-digest", "signature", "signature-input", "request-signature", "ucp-agent",
    "webhook-id", "webhook-timestamp",
}
#: The webhook body's fields the reference sent; ours is the order entity itself
#: with these kept beside it (the conformance suite reads them).
WEBHOOK_FIELDS = ("event_type", "checkout_id", "order")

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
DROPPED_HEADERS = {"host", "content-length"}


class Replay:
    """Sends trace cases to our merchant, translating the reference's ids to ours."""

    def __init__(self, client: httpx.AsyncClient, base: str, agent: MockAgent) -> None:
        self.client = client
        self.base = base
        self.agent = agent
        self.ids: dict[str, str] = {}

    def translate(self, text: str) -> str:
        """Recorded text with our server, our mock agent and our ids in it."""
        text = text.replace(RECORDED_BASE, self.base).replace(RECORDED_AGENT, self.agent.url)
        return UUID.sub(lambda m: self.ids.get(m.group(0), m.group(0)), text)

    def learn(self, recorded: Any, ours: Any) -> None:
        """Map the uuids in the recorded body to those at the same places in ours."""
        if isinstance(recorded, dict) and isinstance(ours, dict):
            for key in recorded.keys() & ours.keys():
                self.learn(recorded[key], ours[key])
        elif isinstance(recorded, list) and isinstance(ours, list):
            for theirs, mine in zip(recorded, ours, strict=False):
                self.learn(theirs, mine)
        elif isinstance(recorded, str) and isinstance(ours, str):
            theirs, mine = UUID.findall(recorded), UUID.findall(ours)
            if len(theirs) == len(mine):
                for old, new in zip(theirs, mine, strict=True):
                    self.ids.setdefault(old, new)

    async def send(self, case: TraceCase) -> httpx.Response:
        """Send the case's request as recorded (headers, raw body) to our merchant."""
        headers = [
            (name, self.translate(value))
            for name, value in case.request_headers
            if name not in DROPPED_HEADERS
        ]
        body = self.translate(case.request_body).encode() if case.request_body else None
        return await self.client.request(
            case.method, self.translate(case.path), headers=headers, content=body
        )

    @staticmethod
    def spec_over_trace(case: TraceCase) -> bool:
        """Whether the case's body shape is one we knowingly differ from (see above)."""
        return not case.is_webhook_log and case.path.split("?")[0] in SPEC_OVER_TRACE

    async def check(self, case: TraceCase) -> list[str]:
        """Run one case; the ways our answer differs from the recorded one."""
        if case.is_webhook_log:
            status, body = len(self.agent.events), [
                {
                    **event,
                    "headers": {
                        k: v for k, v in event["headers"].items() if k.lower() not in SIGNED
                    },
                    "body": {k: event["body"][k] for k in WEBHOOK_FIELDS if k in event["body"]},
                }
                for event in self.agent.events
            ]
        else:
            response = await self.send(case)
            status = response.status_code
            body = response.json() if case.response_is_json else response.text
        problems = []
        if status != case.status:
            problems.append(f"status {status}, recorded {case.status}: {str(body)[:300]}")
        if self.spec_over_trace(case):
            problems += profile_problems(body)
        elif case.response_is_json:
            recorded = case.response_json()
            problems += differences(recorded, body)
            self.learn(recorded, body)
        elif body != case.response_body:
            problems.append(f"body {body!r}, recorded {case.response_body!r}")
        return [f"{case.label}: {problem}" for problem in problems]


@pytest.mark.parametrize("trace_file", TRACE_FILES)
async def test_every_recorded_case_gets_the_recorded_status_and_body_shape(
    trace_file: str, agent: MockAgent
) -> None:
    cases = load_trace(trace_file)
    app = create_app(simulation_secret=SIMULATION_SECRET)
    failures: list[str] = []
    async with serve(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as client:
        replay = Replay(client, base, agent)
        for case in cases:
            failures += await replay.check(case)
    assert not failures, f"{len(failures)} differences:\n" + "\n".join(failures)
