"""The failure policy of routes: bounded retries under one idempotency key, then a
failure action or on_error, and a policy checked when it is declared.

The service is a real HTTP server on a loopback port that answers from a script.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from langshaw import ActionInstance, LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from strabo import serve
from strabo.proxy import (
    ProxyAdapter,
    ProxyError,
    ProxyHTTPError,
    ProxyRequest,
    ProxyRequestError,
    RetryPolicy,
    Route,
    RouteError,
)
from syncserver import SyncServer
from tests.conftest import paper
from tests.harness import until

SIMPLE = paper("atomic-ucp.lsh")  # untyped: types are tests/proxy/test_types.py's
INCREMENTAL = paper("incremental-ucp.lsh")
PAPER_CREATE = dict(
    line_items=[], currency="USD", buyer=None, payment_pref={}, discount_codes=None,
    fulfillment_pref=None,
)
Answer = tuple[int, dict[str, str], bytes]


class Scripted:
    """Answers each request with the next answer of the script (the last one
    repeats) and keeps, for each request, its path, Idempotency-Key and time."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, str, float]] = []
        self.arrived = asyncio.Event()
        self.gate: asyncio.Event | None = None  # when set, answers wait for it

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        key = dict(scope["headers"]).get(b"idempotency-key", b"").decode()
        self.requests.append((scope["path"], key, time.monotonic()))
        self.arrived.set()
        if self.gate is not None:
            await asyncio.wait_for(self.gate.wait(), 5)
        status, headers, body = self.answers[min(len(self.requests), len(self.answers)) - 1]
        raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    def keys(self) -> set[str]:
        return {key for _, key, _ in self.requests}


def answer(status: int, body: bytes = b"", **headers: str) -> Answer:
    return status, {k.replace("_", "-"): v for k, v in headers.items()}, body


class MAS:
    """A Platform and a Business proxy on one in-process SyncServer, the proxy
    talking to a scripted service over loopback HTTP."""

    def __init__(self, protocol: LangshawProtocol, url: str, **options: Any) -> None:
        self.server = SyncServer.embedded(
            [protocol], {"platform": ["Platform"], "business": ["Business"]}
        )
        executor = LocalExecutor(self.server)
        self.platform = PeachAdapter("platform", protocol, "Platform", executor)
        keys = [k for k in protocol.keys]
        self.proxy = ProxyAdapter(
            "business", protocol, "Business", executor, base_url=url, internal=keys, **options
        )
        self.seen: list[ActionInstance] = []
        self.changed = asyncio.Event()
        self.errors: list[tuple[ProxyError, Route, ActionInstance | None]] = []
        self.told = asyncio.Event()

        @self.platform.observation()
        async def observe(action: ActionInstance, performer: str) -> None:
            self.seen.append(action)
            self.changed.set()

        @self.proxy.on_error
        async def heard(error: ProxyError, route: Route, trigger: ActionInstance | None) -> None:
            self.errors.append((error, route, trigger))
            self.told.set()

    def names(self) -> list[str]:
        return [a.name for a in self.seen]

    async def wait_for(self, name: str, count: int = 1) -> ActionInstance:
        await until(lambda: self.names().count(name) >= count, self.changed, seconds=5)
        return [a for a in self.seen if a.name == name][-1]

    async def error(self) -> ProxyError:
        """The error on_error heard (waiting for it, 5 s at most)."""
        await asyncio.wait_for(self.told.wait(), 5)
        await self.proxy.drain()
        return self.errors[-1][0]


@pytest.fixture
async def service() -> AsyncIterator[tuple[Scripted, str]]:
    script = Scripted(answer(503))
    async with serve(script, lifespan="off") as url:
        yield script, url


async def create(mas: MAS) -> ActionInstance:
    [done] = await mas.platform.attempt([mas.platform.initiating()[0].bind(**PAPER_CREATE)])
    return done


# (c) The policy is checked when it is declared -----------------------------------------


