"""A merchant that answers in an earlier draft's shapes (Google's Node.js sample):
the Platform is told, and an order placed is never cancelled.

The Node.js sample merchant answers ``complete`` with a top-level ``order_id``
and ``order_permalink_url`` instead of ``order: {id, permalink_url}``, and
prices shipping options with numbers instead of a ``totals`` list. The proxies
read both as UCP has them (strabo.ucp.lenient). An answer with an ``order_id``
alone cannot be read as an order: SimpleUCP escalates naming the order,
IncrementalUCP says StatusChange ``completed``, ResilientUCP says Escalated
naming the order; none of them cancels.

Real servers: the bundled merchant on a loopback port behind :class:`Draft`,
which rewrites its answers into the Node.js sample's shapes, an in-process
SyncServer, the sample agents.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

import jsonpath_ng
import pytest

from langshaw import ActionInstance
from peach import LocalExecutor, PeachAdapter
from strabo import serve
from strabo.merchant import create_app, merchant_of
from strabo.ucp import lenient
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.incremental_platform import incremental_platform
from strabo.ucp.incremental_proxy import incremental_proxy, status_after
from strabo.ucp.platform_agent import platform_agent
from strabo.ucp.resilient_platform import ResilientPlatform
from strabo.ucp.resilient_proxy import resilient_proxy
from syncserver import SyncServer
from tests.conftest import load

ASGI = Callable[..., Awaitable[None]]
WAIT = 20.0  # seconds: a bound on every wait, never a delay
FILES = {"atomic": "atomic-ucp.lsh", "incremental": "incremental-ucp.lsh",
         "resilient": "resilient-ucp.lsh"}


def node_shapes(answer: dict[str, Any], *, permalink: bool) -> dict[str, Any]:
    """``answer`` as the Node.js sample merchant shapes it."""
    order = answer.pop("order", None)
    if isinstance(order, dict):
        answer["order_id"] = order["id"]
        if permalink:
            answer["order_permalink_url"] = order["permalink_url"]
    for method in (answer.get("fulfillment") or {}).get("methods") or []:
        for group in method.get("groups") or []:
            for option in group.get("options") or []:
                totals = {t["type"]: t["amount"] for t in option.pop("totals", [])}
                option["total"] = totals.get("total", 0)
                option["subtotal"] = totals.get("subtotal", option["total"])
    return answer


class Draft:
    """The merchant, its checkout answers rewritten by :func:`node_shapes`; every
    request's method and path kept."""

    def __init__(self, app: ASGI, *, permalink: bool) -> None:
        self.app, self.permalink = app, permalink
        self.requests: list[tuple[str, str]] = []

    def cancels(self) -> list[str]:
        return [path for method, path in self.requests if path.endswith("/cancel")]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.requests.append((scope["method"], scope["path"]))
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def keep(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, keep)
        body = b"".join(chunks)
        if scope["path"].startswith("/checkout-sessions") and start["status"] < 300:
            body = json.dumps(node_shapes(json.loads(body), permalink=self.permalink)).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": start["status"], "headers": headers})
        await send({"type": "http.response.body", "body": body})


def mas(protocol: str) -> LocalExecutor:
    return LocalExecutor(SyncServer.embedded(
        [load(FILES[protocol])], {"platform": ["Platform"], "business": ["Business"]}))


def agents(protocol: str, url: str) -> tuple[Any, PeachAdapter, asyncio.Event]:
    executor = mas(protocol)
    if protocol == "atomic":
        return business_proxy(executor, url), *platform_agent(executor)
    if protocol == "incremental":
        return incremental_proxy(executor, url), *incremental_platform(executor)
    platform = ResilientPlatform(executor)
    return resilient_proxy(executor, url), platform, platform.done


def watch(platform: PeachAdapter) -> list[ActionInstance]:
    seen: list[ActionInstance] = []

    @platform.observation()
    async def observe(action: ActionInstance, performer: str) -> None:
        seen.append(action)

    return seen


# The lenient reading, as pure functions -------------------------------------------


def test_the_node_samples_order_is_read_as_ucps_and_logged_as_a_deviation() -> None:
    answer = {"id": "c1", "status": "completed", "order_id": "ord_1",
              "order_permalink_url": "http://localhost:8080/orders/ord_1"}
    read, deviations = lenient.read(answer)
    assert read["order"] == {"id": "ord_1", "permalink_url": "http://localhost:8080/orders/ord_1"}
    assert len(deviations) == 1 and "order_id" in deviations[0]
    assert "order" not in answer  # the answer itself is left as it was


def test_an_order_id_alone_is_not_made_an_order_but_is_known_as_placed() -> None:
    answer = {"id": "c1", "status": "completed", "order_id": "ord_1"}
    read, deviations = lenient.read(answer)
    assert read is answer and deviations == [] and "order" not in read
    assert lenient.order_placed(answer) == "ord_1"
    assert lenient.order_placed({"order": {"id": "o2", "permalink_url": "u"}}) == "o2"
    assert lenient.order_placed({"status": "completed"}) is None


def test_an_answer_that_fits_is_left_as_it_is() -> None:
    answer = {"id": "c1", "order": {"id": "o", "permalink_url": "u"},
              "fulfillment": {"methods": [{"groups": [{"options": [
                  {"id": "std", "title": "S", "totals": [{"type": "total", "amount": 5}]}]}]}]}}
    assert lenient.read(answer) == (answer, [])
    assert lenient.read("not a session") == ("not a session", [])


