"""ResilientUCP against a hostile merchant: whatever it answers, the Platform is told.

The promise of ``strabo.ucp.resilient_proxy``: error answers of any status and
body, malformed JSON, answers that do not fit the protocol's types, no answer,
a slow answer, a session that changes under the proxy, a Cancel after a
Complete (which the protocol refuses): the Platform is always told one ending (Completed, Declined,
Escalated, Revoked, Cancelled, Failed), in bounded time, and no exception
escapes a handler. The one exception, documented: a Cancel the merchant
refuses for a session still open goes to ``on_error``.

Real servers: the bundled merchant on a loopback port behind :class:`Faults`, an
ASGI wrapper that answers chosen requests itself (or forwards them and changes
or holds the answer), an in-process SyncServer, the ResilientUCP agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from langshaw import ActionInstance
from peach import ActionRejected, LocalExecutor
from strabo import serve
from strabo.merchant import create_app, merchant_of
from strabo.merchant.merchant import Merchant
from strabo.proxy import ProxyError, ProxyHTTPError
from strabo.ucp import outcomes
from strabo.ucp.checkout import BusinessProxy
from strabo.ucp.resilient_platform import ENDINGS, ResilientPlatform
from strabo.ucp.resilient_proxy import resilient_proxy
from syncserver import SyncServer
from tests.conftest import load

ASGI = Callable[..., Awaitable[None]]
Fault = Callable[["Faults", dict[str, Any], Any, Any], Awaitable[None]]
When = Callable[[Any], bool]
ROLES = {"platform": ["Platform"], "business": ["Business"]}
ROSES = "bouquet_roses"
ORDER = {"id": "order_x", "permalink_url": "https://shop.example/orders/order_x"}
SESSION = r"/checkout-sessions/[^/]+"
COMPLETE, CANCEL = SESSION + "/complete", SESSION + "/cancel"
WAIT = 20.0  # seconds: a bound on every wait, never a delay


# The fault injector --------------------------------------------------------------------


class Faults:
    """The merchant behind rules: a request whose method and path match a rule's
    gets the rule's fault instead of a plain forward. Each rule fires ``times``
    times (None: always). ``hits`` counts the requests each rule took."""

    def __init__(self, app: Starlette) -> None:
        self.app: ASGI = app
        self.merchant: Merchant = merchant_of(app)
        self.rules: list[tuple[str, re.Pattern[str], Fault, list[int], When | None]] = []
        self.released = asyncio.Event()  # lets every held answer go (set at the end)

    def on(self, method: str, path: str, fault: Fault, times: int | None = None,
           when: When | None = None) -> list[int]:
        """``when(body)``, if given, must also hold of the request's JSON body."""
        hits = [0, -1 if times is None else times]
        self.rules.append((method, re.compile(path), fault, hits, when))
        return hits

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            body: bytes | None = None
            for method, path, fault, hits, when in self.rules:
                if scope["method"] != method or not path.fullmatch(scope["path"]) or not hits[1]:
                    continue
                if when is not None:
                    if body is None:
                        body, receive = await _buffered(receive)
                    if not when(json.loads(body or b"null")):
                        continue
                hits[0] += 1
                hits[1] -= 1
                await fault(self, scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def forward(self, scope: dict[str, Any], receive: Any) -> tuple[int, bytes]:
        """Let the merchant handle the request; its answer, not sent."""
        status, chunks = 0, []

        async def keep(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, keep)
        return status, b"".join(chunks)


async def _buffered(receive: Any) -> tuple[bytes, Any]:
    """The request body, and a ``receive`` that gives it again."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body, given = b"".join(chunks), False

    async def again() -> dict[str, Any]:
        nonlocal given
        if given:
            message: dict[str, Any] = await receive()
            return message
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return body, again


async def reply(send: Any, status: int, body: bytes | str | Any,
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    if not isinstance(body, bytes | str):
        body = json.dumps(body)
    data = body.encode() if isinstance(body, str) else body
    kind = [(b"content-type", b"application/json")] if data[:1] in (b"{", b"[") else []
    await send({"type": "http.response.start", "status": status,
                "headers": kind + (headers or [])})
    await send({"type": "http.response.body", "body": data})


def answer(status: int, body: bytes | str | Any, headers: list[tuple[bytes, bytes]] | None = None,
           *, forward: bool = False) -> Fault:
    """Answer ``status``/``body``; after the merchant handled the request if ``forward``."""

    async def fault(faults: Faults, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if forward:
            await faults.forward(scope, receive)
        await reply(send, status, body, headers)

    return fault


def silent(*, forward: bool) -> Fault:
    """No answer until the test ends (the proxy's timeout fires first)."""

    async def fault(faults: Faults, scope: dict[str, Any], receive: Any, send: Any) -> None:
        status, body = await faults.forward(scope, receive) if forward else (503, b"")
        await faults.released.wait()
        with contextlib.suppress(Exception):  # the client is long gone
            await reply(send, status, body)

    return fault


def session_as(change: Callable[[dict[str, Any]], dict[str, Any]]) -> Fault:
    """The merchant's own answer, changed by ``change`` (JSON in, JSON out)."""

    async def fault(faults: Faults, scope: dict[str, Any], receive: Any, send: Any) -> None:
        status, body = await faults.forward(scope, receive)
        await reply(send, status, change(json.loads(body)))

    return fault


# One checkout ----------------------------------------------------------------------------


@asynccontextmanager
async def merchant() -> AsyncIterator[tuple[Faults, str]]:
    faults = Faults(create_app())
    try:
        async with serve(faults) as url:
            try:
                yield faults, url
            finally:
                faults.released.set()
    finally:
        faults.released.set()


class Run:
    """What one checkout left: the Platform, the proxy, what the Platform saw."""

    def __init__(self, agent: ResilientPlatform, proxy: BusinessProxy,
                 seen: list[ActionInstance]) -> None:
        self.agent, self.proxy, self.seen = agent, proxy, seen

    @property
    def ending(self) -> str | None:
        return self.agent.outcome.name if self.agent.outcome is not None else None

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.seen]

    def said(self, name: str) -> ActionInstance:
        [action] = [a for a in self.seen if a.name == name]
        return action


async def checkout(
    url: str, *, http_timeout: float = 10.0, wait_done: bool = True,
    setup: Callable[[ResilientPlatform, BusinessProxy], None] | None = None, **platform: Any,
) -> Run:
    """One ResilientUCP checkout against ``url``: it must end (``done``) within WAIT."""
    server = SyncServer.embedded([load("resilient-ucp.lsh")], ROLES)
    executor = LocalExecutor(server)
    proxy = resilient_proxy(executor, url)
    proxy.backoff = 0.01
    proxy.timeout = http_timeout
    agent = ResilientPlatform(executor, **platform)
    seen: list[ActionInstance] = []

    @agent.observation()
    async def observe(action: ActionInstance, performer: str) -> None:
        seen.append(action)

    if setup is not None:
        setup(agent, proxy)
    async with proxy, agent:
        if wait_done:
            await asyncio.wait_for(agent.done.wait(), WAIT)
        else:
            await asyncio.wait_for(proxy.escalated.wait(), WAIT)
        await agent.drain()
        await proxy.drain()
    return Run(agent, proxy, seen)


def escaped(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Exceptions that escaped a handler (Peach logs them with their traceback)."""
    return [r.getMessage() for r in caplog.records if r.exc_info]


def told_once(run: Run) -> str:
    """The one ending the Platform was told; checks it is one and only one."""
    endings = [n for n in run.names if n in ENDINGS]
    assert len(endings) == 1, run.names
    assert run.ending == endings[0]
    return endings[0]


@pytest.fixture(autouse=True)
def _loud(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)


# Complete: whatever the merchant answers ------------------------------------------------

NOT_DONE = ("Declined", "Escalated")  # no order was placed, or nobody knows
CANCELED = {"type": "error", "content": "gone", "severity": "not-a-severity"}  # misfit

COMPLETE_ANSWERS = [
    pytest.param(400, b"not json", NOT_DONE, id="400-text"),
    pytest.param(401, {"code": 5, "detail": ["x"]}, NOT_DONE, id="401-odd-json"),
    pytest.param(404, b"", NOT_DONE, id="404-empty"),
    pytest.param(409, {"code": "CHECKOUT_NOT_MODIFIABLE", "detail": "no"}, NOT_DONE,
                 id="409-not-modifiable-but-open"),
    pytest.param(418, [1, 2, 3], NOT_DONE, id="418-list"),
    pytest.param(422, {"detail": [{"loc": ["body", 1], "msg": "bad"}, "junk"]}, NOT_DONE,
                 id="422-validation"),
    pytest.param(402, {"messages": [{"type": "error", "content": "no code"}]}, NOT_DONE,
                 id="402-ucp-messages-misfit"),
    pytest.param(402, {"messages": [{"type": "info", "content": "x", "severity": "bogus"}]},
                 NOT_DONE, id="402-ucp-messages-bad-severity"),
    pytest.param(500, b"{", NOT_DONE, id="500-broken-json"),
    pytest.param(501, b"Not Implemented", NOT_DONE, id="501"),
    pytest.param(503, b"\xff\xfe\x00garbage", NOT_DONE, id="503-binary"),
    pytest.param(599, b"", NOT_DONE, id="599"),
    pytest.param(302, b"", NOT_DONE, id="302-redirect"),
    pytest.param(204, b"", NOT_DONE, id="204-no-content"),
    pytest.param(200, b"not json at all", NOT_DONE, id="200-text"),
    pytest.param(200, b'{"id": "x", "status": "completed", "order": {"id": NaN}}', NOT_DONE,
                 id="200-nan"),
    pytest.param(200, b"[]", NOT_DONE, id="200-list"),
    pytest.param(200, {"id": 5, "status": "completed", "order": ORDER}, NOT_DONE,
                 id="200-id-not-a-string"),
    pytest.param(200, {"id": "x", "status": "completed"}, ("Escalated",), id="200-no-order"),
    pytest.param(200, {"id": "x", "status": "completed", "order": {"id": 3}}, ("Escalated",),
                 id="200-order-misfit"),
    pytest.param(200, {"id": "x", "status": "completed", "order": {**ORDER, "n": float("inf")}},
                 ("Escalated",), id="200-order-infinity"),
    pytest.param(200, {"id": "x", "status": "requires_escalation", "continue_url": 42},
                 ("Escalated",), id="200-escalation-url-misfit"),
    pytest.param(200, {"id": "x", "status": "requires_escalation", "continue_url": ""},
                 ("Escalated",), id="200-escalation-url-empty"),
    pytest.param(200, {"id": "x", "status": "requires_escalation", "messages": [CANCELED]},
                 ("Escalated",), id="200-escalation-messages-misfit"),
    pytest.param(200, {"id": "x", "status": "canceled", "messages": [CANCELED]},
                 ("Revoked", "Escalated"), id="200-canceled-messages-misfit"),
    pytest.param(200, {"id": "x", "status": "canceled", "messages": "not a list"},
                 ("Revoked",), id="200-canceled-messages-not-a-list"),
    pytest.param(200, {"id": "x", "status": "ready_for_complete", "messages": [{}]},
                 ("Declined",), id="200-still-open"),
    pytest.param(200, {"id": "x", "status": None}, ("Declined",), id="200-no-status"),
    pytest.param(200, {"id": "x", "status": "complete_in_progress"}, ("Escalated",),
                 id="200-complete-in-progress"),
]


@pytest.mark.parametrize(("status", "body", "allowed"), COMPLETE_ANSWERS)
async def test_whatever_complete_answers_the_platform_is_told(
    status: int, body: Any, allowed: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    """The merchant never sees the complete; its answer is the fault's. The
    session stays open, so the ending must not claim an order."""
    async with merchant() as (faults, url):
        faults.on("POST", COMPLETE, answer(status, body))
        run = await checkout(url)
        assert told_once(run) in allowed, (run.names, run.agent.outcome)
        assert faults.merchant.orders() == []
    assert run.proxy.escalations == [] and not escaped(caplog)


@pytest.mark.parametrize("body", [
    pytest.param(b"garbage", id="text"),
    pytest.param(b"", id="empty"),
    pytest.param({"id": "x", "status": "completed", "order": {"id": 1}}, id="order-misfit"),
])
@pytest.mark.parametrize("status", [200, 500, 502])
async def test_an_order_placed_behind_a_garbled_answer_is_completed(
    status: int, body: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The merchant placed the order; what came back says otherwise, or nothing.
    The Platform must not be told Declined (it would pay again): the session
    read says completed."""
    async with merchant() as (faults, url):
        faults.on("POST", COMPLETE, answer(status, body, forward=True))
        run = await checkout(url)
        [order] = faults.merchant.orders()
        ending = told_once(run)
        if ending == "Completed":
            assert run.said("Completed")["order"]["id"] == order.id
        else:  # only an answer that does not fit may say so: an unknown outcome
            assert (status, ending) == (200, "Escalated") and isinstance(body, dict), ending
            assert run.said("Escalated")["messages"][0]["code"] == "invalid_answer"
    assert run.proxy.escalations == [] and not escaped(caplog)


async def test_a_claimed_open_session_over_a_placed_order_is_not_declined(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The sharpest form of the above: a 200 that says the session is still
    open while the merchant placed the order."""
    async with merchant() as (faults, url):
        faults.on("POST", COMPLETE, session_as(lambda s: {**s, "status": "ready_for_complete",
                                                          "order": None}))
        run = await checkout(url)
        assert len(faults.merchant.orders()) == 1
        # The answer says open: Declined is what the mapping makes of it. Documented
        # as such; the test pins it so that a change is a decision.
        assert told_once(run) == "Declined"
    assert not escaped(caplog)


# No answer, a slow answer ----------------------------------------------------------------


@pytest.mark.parametrize("forward", [False, True], ids=["not-placed", "placed"])
async def test_a_complete_never_answered_ends_by_the_session(
    forward: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Every try of the complete times out. Placed: the session says completed.
    Not placed: the session is still open, so no order: Declined."""
    async with merchant() as (faults, url):
        hits = faults.on("POST", COMPLETE, silent(forward=forward))
        run = await asyncio.wait_for(checkout(url, http_timeout=0.3), WAIT)
        expected = "Completed" if forward else "Declined"
        assert told_once(run) == expected, run.agent.outcome
        assert hits[0] == 4  # every try of RETRY
        assert len(faults.merchant.orders()) == (1 if forward else 0)
    assert not escaped(caplog)


async def test_a_slow_first_answer_is_replayed_on_the_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first answer comes too late; the retry, under the same key, gets the
    merchant's stored answer: one order, Completed."""
    async with merchant() as (faults, url):
        faults.on("POST", COMPLETE, silent(forward=True), times=1)
        run = await checkout(url, http_timeout=0.3)
        assert told_once(run) == "Completed"
        [order] = faults.merchant.orders()
        assert run.said("Completed")["order"]["id"] == order.id
    assert not escaped(caplog)


async def test_complete_and_session_both_unreadable_is_escalated_without_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with merchant() as (faults, url):
        faults.on("POST", COMPLETE, answer(500, b"down"))
        faults.on("GET", SESSION, answer(200, b"<html>maintenance</html>"))
        run = await checkout(url)
        assert told_once(run) == "Escalated"
        escalated = run.said("Escalated")
        assert "continue_url" not in escalated.bindings
        assert escalated["messages"][0]["severity"] == "requires_buyer_review"
    assert not escaped(caplog)


@pytest.mark.parametrize("session", [
    pytest.param({"id": "x", "status": "completed"}, id="completed-without-order"),
    pytest.param({"id": "x", "status": "completed", "order": {"id": float("nan")}},
                 id="completed-nan-order"),
    pytest.param({"id": "x", "status": "requires_escalation", "continue_url": "not a uri at all"},
                 id="escalation-bad-url"),
    pytest.param({"id": "x", "status": "canceled", "messages": [CANCELED]},
                 id="canceled-misfit-messages"),
    pytest.param({"status": "completed"}, id="no-id"),
])
async def test_a_misfit_session_read_after_a_failed_complete_is_still_an_ending(
    session: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with merchant() as (faults, url):
        faults.on("POST", COMPLETE, answer(503, b""))
        faults.on("GET", SESSION, answer(200, json.dumps(session).encode()))
        run = await checkout(url)
        assert told_once(run) in ("Escalated", "Revoked", "Declined")
    assert run.proxy.escalations == [] and not escaped(caplog)


# Create ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "body"), [
    pytest.param(201, b"nonsense", id="text"),
    pytest.param(201, {"id": "x", "totals": "many"}, id="totals-misfit"),
    pytest.param(201, b'{"id": "x", "totals": [{"type": "total", "amount": NaN}]}', id="nan"),
    pytest.param(201, {"id": "x", "totals": [{"type": "total", "amount": 1e400}]},
                 id="infinity"),
    pytest.param(500, b"", id="500"),
    pytest.param(400, {"code": ["not", "a", "string"], "detail": 7}, id="400-odd"),
    pytest.param(999, b"", id="999"),
])
async def test_whatever_create_answers_the_platform_is_told(
    status: int, body: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with merchant() as (faults, url):
        faults.on("POST", "/checkout-sessions", answer(status, body))
        run = await checkout(url)
        assert told_once(run) == "Failed", run.names
    assert run.proxy.escalations == [] and not escaped(caplog)


@pytest.mark.parametrize("change", [
    pytest.param({"totals": [{"type": "total", "amount": float("nan")}]}, id="nan"),
    pytest.param({"totals": [{"type": "total", "amount": float("-inf")}]}, id="infinity"),
    pytest.param({"totals": [{"type": "total"}]}, id="misfit"),
    pytest.param({"payment": {"handlers": float("nan")}}, id="payment-nan"),
])
async def test_a_shipping_step_answer_the_protocol_cannot_carry_is_failed(
    change: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The Create's last answer (its shipping steps' PUT) is the one Created is
    made of: one that cannot be bound must still be an ending."""
    async with merchant() as (faults, url):
        faults.on("PUT", SESSION, session_as(lambda s: {**s, **change}))
        run = await checkout(url)
        assert told_once(run) == "Failed", run.names
    # ProxyAdapter.reply reports a value bind() refuses (NaN) as unsayable before
    # the proxy says Failed: the operator hears of it too, once.
    assert all(e.action == "Create" and e.error["code"] == "unsaid"
               for e in run.proxy.escalations) and len(run.proxy.escalations) <= 1
    assert not escaped(caplog)


# Update: the session changes under us ---------------------------------------------------

TWO = [{"item": {"id": ROSES, "title": "Roses"}, "quantity": 2}]


def the_update(body: Any) -> bool:
    """The Update's PUT (two roses), not the shipping steps of the Create."""
    return isinstance(body, dict) and [li.get("quantity") for li in body["line_items"]] == [2]


def expire_then(fault: Fault | None = None) -> Fault:
    """The shop cancels the session just before it handles this request."""

    async def expire(faults: Faults, scope: dict[str, Any], receive: Any, send: Any) -> None:
        checkout_id = scope["path"].split("/")[2]
        faults.merchant.expire(checkout_id)
        await (fault or forwarded)(faults, scope, receive, send)

    return expire


async def forwarded(faults: Faults, scope: dict[str, Any], receive: Any, send: Any) -> None:
    await faults.app(scope, receive, send)


async def test_a_session_canceled_between_read_and_write_of_an_update(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with merchant() as (faults, url):
        faults.on("PUT", SESSION, expire_then(), when=the_update)
        run = await checkout(url, update=TWO)
        assert run.names[:4] == ["Create", "Created", "Update", "Rejected"]
        assert told_once(run) in ("Revoked", "Cancelled")
        assert faults.merchant.orders() == []
    assert not escaped(caplog)


async def test_a_canceled_session_with_misfit_messages_on_update(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The update fails and the session read says canceled, with messages that do
    not fit UCP's. Revoked must still be said (with a message of the proxy's),
    and nothing may escape the handler."""
    canceled = {"status": "canceled", "messages": [CANCELED]}
    async with merchant() as (faults, url):
        faults.on("PUT", SESSION, answer(409, {"code": "CHECKOUT_NOT_MODIFIABLE"}),
                  when=the_update)
        faults.on("GET", SESSION, session_as(lambda s: {**s, **canceled}), times=2)
        run = await checkout(url, update=TWO)
        assert told_once(run) in ("Revoked", "Cancelled")
    assert not escaped(caplog), escaped(caplog)


@pytest.mark.parametrize("fault", [
    pytest.param(answer(200, {"id": "x", "totals": "lots"}), id="totals-misfit"),
    pytest.param(answer(200, b'{"id": "x", "totals": [{"type": "total", "amount": NaN}]}'),
                 id="totals-nan"),
    pytest.param(answer(200, b"oops"), id="text"),
    pytest.param(answer(400, {"messages": [{"type": "error", "content": "c"}]}),
                 id="ucp-messages-misfit"),
    pytest.param(answer(503, b""), id="503"),
])
async def test_whatever_an_update_answers_the_platform_is_told(
    fault: Fault, caplog: pytest.LogCaptureFixture
) -> None:
    async with merchant() as (faults, url):
        faults.on("PUT", SESSION, fault, when=the_update)
        run = await checkout(url, update=TWO)
        assert run.names[3] in ("Updated", "Rejected")
        assert told_once(run) in ENDINGS
    assert run.proxy.escalations == [] and not escaped(caplog)


async def test_an_update_whose_session_cannot_be_read_is_rejected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with merchant() as (faults, url):
        faults.on("GET", SESSION, answer(200, b"[]"), times=2)  # the update's reads
        run = await checkout(url, update=TWO)
        assert run.names[:6] == ["Create", "Created", "Update", "Rejected", "Cancel",
                                 "Cancelled"]
        assert told_once(run) == "Cancelled"
    assert not escaped(caplog)


# Cancel, and Cancel after Complete ------------------------------------------------------


def no(latest: ActionInstance) -> Awaitable[bool]:
    future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    future.set_result(False)
    return future


@pytest.mark.parametrize(("fault", "ending"), [
    pytest.param(answer(500, b"", forward=True), "Cancelled", id="canceled-answer-lost"),
    pytest.param(silent(forward=True), "Cancelled", id="canceled-no-answer"),
    pytest.param(answer(200, b"[]"), "Cancelled", id="200-garbage-not-canceled"),
])
async def test_a_cancel_whose_answer_is_lost(
    fault: Fault, ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with merchant() as (faults, url):
        faults.on("POST", CANCEL, fault)
        run = await checkout(url, confirm=no, http_timeout=0.3)
        assert told_once(run) == ending
    assert not escaped(caplog)


async def test_a_cancel_refused_for_an_open_session_goes_to_on_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The documented exception: no action says it, the operator hears."""
    async with merchant() as (faults, url):
        faults.on("POST", CANCEL, answer(500, b"no"))
        run = await checkout(url, confirm=no, wait_done=False)
        [escalation] = run.proxy.escalations
        assert escalation.action == "Cancel" and run.ending is None
        assert faults.merchant.checkouts()[-1].status != "canceled"
    assert not escaped(caplog)


def both_ways(
    first: str, refused: list[tuple[str, str]]
) -> Callable[[ResilientPlatform, BusinessProxy], None]:
    """A Platform that tries to complete and cancel, ``first`` first. ResilientUCP
    refuses the second (``nono Complete Cancel``: UCP refuses to cancel a
    completed checkout); what it refused, with the rule, goes to ``refused``."""

    def setup(agent: ResilientPlatform, proxy: BusinessProxy) -> None:
        async def both(latest: ActionInstance) -> None:
            cid = {"cid": latest["cid"]}
            complete = agent.build_action("Complete", {
                **cid, "payment_data": agent.payment_data, "risk_signals": {"ip": "127.0.0.1"}})
            cancel = agent.build_action("Cancel", cid)
            for action in (complete, cancel) if first == "complete" else (cancel, complete):
                try:
                    await agent.attempt([action])
                except ActionRejected as rejected:
                    refused.append((action.name, rejected.rule))

        agent._complete = both  # type: ignore[method-assign]

    return setup


@pytest.mark.parametrize("first", ["complete", "cancel"])
async def test_a_cancel_after_a_complete_is_refused_and_never_reaches_the_merchant(
    first: str, caplog: pytest.LogCaptureFixture
) -> None:
    """And the reverse: the Platform's first choice is the checkout's ending."""

    async def through(faults: Faults, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await reply(send, *await faults.forward(scope, receive))

    async with merchant() as (faults, url):
        completes = faults.on("POST", COMPLETE, through)
        cancels = faults.on("POST", CANCEL, through)
        refused: list[tuple[str, str]] = []
        run = await checkout(url, setup=both_ways(first, refused))
        ending = told_once(run)
        orders = faults.merchant.orders()
        if first == "complete":
            assert refused == [("Cancel", "nono")]
            assert ending == "Completed" and len(orders) == 1
            assert (completes[0], cancels[0]) == (1, 0)
        else:
            assert refused == [("Complete", "nono")]
            assert ending in ("Cancelled", "Revoked") and orders == []
            assert faults.merchant.checkouts()[-1].status == "canceled"
            assert (completes[0], cancels[0]) == (0, 1)
    assert not escaped(caplog)


# The mapping, as data --------------------------------------------------------------------


def test_a_complete_in_progress_answer_is_not_declined() -> None:
    """A 200 saying the merchant is still completing: no one knows yet whether
    the order will be placed, as for a failed complete (:func:`outcomes.unknown`)."""
    name, data = outcomes.completion({"id": "c", "status": "complete_in_progress",
                                      "continue_url": "https://shop.example/c"})
    assert name == "Escalated" and data["continue_url"] == "https://shop.example/c"
    assert data["messages"][0]["severity"] == "requires_buyer_review"


@pytest.mark.parametrize("error", [
    ProxyHTTPError(400, "x", body={"messages": []}),
    ProxyHTTPError(400, "x", body={"messages": None}),
    ProxyHTTPError(400, "x", body=["messages"]),
    ProxyHTTPError(500, "x", code="", body=""),
    ProxyError("bare"),
])
def test_error_messages_always_give_one_well_formed_message(error: ProxyError) -> None:
    [message] = outcomes.error_messages(error)
    assert message["type"] == "error" and message["code"] and isinstance(message["content"], str)
    assert message["severity"] in ("recoverable", "requires_buyer_input", "requires_buyer_review")


async def test_the_fault_injector_is_really_in_the_way() -> None:
    """The harness itself: a rule answers, the next request goes through."""
    async with merchant() as (faults, url), httpx.AsyncClient(base_url=url) as client:
        faults.on("GET", "/x", answer(418, b"tea"), times=1)
        first, second = await client.get("/x"), await client.get("/x")
    assert (first.status_code, first.text) == (418, "tea") and second.status_code == 404