@pytest.mark.parametrize(
    ("spec", "kwargs", "message"),
    [
        ("Create->>Created", {"retries": -1}, "retries must be an integer >= 0, not -1"),
        ("Create->>Created", {"retries": 2.5}, "retries must be an integer >= 0, not 2.5"),
        ("Create->>Created", {"retries": True}, "retries must be an integer >= 0, not True"),
        ("Create->>Created", {"backoff": -0.1}, "backoff must be >= 0 seconds, not -0.1"),
        ("Create->>Created", {"backoff": math.nan}, "backoff must be a finite number"),
        ("Create->>Created", {"max_delay": 0}, "max_delay must be > 0 seconds, not 0"),
        ("Create->>Created", {"retry_budget": math.inf}, "retry_budget must be a finite number"),
        ("Create->>Created", {"retry_budget": "5"}, "retry_budget must be a finite number"),
        (
            "Create->>Created",
            {"failure_response": {"reason": "$.message"}},
            "failure_response= needs failure=, the action it binds",
        ),
        (
            "Create->>Created",
            {"failure": "Failed", "failure_response": 42},
            "failure_response= must map Failed's attributes to JSONPaths, or be a function",
        ),
        (
            "Create->>Created",
            {"failure": "Created"},
            "failure action Created is the route's own answer",
        ),
        (
            "Complete->>Completed",
            {"failure": "Failed"},
            "failure action Failed can never follow Complete: Complete depends on Created, "
            "and Created excludes Failed (nono); route the failure to on_error instead",
        ),
    ],
)
def test_a_bad_failure_policy_fails_at_route(spec: str, kwargs: dict, message: str) -> None:
    server = SyncServer.embedded([SIMPLE], {"business": ["Business"]})
    proxy = ProxyAdapter(
        "business", SIMPLE, "Business", LocalExecutor(server), base_url="http://x.test"
    )
    target = "POST-/c" if spec.startswith("Create") else "POST-/c/{id}/complete"
    with pytest.raises(RouteError) as caught:
        proxy.route(spec, target, **kwargs)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"route({spec!r}, {target!r}): ")
    assert proxy.routes == {}


def test_a_bad_default_policy_fails_at_construction_and_when_set() -> None:
    server = SyncServer.embedded([SIMPLE], {"business": ["Business"]})

    def make(**options: Any) -> ProxyAdapter:
        executor = LocalExecutor(server)
        return ProxyAdapter("b", SIMPLE, "Business", executor, base_url="http://x.test", **options)

    with pytest.raises(RouteError, match=r"ProxyAdapter: retries must be an integer >= 0"):
        make(retries=-1)
    with pytest.raises(RouteError, match=r"ProxyAdapter: retry_budget must be > 0 seconds"):
        make(retry_budget=0)
    with pytest.raises(RouteError, match=r"timeout must be a positive number of seconds"):
        make(timeout=0)
    with pytest.raises(RouteError, match=r"timeout must be finite"):
        make(timeout=math.inf)
    proxy = make(retries=1, backoff=0.5)
    with pytest.raises(RouteError, match=r"backoff must be >= 0 seconds, not -1"):
        proxy.backoff = -1
    assert proxy.backoff == 0.5  # unchanged
    proxy.route("Create->>Created", "POST-/c", retries=0, max_delay=2.0)
    assert proxy.policy("Create") == RetryPolicy(retries=0, backoff=0.5, max_delay=2.0)
    proxy.backoff = 0.25  # a route takes the adapter's defaults when it sends
    assert proxy.policy("Create").backoff == 0.25
    with pytest.raises(RouteError, match="RetryPolicy: max_delay must be > 0 seconds"):
        RetryPolicy(max_delay=-1)


# Bounds: count, time, Retry-After ------------------------------------------------------