def test_numeric_option_prices_become_a_totals_list() -> None:
    answer = {"fulfillment": {"methods": [{"groups": [{"options": [
        {"id": "std-ship", "title": "Standard", "total": 500, "subtotal": 500, "tax": 0}]}]}]}}
    read, [deviation] = lenient.read(answer)
    [option] = read["fulfillment"]["methods"][0]["groups"][0]["options"]
    assert option == {"id": "std-ship", "title": "Standard", "totals": [
        {"type": "subtotal", "amount": 500}, {"type": "tax", "amount": 0},
        {"type": "total", "amount": 500}]}
    assert "totals" in deviation


def test_the_status_a_failed_complete_reports() -> None:
    """Only an open session (no order) lets the Platform cancel."""
    assert status_after("completed", None) == "completed"
    assert status_after(None, {"status": "completed"}) == "completed"
    assert status_after(None, {"status": "ready_for_complete"}) == "requires_escalation"
    assert status_after(None, None) == "complete_in_progress"  # unknown
    assert status_after(None, {"status": "complete_in_progress"}) == "complete_in_progress"


# Against the merchant --------------------------------------------------------------


@pytest.mark.parametrize("protocol", list(FILES))
async def test_the_node_samples_order_completes_every_protocol(
    protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app()
    draft = Draft(app, permalink=True)
    async with serve(draft) as url:
        proxy, platform, done = agents(protocol, url)
        seen = watch(platform)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), WAIT)
            await platform.drain()
    [order] = merchant_of(app).orders()
    completed = seen[-1]
    assert completed.name == "Completed" and completed["order"]["id"] == order.id
    assert completed["order"]["permalink_url"] == order.permalink_url
    assert any("order_id" in d for d in proxy.deviations)
    assert any("order_permalink_url" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records)
    assert draft.cancels() == [] and proxy.escalations == []


async def test_simple_ucp_an_order_id_alone_is_an_escalation_naming_the_order() -> None:
    """SimpleUCP has no action for it (after Created, only Completed): the
    escalation names the order; nothing cancels it."""
    app = create_app()
    draft = Draft(app, permalink=False)
    async with serve(draft) as url:
        proxy, platform, _ = agents("atomic", url)
        seen = watch(platform)
        async with proxy, platform:
            await asyncio.wait_for(proxy.escalated.wait(), WAIT)
            await platform.drain()
    [order] = merchant_of(app).orders()
    [escalation] = proxy.escalations
    assert escalation.action == "Complete" and escalation.order == order.id
    assert "order" in escalation.error["message"]
    assert [a.name for a in seen] == ["Create", "Created", "Complete"]
    assert draft.cancels() == []


async def incremental_checkout(
    service: ASGI, adjust: Callable[[Any], None] = lambda proxy: None
) -> tuple[Any, list[ActionInstance]]:
    """An IncrementalUCP checkout against ``service`` (its proxy first
    ``adjust``-ed); the proxy, and every action the Platform saw."""
    async with serve(service) as url:
        proxy, platform, done = agents("incremental", url)
        adjust(proxy)
        seen = watch(platform)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), WAIT)
            await platform.drain()
    return proxy, seen


def said_completed(app: ASGI, proxy: Any, seen: list[ActionInstance]) -> None:
    """The order was placed, and the Platform told so by StatusChange, not Completed."""
    [order] = merchant_of(app).orders()
    assert [a.name for a in seen][-2:] == ["Complete", "StatusChange"]
    assert seen[-1]["status"] == "completed"
    assert proxy.placed[order.checkout_id] == order.id


async def test_incremental_ucp_an_order_id_alone_is_a_status_change_never_cancelled() -> None:
    app = create_app()
    draft = Draft(app, permalink=False)
    proxy, seen = await incremental_checkout(draft)
    said_completed(app, proxy, seen)
    assert "Cancel" not in [a.name for a in seen] and draft.cancels() == []


async def test_resilient_ucp_an_order_id_alone_is_escalated_naming_the_order() -> None:
    app = create_app()
    draft = Draft(app, permalink=False)
    async with serve(draft) as url:
        proxy, platform, done = agents("resilient", url)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), WAIT)
    [order] = merchant_of(app).orders()
    ending = platform.outcome
    assert ending is not None and ending.name == "Escalated"
    [message] = ending["messages"]
    assert message["code"] == "invalid_answer"
    assert message["severity"] == "requires_buyer_review"
    assert f"placed order {order.id}" in message["content"]
    assert draft.cancels() == []


@pytest.mark.parametrize("protocol", ["atomic", "incremental"])
async def test_the_demo_surfaces_the_order_it_cannot_say(
    protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from strabo.demo import demo

    app = create_app()
    draft = Draft(app, permalink=False)
    async with serve(draft) as url:
        code = await demo(protocol, None, url, WAIT)
    [order] = merchant_of(app).orders()
    err = capsys.readouterr().err
    assert code == 1
    assert f"the merchant placed order {order.id}" in err and "not cancelled" in err
    assert draft.cancels() == []


async def test_incremental_ucp_an_answer_complete_cannot_read_is_a_status_change() -> None:
    # The Complete route maps no response path today; one that the answer
    # breaks (here: it selects several values) used to raise outside the
    # handler's try, leaving Complete unanswered. Now the order the merchant
    # placed is said as StatusChange, as for any answer that does not fit.
    def unreadable(proxy: Any) -> None:
        complete = proxy.routes["Complete"]
        proxy.routes["Complete"] = dataclasses.replace(
            complete, response_map={"order": jsonpath_ng.parse("$..id")})

    app = create_app()
    proxy, seen = await incremental_checkout(app, unreadable)
    said_completed(app, proxy, seen)
