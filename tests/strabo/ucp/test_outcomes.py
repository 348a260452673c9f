"""ResilientUCP: every way a UCP checkout ends is a protocol action.

One test per ending, each against the bundled merchant over real HTTP, told
through its testing endpoints how to fail (decline, escalate, expire, stock),
with the ResilientUCP Business proxy and Platform agent of ``strabo.ucp``.
The Platform always learns the ending: nothing waits for an answer that will
not come. The mapping itself (:mod:`strabo.ucp.outcomes`) is tested as data
at the end.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from langshaw import ActionInstance
from peach import LocalExecutor, SyncExecutor
from strabo import demo, serve
from strabo._demo_endings import OUTCOMES
from strabo.merchant import create_app, merchant_of
from strabo.proxy import ProxyHTTPError, ProxyRequestError, ProxyUnreachable
from strabo.ucp import outcomes
from strabo.ucp.platform_agent import SAMPLE_PAYMENT_DATA
from strabo.ucp.resilient_platform import ENDINGS, ResilientPlatform
from strabo.ucp.resilient_proxy import resilient_proxy
from syncserver import SyncServer
from syncserver import create_app as syncserver_app
from tests.conftest import load

ROLES = {"platform": ["Platform"], "business": ["Business"]}
ROSES = "bouquet_roses"
Confirm = Callable[[ActionInstance], Awaitable[bool]]


class Shop:
    """The bundled merchant on a loopback port, and its testing endpoints."""

    def __init__(self, app: Any, url: str) -> None:
        self.app, self.url = app, url
        self.merchant = merchant_of(app)

    async def testing(self, method: str, path: str, body: Any = None) -> httpx.Response:
        headers = {"Simulation-Secret": self.merchant.simulation_secret}
        async with httpx.AsyncClient(base_url=self.url) as client:
            return await client.request(method, f"/testing/{path}", json=body, headers=headers)

    def rig(self, what: str, body: Any = None) -> Confirm:
        """A buyer's confirm that first tells the merchant to ``what`` this session."""

        async def confirm(latest: ActionInstance) -> bool:
            checkout = self.merchant.checkouts()[-1].id
            answer = await self.testing("POST", f"checkout-sessions/{checkout}/{what}", body)
            assert answer.status_code == 200, answer.text
            return True

        return confirm


@asynccontextmanager
async def shop(version: str | None = None) -> AsyncIterator[Shop]:
    app = create_app(ucp_version=version) if version else create_app()
    async with serve(app) as url:
        yield Shop(app, url)


async def checkout(
    shop: Shop, *, over_http: bool = False,
    setup: Callable[[ResilientPlatform, Any], None] | None = None,
    ucp_version: str | None = None, **platform: Any
) -> tuple[ResilientPlatform, Any]:
    """One ResilientUCP checkout; the Platform (its outcome) and the proxy.
    ``setup(platform, proxy)`` may add handlers before they start."""
    server = SyncServer.embedded([load("resilient-ucp.lsh")], ROLES)
    async with executors_of(server, over_http) as executors:
        proxy = resilient_proxy(executors["business"], shop.url, ucp_version=ucp_version)
        proxy.backoff = 0.01
        agent = ResilientPlatform(executors["platform"], **platform)
        if setup is not None:
            setup(agent, proxy)
        async with proxy, agent:
            await asyncio.wait_for(agent.done.wait(), 20)
            await agent.drain()
    return agent, proxy


@asynccontextmanager
async def executors_of(server: SyncServer, over_http: bool) -> AsyncIterator[dict[str, Any]]:
    if not over_http:
        local = LocalExecutor(server)
        yield {"platform": local, "business": local}
        return
    async with serve(syncserver_app(server)) as url:
        yield {name: SyncExecutor(url, name) for name in ROLES}


def names(agent: ResilientPlatform) -> list[str]:
    return [i.name for root in agent.enactments() for _, i, _ in agent.history(root)]