async def test_retries_stop_when_the_budget_is_spent(service: tuple[Scripted, str]) -> None:
    script, url = service  # 503 for ever
    mas = MAS(SIMPLE, url, retries=50, backoff=0.3, retry_budget=0.6)
    mas.proxy.route("Create->>Created", "POST-/c", failure="Failed")
    async with mas.server, mas.proxy, mas.platform:
        await create(mas)
        failed = await mas.wait_for("Failed")
    # Waits are 0.3 s then 0.6 s, less up to a quarter (jitter): the second try
    # starts within the budget (the first answer takes under 0.3 s), the third
    # would start 0.225 + 0.45 s at least after the first, past it.
    assert len(script.requests) == 2 and len(script.keys()) == 1
    assert failed["reason"] == {"status": 503, "code": None, "message": "Service Unavailable"}


async def test_retry_after_is_honoured_within_max_delay_and_ends_the_retries_beyond(
    service: tuple[Scripted, str],
) -> None:
    script, url = service
    script.answers = [answer(429, Retry_After="0.3"), answer(429, Retry_After="120")]
    mas = MAS(SIMPLE, url, backoff=0.001, max_delay=5.0)
    mas.proxy.route("Create->>Created", "POST-/c")
    async with mas.server, mas.proxy, mas.platform:
        await create(mas)
        error = await mas.error()
    (_, first, at), (_, second, later) = script.requests
    assert later - at >= 0.3 and first == second  # waited as asked, same key
    assert isinstance(error, ProxyHTTPError) and error.status == 429 and error.attempts == 2
    assert error.gave_up == "Retry-After 120 s exceeds max_delay 5 s"
    assert "429 Too Many Requests (2 tries in " in str(error)


# What a failure becomes ----------------------------------------------------------------


def reason_or_nothing(error: ProxyError, trigger: ActionInstance) -> dict[str, Any] | None:
    """Failed for a service that stayed down; a refusal is for on_error."""
    if error.gave_up is None:
        return None
    return {"reason": {"retry_later": True, "tries": error.attempts}}


@pytest.mark.parametrize(("status", "tries"), [(503, 3), (409, 1)])
async def test_a_failure_function_binds_the_failure_action_or_defers_to_on_error(
    service: tuple[Scripted, str], status: int, tries: int
) -> None:
    script, url = service
    script.answers = [answer(status)]
    mas = MAS(SIMPLE, url, retries=2, backoff=0.001)
    mas.proxy.route(
        "Create->>Created", "POST-/c", failure="Failed", failure_response=reason_or_nothing
    )
    async with mas.server, mas.proxy, mas.platform:
        await create(mas)
        if status == 503:
            failed = await mas.wait_for("Failed")
            assert failed["reason"] == {"retry_later": True, "tries": 3}
            assert mas.errors == []
        else:
            error = await mas.error()
            assert isinstance(error, ProxyHTTPError) and error.status == 409
            assert "Failed" not in mas.names()
    assert len(script.requests) == tries and len(script.keys()) == 1


async def test_a_failure_action_that_cannot_be_performed_goes_to_on_error(
    service: tuple[Scripted, str], caplog: pytest.LogCaptureFixture
) -> None:
    """IncrementalUCP's StatusChange happens once per checkout: a second failed
    Complete cannot be one, and reaches on_error instead of vanishing."""
    script, url = service
    script.answers = [answer(500)]
    mas = MAS(INCREMENTAL, url, retries=1, backoff=0.001)
    mas.proxy.route(
        "Complete->>Completed",
        "POST-/c/{id}/complete",
        failure="StatusChange",
        failure_response=lambda error, trigger: {"status": "requires_escalation", "totals": None},
    )
    async with mas.server, mas.proxy, mas.platform:
        [made] = await mas.platform.attempt(
            [
                mas.platform.initiating()[0].bind(
                    line_items=[], currency="USD", buyer=None, payment={}
                )
            ]
        )
        created = mas.proxy.build_action(
            "Created", {**made.bindings, "id": "chk", "payment_config": {}, "messages": None}
        )
        await mas.proxy.attempt([created])

        async def complete() -> None:
            action = mas.platform.build_action(
                "Complete", {"eid": made["eid"], "payment_data": {}, "risk_signals": {}}
            )
            await mas.platform.attempt([action])

        await complete()
        change = await mas.wait_for("StatusChange")
        assert change["status"] == "requires_escalation"
        await complete()  # a second version
        error = await mas.error()
    assert mas.names().count("StatusChange") == 1
    trigger = mas.errors[-1][2]
    assert trigger is not None and trigger.name == "Complete" and error.attempts == 2
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "failed and its failure action StatusChange cannot be performed" in line
    assert len(script.requests) == 4 and len(script.keys()) == 2  # one key per Complete


