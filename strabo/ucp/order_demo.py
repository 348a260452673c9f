"""``strabo demo``'s order stage: after the checkout, the order through to delivery.

The Order capability runs as its own protocol (UCPOrder, ``protocols/ucp-order.lsh``)
on a SyncServer of its own, with two agents: the Business's
:class:`~strabo.ucp.order_proxy.OrderProxy`, which serves the webhook receiver
and the Platform's :class:`~strabo.ucp.order_platform.OrderWatcher`. The
checkout proxy's Platform profile declares the order capability with the
receiver's ``webhook_url`` (or, for a proxy that serves no profile, its
``UCP-Agent`` names the receiver's own), so the bundled merchant keeps the
webhook URL with the checkout and sends the order's events there, signed.

Once the checkout is complete, the stage plays the merchant's back office:
it ships the order (``POST /testing/simulate-shipping/{id}``) and records its
delivery (``PUT /orders/{id}`` with a ``delivered`` fulfillment event), then
waits until the Platform has seen ``Shipped`` and ``Delivered`` as protocol
actions, and prints them. Only ``demo`` calls it, in one place (:func:`stage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from langshaw import LangshawProtocol
from peach import Executor, SyncExecutor
from strabo.proxy import ProxyAdapter, ProxyRequest
from strabo.ucp.checkout import ucp_header_hook
from strabo.ucp.order_platform import OrderWatcher
from strabo.ucp.order_proxy import ORDER, PROFILE_PATH, PROTOCOL, WEBHOOK_PATH, OrderProxy
from syncserver.serving import serve

__all__ = ["stage"]


async def stage(stack: contextlib.AsyncExitStack, checkout_proxy: ProxyAdapter,
                done: asyncio.Event, failures: list[str], trace: Callable[[str], None], *,
                merchant_url: str, secret: str | None, version: str,
                seconds: float, peer: bool = False) -> asyncio.Event:
    """Set the order stage up around a checkout about to start.

    Returns the event the demo should wait for instead of ``done``: set once
    ``done`` is and the order has been delivered (or the stage failed, with the
    reason appended to ``failures``). ``secret`` is the bundled merchant's
    simulation secret; None (another merchant, or an ending without an order)
    skips the stage and returns ``done`` itself. ``peer``: the two agents are
    peers (``PeerExecutor``), as the checkout's, with no SyncServer."""
    if secret is None:
        return done
    business, platform, where = await _executors(stack, peer)
    proxy = OrderProxy(business, merchant_url, version=version)
    watcher = OrderWatcher(platform)
    receiver = await stack.enter_async_context(serve(proxy.app()))
    await stack.enter_async_context(proxy)
    await stack.enter_async_context(watcher)
    trace(f"  orders      {where} (UCPOrder), webhooks at {receiver}")
    declared = getattr(checkout_proxy, "declared", None)
    if isinstance(declared, dict):  # the proxy serves the Platform profile: add the webhook
        declared[ORDER] = {"config": {"webhook_url": receiver + WEBHOOK_PATH}}
    else:  # name the receiver's own profile instead
        _name_profile(checkout_proxy, receiver + PROFILE_PATH)
    finished = asyncio.Event()
    back_office = _BackOffice(merchant_url, secret, checkout_proxy, trace)

    async def run() -> None:
        try:
            await done.wait()
            if failures:
                return
            await _through_delivery(watcher, back_office, trace, seconds)
        except TimeoutError:
            failures.append(f"the order was not delivered within {seconds:g} s")
        except httpx.HTTPError as exc:
            failures.append(f"the merchant's back office failed: {exc}")
        except Exception as exc:  # an answer of another shape: a failure, never a success
            failures.append(f"the order stage failed: {type(exc).__name__}: {exc}")
        finally:
            finished.set()

    task = asyncio.ensure_future(run())

    async def end() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    stack.push_async_callback(end)
    return finished


async def _executors(stack: contextlib.AsyncExitStack, peer: bool
                     ) -> tuple[Executor, Executor, str]:
    """The executors of the order proxy and the watcher, and where they meet."""
    protocol = LangshawProtocol.load(PROTOCOL)
    if peer:
        import secrets

        from peach.peer import Directory, PeerExecutor
        from syncserver.serving import free_port

        agents = {name: {"roles": [role], "token": secrets.token_hex(16),
                         "url": f"http://127.0.0.1:{free_port()}"}
                  for name, role in (("orders", "Business"), ("platform-orders", "Platform"))}
        directory = Directory.of([protocol], agents, mas="orders")
        return (PeerExecutor("orders", directory), PeerExecutor("platform-orders", directory),
                "peer to peer")
    from syncserver import SyncServer, create_app, uvicorn_options

    roles = {"orders": ["Business"], "platform-orders": ["Platform"]}
    server = SyncServer.embedded([protocol], roles)
    url = await stack.enter_async_context(
        serve(create_app(server), **uvicorn_options(server.config.limits)))
    return SyncExecutor(url, "orders"), SyncExecutor(url, "platform-orders"), url


