"""``strabo demo``: one UCP checkout, every part running for real.

A SyncServer and (unless ``--merchant`` names another) the bundled UCP merchant
are served on loopback ports; the Platform agent and the Business proxy connect
to the SyncServer over HTTP, and the proxy to the merchant. The trace shows each
Langshaw action as it is finalized and each HTTP call the proxy makes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

DESCRIPTION = """\
Run one whole UCP checkout with embedded parts: a SyncServer, the bundled UCP
merchant, the Business proxy and the Platform agent, all on loopback.

It prints each Langshaw action as it is finalized (performer and keys), each
HTTP call the proxy makes (method, path, status), and a summary: checkout id,
order id and totals. Exit status 0 when the checkout completed.

To use another UCP merchant (the UCP samples' Python reference server, say),
give its base URL with --merchant; it must speak UCP 2026-01-11 and sell the
item 'bouquet_roses' (both the reference and the bundled merchant do).
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--merchant",
        metavar="URL",
        help="base URL of a running UCP merchant (default: start the bundled one)",
    )
    parser.add_argument(
        "--protocol",
        choices=["atomic", "incremental"],
        default="atomic",
        help="SimpleUCP, one Create for the whole checkout (default), or IncrementalUCP, "
        "one version per change",
    )
    parser.add_argument(
        "--policy",
        choices=["instant", "batched"],
        default="instant",
        help="the SyncServer's finalization policy (default instant)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up if the checkout is not complete by then (default 30)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    logging.basicConfig(level=logging.WARNING, format="  ! %(name)s: %(message)s")
    logging.getLogger("strabo.merchant").setLevel(logging.ERROR)
    return asyncio.run(demo(args.protocol, args.policy, args.merchant, args.timeout))


async def demo(protocol_name: str, policy: str, merchant: str | None, seconds: float) -> int:
    import asyncio
    import contextlib

    from langshaw import LangshawProtocol
    from peach import SyncExecutor
    from strabo import serve
    from strabo.merchant import create_app as merchant_app
    from strabo.proxy import ProxyError, ProxyRequest, Route
    from strabo.ucp.business_proxy import business_proxy, ucp_header_hook
    from strabo.ucp.incremental_platform import incremental_platform
    from strabo.ucp.incremental_proxy import incremental_proxy
    from strabo.ucp.platform_agent import PROTOCOL as ATOMIC
    from strabo.ucp.platform_agent import platform_agent
    from syncserver import SyncServer, create_app

    if protocol_name == "atomic":
        protocol = LangshawProtocol.load(ATOMIC)
        make_platform, make_proxy = platform_agent, business_proxy
    else:
        from strabo.ucp.incremental_platform import PROTOCOL as INCREMENTAL

        protocol = LangshawProtocol.load(INCREMENTAL)
        make_platform, make_proxy = incremental_platform, incremental_proxy
    server = SyncServer.embedded(
        [protocol], {"platform": ["Platform"], "business": ["Business"]}, policy=policy
    )
    failures: list[str] = []

    async with contextlib.AsyncExitStack() as stack:
        sync_url = await stack.enter_async_context(serve(create_app(server)))
        merchant_url: str = (
            merchant if merchant else await stack.enter_async_context(serve(merchant_app()))
        )
        print(f"strabo demo: a UCP checkout with {protocol.name}, {policy} finalization")
        print(f"  SyncServer  {sync_url} (log in memory)")
        print(f"  merchant    {merchant_url} ({'external' if merchant else 'bundled'})\n")
        if merchant and not await _reachable(merchant_url):
            print(f"strabo demo: no UCP merchant answers at {merchant_url}", file=sys.stderr)
            return 1

        proxy = make_proxy(SyncExecutor(sync_url, "business"), merchant_url)
        platform, done = make_platform(SyncExecutor(sync_url, "platform"))
        platform.listeners.append(lambda batch, newly: _print_batch(protocol, batch))
        proxy.http_listeners.append(_print_http)

        @proxy.on_error
        async def on_error(error: ProxyError, route: Route, trigger: Any) -> None:
            failures.append(f"{route.trigger}: {error.message}")
            done.set()

        async with proxy, platform:
            try:
                await asyncio.wait_for(done.wait(), seconds)
            except TimeoutError:
                failures.append(f"the checkout did not complete within {seconds:g} s")
            await platform.drain()
            history = [i for root in platform.enactments() for _, i, _ in platform.history(root)]

        if failures or not any(i.name == "Completed" for i in history):
            print("\nThe checkout did not complete:", file=sys.stderr)
            for failure in failures or ["the merchant refused it (see above)"]:
                print(f"  {failure}", file=sys.stderr)
            return 1
        checkout = next(i["id"] for i in history if i.name == "Created")
        order = next(i["order"] for i in history if i.name == "Completed")
        session = await _session(merchant_url, checkout, ucp_header_hook, ProxyRequest)
    print("\nSummary")
    print(f"  checkout  {checkout} ({session.get('status', '?')})")
    print(f"  order     {(order or {}).get('id')}")
    print(f"  totals    {_totals(session)}")
    return 0


def _print_batch(protocol: Any, batch: Any) -> None:
    for entry in batch.entries:
        instance = entry.instance
        keys = " ".join(f"{k}={v}" for k, v in instance.keys.items())
        print(f"  #{batch.seq:<3} {instance.name:<17} by {entry.performer:<9} {keys}", flush=True)


def _print_http(event: Any) -> None:
    status = event.status if event.status is not None else f"no answer ({event.error})"
    retry = f"  (try {event.attempt})" if event.attempt > 1 else ""
    print(
        f"       HTTP {event.method:<5} {event.path:<60} {status}  {event.seconds * 1000:.1f} ms"
        f"{retry}",
        flush=True,
    )


async def _reachable(url: str) -> bool:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(url.rstrip("/") + "/.well-known/ucp")
        return response.status_code < 500
    except httpx.HTTPError:
        return False


async def _session(url: str, checkout: str, hook: Any, request: Any) -> dict[str, Any]:
    """The session as the merchant sees it now (for the summary only)."""
    import httpx

    target = f"{url.rstrip('/')}/checkout-sessions/{checkout}"
    headers = dict(hook(request("Get", "GET", target, None, "-", 1)))
    headers.pop("Idempotency-Key", None)
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(target, headers=headers)
        return response.json() if response.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}


def _totals(session: dict[str, Any]) -> str:
    currency = session.get("currency", "")
    parts = []
    for total in session.get("totals") or []:
        amount = total.get("amount", 0) / 100
        sign = "-" if total.get("type") == "discount" else ""
        parts.append(f"{total.get('type')} {sign}{amount:.2f}")
    return (", ".join(parts) + f" {currency}").strip() or "(unknown)"