@pytest.mark.parametrize("over_http", [False, True], ids=["local", "http"])
async def test_completed(over_http: bool) -> None:
    async with shop() as s:
        agent, proxy = await checkout(s, over_http=over_http)
        assert names(agent) == ["Create", "Created", "Complete", "Completed"]
        assert agent.outcome is not None and agent.outcome.name == "Completed"
        [order] = s.merchant.orders()
        assert agent.outcome["order"]["id"] == order.id and not proxy.escalations


@pytest.mark.parametrize("code", ["INSUFFICIENT_FUNDS", "FRAUD_DETECTED"])
async def test_declined_payment(code: str) -> None:
    async with shop() as s:
        agent, _ = await checkout(s, confirm=s.rig("decline", {"code": code}))
        assert names(agent)[-2:] == ["Complete", "Declined"]
        [message] = agent.outcome["messages"]  # type: ignore[index]
        assert message["code"] == "payment_declined" and message["severity"] == "recoverable"
        assert code in message["content"] and "HTTP 402" in message["content"]
        assert s.merchant.orders() == []
        assert s.merchant.checkouts()[-1].status == "ready_for_complete"  # left open


async def test_a_payment_the_merchant_refuses_by_token_is_declined() -> None:
    failing = {**SAMPLE_PAYMENT_DATA, "credential": {"type": "token", "token": "fail_token"}}
    async with shop() as s:
        agent, _ = await checkout(s, payment_data=failing)
        assert agent.outcome is not None and agent.outcome.name == "Declined"
        assert agent.outcome["messages"][0]["code"] == "payment_declined"


async def test_out_of_stock_at_completion_is_declined() -> None:
    async with shop() as s:

        async def sold_out(latest: ActionInstance) -> bool:
            answer = await s.testing("PUT", f"inventory/{ROSES}", {"quantity": 0})
            assert answer.json() == {"product_id": ROSES, "quantity": 0}
            return True

        agent, _ = await checkout(s, confirm=sold_out)
        assert names(agent)[-1] == "Declined"
        [message] = agent.outcome["messages"]  # type: ignore[index]
        assert message["code"] == "out_of_stock" and "OUT_OF_STOCK" in message["content"]
        assert s.merchant.orders() == [] and s.merchant.stock(ROSES) == 0


@pytest.mark.parametrize("url", [None, "https://shop.example/resume/1"])
async def test_requires_escalation_is_escalated_with_the_continue_url(url: str | None) -> None:
    async with shop() as s:
        body = {"continue_url": url} if url else None
        agent, _ = await checkout(s, confirm=s.rig("escalate", body))
        assert names(agent)[-1] == "Escalated"
        session = s.merchant.checkouts()[-1]
        assert session.status == "requires_escalation" and session.continue_url
        assert agent.outcome["continue_url"] == session.continue_url  # type: ignore[index]
        if url:
            assert session.continue_url == url
        [message] = agent.outcome["messages"]  # type: ignore[index]
        assert message["severity"] == "requires_buyer_review"
        assert s.merchant.orders() == []


@pytest.mark.parametrize("version", ["2026-01-11", "2026-04-08"])
async def test_a_session_the_merchant_cancels_is_revoked(version: str) -> None:
    """2026-04-08 spells the 409's code in lower case (checkout_not_modifiable)."""
    async with shop(version) as s:
        agent, _ = await checkout(s, confirm=s.rig("expire"), ucp_version=version)
        # The Complete met a session no longer open (409): the proxy read it.
        assert names(agent)[-2:] == ["Complete", "Revoked"]
        [message] = agent.outcome["messages"]  # type: ignore[index]
        assert message["code"] == "expired"
        assert s.merchant.checkouts()[-1].status == "canceled"