async def _through_delivery(watcher: OrderWatcher, office: _BackOffice,
                            trace: Callable[[str], None], seconds: float) -> None:
    placed = await watcher.wait_for(None, "Placed", seconds)
    oid = str(placed.keys["oid"])
    trace(f"\n  order {oid}: the merchant's webhooks, as UCPOrder actions")
    _show(watcher, oid, "Placed", trace)
    await office.ship(oid)
    _show(watcher, oid, (await watcher.wait_for(oid, "Shipped", seconds)).name, trace)
    await office.deliver(oid)
    _show(watcher, oid, (await watcher.wait_for(oid, "Delivered", seconds)).name, trace)


def _show(watcher: OrderWatcher, oid: str, name: str, trace: Callable[[str], None]) -> None:
    instance = watcher.instance(oid, name)
    if instance is not None:  # an event id the merchant chose may be long: cut to the column
        trace(f"       {fit(watcher.describe(instance), 40)} seen by the Platform")


def fit(text: str, width: int) -> str:
    """``text`` padded to ``width``, or cut to it with ``...`` (a closing
    parenthesis kept), so that what follows on the line stays in its column."""
    if len(text) <= width:
        return f"{text:<{width}}"
    tail = ")" if text.endswith(")") else ""
    return text[: width - 3 - len(tail)] + "..." + tail


def _name_profile(proxy: ProxyAdapter, profile: str) -> None:
    """Make the checkout proxy's ``UCP-Agent`` name ``profile`` (other parameters kept)."""
    hook = proxy.header_hook

    def named(request: ProxyRequest) -> dict[str, str]:
        headers = dict(hook(request)) if hook is not None else {}
        for name, value in list(headers.items()):
            if name.lower() == "ucp-agent":
                headers[name] = re.sub(r'profile="[^"]*"', f'profile="{profile}"', value)
        return headers

    proxy.header_hook = named


class _BackOffice:
    """The bundled merchant's back office, over its HTTP API."""

    def __init__(self, url: str, secret: str, proxy: ProxyAdapter,
                 trace: Callable[[str], None]) -> None:
        self.url = url.rstrip("/")
        self.secret = secret
        self.proxy = proxy
        self.trace = trace

    def _headers(self, method: str, target: str, body: Any) -> dict[str, str]:
        hook = self.proxy.header_hook
        request = ProxyRequest("Order", method, target, body, str(uuid.uuid4()), 1)
        return dict(hook(request)) if hook is not None else {}

    async def ship(self, oid: str) -> None:
        target = f"{self.url}/testing/simulate-shipping/{oid}"
        # The testing endpoint takes the 2026-01-11 headers whatever the version spoken.
        headers = ucp_header_hook(ProxyRequest("Order", "POST", target, None, "-", 1))
        headers |= self._headers("POST", target, None) | {"Simulation-Secret": self.secret}
        async with httpx.AsyncClient(timeout=10) as client:
            _check(await client.post(target, headers=headers))
        self.trace(f"       (merchant told: POST /testing/simulate-shipping/{oid})")

    async def deliver(self, oid: str) -> None:
        target = f"{self.url}/orders/{oid}"
        async with httpx.AsyncClient(timeout=10) as client:
            got = await client.get(target, headers=self._headers("GET", target, None))
            _check(got)
            lines = [{"id": item["id"], "quantity": item["quantity"]["total"]}
                     for item in got.json().get("line_items") or []]
            event = {"id": f"evt_{uuid.uuid4().hex[:12]}", "type": "delivered",
                     "occurred_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                     "line_items": lines, "description": "Delivered to the front door"}
            body = {"fulfillment": {"events": [event]}}
            response = await client.put(target, json=body,
                                        headers=self._headers("PUT", target, body))
            _check(response)
        self.trace(f"       (merchant told: PUT /orders/{oid}, a delivered event)")


def _check(response: httpx.Response) -> None:
    """Raise for an answer other than 2xx, with what the merchant said."""
    if not response.is_success:
        raise httpx.HTTPStatusError(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code}: {response.text[:300]}",
            request=response.request, response=response)