async def test_a_request_that_cannot_be_built_is_a_failure_not_a_crash(
    service: tuple[Scripted, str], caplog: pytest.LogCaptureFixture
) -> None:
    script, url = service
    mas = MAS(SIMPLE, url)
    mas.proxy.route("Complete->>Completed", "POST-/c/{id}/complete")
    async with mas.server, mas.proxy, mas.platform:
        made = await create(mas)
        await mas.proxy.attempt(
            [mas.proxy.build_action("Created", {**made.bindings, "id": None})]  # no checkout id
        )
        complete = next(f for f in mas.platform.enabled(made.keys) if f.name == "Complete")
        await mas.platform.attempt([complete.bind(payment_data={}, risk_signals={})])
        error = await mas.error()
    assert isinstance(error, ProxyRequestError) and error.attribute == "id"
    assert error.summary()["code"] == "invalid_binding"
    assert script.requests == []  # nothing was sent
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_header_hook_that_raises_is_a_failure_not_a_crash(
    service: tuple[Scripted, str], caplog: pytest.LogCaptureFixture
) -> None:
    script, url = service

    def broken(request: ProxyRequest) -> dict[str, str]:
        raise KeyError("UCP_SIGNING_KEY")

    mas = MAS(SIMPLE, url, header_hook=broken)
    mas.proxy.route("Create->>Created", "POST-/c", failure="Failed")
    async with mas.server, mas.proxy, mas.platform:
        await create(mas)
        failed = await mas.wait_for("Failed")
    assert failed["reason"] == {
        "status": None,
        "code": "proxy_error",
        "message": "KeyError: 'UCP_SIGNING_KEY'",
    }
    assert script.requests == [] and not [r for r in caplog.records if r.exc_info]


async def test_an_answer_the_protocol_cannot_take_reaches_on_error(
    service: tuple[Scripted, str],
) -> None:
    """The service completed, but Completed has been said meanwhile (by another
    handling of the same trigger, say): the duplicate is refused, and on_error
    hears of it rather than a log line alone."""
    script, url = service
    script.answers = [answer(200, b'{"order": {"id": "o-1"}}')]
    script.gate = asyncio.Event()
    mas = MAS(SIMPLE, url)
    mas.proxy.route("Complete->>Completed", "POST-/c/{id}/complete")
    async with mas.server, mas.proxy, mas.platform:
        made = await create(mas)
        await mas.proxy.attempt([mas.proxy.build_action("Created", {**made.bindings, "id": "c"})])
        complete = next(f for f in mas.platform.enabled(made.keys) if f.name == "Complete")
        [done] = await mas.platform.attempt([complete.bind(payment_data={}, risk_signals={})])
        await asyncio.wait_for(script.arrived.wait(), 5)
        said = mas.proxy.build_action("Completed", {**done.bindings, "order": {"id": "o-0"}})
        await mas.proxy.attempt([said])
        script.gate.set()
        error = await mas.error()
    assert error.code == "unsaid" and error.message.startswith("Completed ")
    assert [a["order"] for a in mas.seen if a.name == "Completed"] == [{"id": "o-0"}]


async def test_an_answer_cannot_rebind_an_internal_key(service: tuple[Scripted, str]) -> None:
    script, url = service
    script.answers = [answer(201, b'{"cid": "elsewhere", "id": "chk_1"}')]
    mas = MAS(SIMPLE, url)
    mas.proxy.route("Create->>Created", "POST-/c")
    async with mas.server, mas.proxy, mas.platform:
        made = await create(mas)
        created = await mas.wait_for("Created")
    assert created["cid"] == made["cid"] and created["id"] == "chk_1"