async def test_a_rejected_update_is_said_with_its_messages_then_cancelled() -> None:
    too_many = [{"item": {"id": ROSES, "title": "Roses"}, "quantity": 10_000}]
    async with shop() as s:
        agent, _ = await checkout(s, update=too_many)
        assert names(agent) == ["Create", "Created", "Update", "Rejected", "Cancel", "Cancelled"]
        [rejected] = [i for r in agent.enactments() for _, i, _ in agent.history(r)
                      if i.name == "Rejected"]
        assert rejected["messages"][0]["code"] == "out_of_stock"
        assert s.merchant.checkouts()[-1].status == "canceled"


async def test_an_accepted_update_carries_the_new_totals() -> None:
    two = [{"item": {"id": ROSES, "title": "Roses"}, "quantity": 2}]
    async with shop() as s:
        agent, _ = await checkout(s, update=two)
        assert names(agent) == ["Create", "Created", "Update", "Updated", "Complete",
                                "Completed"]
        [created, updated] = [i for r in agent.enactments() for _, i, _ in agent.history(r)
                              if i.name in ("Created", "Updated")]
        subtotal = {t["type"]: t["amount"] for t in updated["totals"]}["subtotal"]
        first = {t["type"]: t["amount"] for t in created["totals"]}["subtotal"]
        assert subtotal == 2 * first
        assert s.merchant.orders()[0].line_items[0].quantity.total == 2


async def test_an_update_of_a_session_the_merchant_canceled_is_rejected_and_revoked() -> None:
    two = [{"item": {"id": ROSES, "title": "Roses"}, "quantity": 2}]
    async with shop() as s:

        def expire_first(agent: ResilientPlatform, proxy: Any) -> None:
            # The session expires on Created; the Platform's Update, which its
            # own handler of Created attempts concurrently, waits for that.
            expired = asyncio.Event()

            @agent.observation("Created")
            async def expire(created: ActionInstance, performer: str) -> None:
                answer = await s.testing("POST", f"checkout-sessions/{created['id']}/expire")
                assert answer.status_code == 200, answer.text
                expired.set()

            attempt = agent.attempt

            async def after_expiry(instances: Any, *args: Any, **kwargs: Any) -> Any:
                if any(i.name == "Update" for i in instances):
                    await expired.wait()
                return await attempt(instances, *args, **kwargs)

            agent.attempt = after_expiry  # type: ignore[method-assign]

        agent, _ = await checkout(s, update=two, setup=expire_first)
        seen = names(agent)
        assert seen[:4] == ["Create", "Created", "Update", "Rejected"]
        # The Platform cancels on Rejected; whether its Cancel comes before or
        # after Revoked, the checkout ends Revoked, once.
        assert [n for n in seen if n in ENDINGS] == ["Revoked"]
        [rejected] = [i for r in agent.enactments() for _, i, _ in agent.history(r)
                      if i.name == "Rejected"]
        assert rejected["messages"][0]["code"] == "checkout_not_modifiable"
        assert agent.outcome is not None and agent.outcome["messages"][0]["code"] == "expired"


async def test_a_merchant_gone_at_completion_is_escalated_without_a_url() -> None:
    async with shop() as s:

        def close_shop(agent: ResilientPlatform, proxy: Any) -> None:
            async def confirm(latest: ActionInstance) -> bool:
                proxy.base_url = "http://127.0.0.1:9"  # nothing listens: no answer at all
                return True

            agent.confirm = confirm

        agent, _ = await checkout(s, setup=close_shop)
    assert agent.outcome is not None and agent.outcome.name == "Escalated"
    assert "continue_url" not in agent.outcome.bindings
    [message] = agent.outcome["messages"]
    assert message["code"] == "unreachable" and message["severity"] == "requires_buyer_review"
    assert s.merchant.orders() == []


# The mapping as data ------------------------------------------------------------------


def http(status: int, code: str | None, body: Any = None) -> ProxyHTTPError:
    return ProxyHTTPError(status, "refused", code=code, body=body)


@pytest.mark.parametrize(("error", "code", "severity"), [
    (http(402, "INSUFFICIENT_FUNDS"), "payment_declined", "recoverable"),
    (http(403, "FRAUD_DETECTED"), "payment_declined", "recoverable"),
    (http(402, None), "payment_declined", "recoverable"),
    (http(409, "OUT_OF_STOCK"), "out_of_stock", "recoverable"),
    (http(400, "INVALID_REQUEST"), "invalid", "recoverable"),
    (http(422, "validation"), "invalid", "recoverable"),
    (http(409, "IDEMPOTENCY_CONFLICT"), "idempotency_conflict", "recoverable"),
    (http(503, None), "http_503", "requires_buyer_review"),
    (ProxyUnreachable("no answer"), "unreachable", "requires_buyer_review"),
    (ProxyRequestError("bad binding"), "invalid", "recoverable"),
])
def test_errors_become_ucp_messages(error: Any, code: str, severity: str) -> None:
    [message] = outcomes.error_messages(error)
    assert message["type"] == "error"
    assert (message["code"], message["severity"]) == (code, severity)


def test_a_merchant_that_answers_ucp_messages_is_taken_at_its_word() -> None:
    said = [{"type": "error", "code": "requires_3ds", "content": "3DS", "severity":
             "requires_buyer_review"}]
    assert outcomes.error_messages(http(400, None, {"messages": said})) == said
    # ...but not when they are not messages
    assert outcomes.error_messages(http(400, None, {"messages": [1]}))[0]["code"] == "invalid"


def test_endings_from_sessions() -> None:
    order = {"id": "o1", "permalink_url": "https://shop.example/o1"}
    assert outcomes.completion({"status": "completed", "order": order}) == (
        "Completed", {"order": order})
    name, data = outcomes.completion({"status": "requires_escalation", "continue_url": "u"})
    assert name == "Escalated" and data["continue_url"] == "u" and data["messages"]
    assert outcomes.completion({"status": "canceled", "id": "c"})[0] == "Revoked"
    name, data = outcomes.completion({"status": "ready_for_complete"})
    assert name == "Declined" and data["messages"][0]["code"] == "not_completed"
    assert outcomes.settled({"status": "incomplete"}) is None


def test_what_only_the_session_can_tell() -> None:
    assert outcomes.failed_completion(http(409, "CHECKOUT_NOT_MODIFIABLE")) is None
    assert outcomes.failed_completion(http(500, None)) is None
    assert outcomes.failed_completion(ProxyUnreachable("x")) is None
    assert outcomes.failed_completion(http(402, "UNKNOWN_TOKEN"))[0] == "Declined"  # type: ignore[index]
    open_session = {"status": "ready_for_complete"}
    assert outcomes.unknown(ProxyUnreachable("x"), open_session)[0] == "Declined"
    name, data = outcomes.unknown(ProxyUnreachable("x"), None)
    assert name == "Escalated" and "continue_url" not in data
    name, data = outcomes.unknown(http(500, None), {"status": "complete_in_progress",
                                                    "continue_url": "u"})
    assert (name, data["continue_url"]) == ("Escalated", "u")


# The demo plays each ending ------------------------------------------------------------


@pytest.mark.parametrize(("outcome", "ending"), list(OUTCOMES.items()))
async def test_the_demo_plays_each_ending(
    outcome: str, ending: str, capsys: pytest.CaptureFixture[str]
) -> None:
    executor = "peer" if outcome == "escalated" else "syncserver"
    code = await demo.demo("resilient", None, None, 30.0, executor=executor, outcome=outcome)
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert f"ending    {ending} (expected {ending})" in captured.out
    performed = re.findall(r"#\d+\s+(\w+)\s+by", captured.out)
    assert performed[-1] == ending


def test_the_demo_refuses_outcomes_it_cannot_play() -> None:
    for argv, says in [
        (["--outcome", "declined"], "--outcome needs --protocol resilient"),
        (["--protocol", "resilient", "--outcome", "declined", "--merchant", "http://x"],
         "drop --merchant"),
    ]:
        done = subprocess.run([sys.executable, "-m", "strabo.cli", "demo", *argv],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
