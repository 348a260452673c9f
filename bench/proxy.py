"""Proxy benchmark: UCP checkouts through Peach versus the same calls made directly.

    .venv/bin/python bench/proxy.py                    # every transport, 150 checkouts each way
    .venv/bin/python bench/proxy.py --quick            # 40
    .venv/bin/python bench/proxy.py --transport mcp    # one transport (rest, mcp, a2a)

For each checkout transport (:data:`TRANSPORTS`), the Business proxy sends
checkout over it (``business_proxy(..., transport=...)``) and a direct client of
that transport makes the same calls; the ratio of the medians is the proxy's
cost (the goal: at most 1.3x the direct client). Over REST the merchant speaks
UCP 2026-01-11 (its default); over MCP and A2A, 2026-04-08. Over MCP the
direct client is the official ``mcp`` SDK's streamable-HTTP ``ClientSession``,
one session, calling the proxy's tools with the proxy's arguments (and a second
one, the proxy's own lean MCP client, tells what the bridge costs beyond the
choice of client, as the lean clients of REST and A2A do); over A2A,
JSON-RPC ``message/send`` posted with httpx (and with the proxy's lean client),
with the proxy's messages and headers (bench/_direct.py checks that they are
the same before measuring).

The bundled merchant runs in its own process. Over REST the direct client makes, for each
checkout, the requests the Business proxy makes (POST the session, PUT the
destination, PUT the shipping option, POST complete) with httpx and the same
headers; so does a second direct client, with the lean HTTP/1.1 client the proxy
itself uses (``syncserver.client.LeanClient``, over syncserver/http1.py); both
through the project's one client interface (``syncserver.client``, httpx's as
``HttpxClient``). The first is the issue's yardstick (what a
platform would write by hand); the second tells what the bridge costs beyond the
choice of HTTP client. The Peach pipeline runs the SimpleUCP Platform agent and the Business
proxy of strabo/ucp, with the SyncServer

* in its own process, over HTTP, with the SQLite store (the distributed set-up;
  each agent's attempts, answers and events on one channel per protocol);
* in the agents' process, through the LocalExecutor (the embedded set-up).

Checkouts run one after the other (each waits for the last to complete), one
each way in turn, the direct clients' and the pipeline's (in an order drawn at
random each round), so that all see the same machine. The report gives the
wall time per checkout, the ratio to the direct client, the share of the
merchant's requests in it, and the CPU time each process spends per checkout (from
/proc, on Linux): this process (the direct client, or the agents and the
proxy), the SyncServer and the merchant. The checkouts run one after the other,
so CPU time on the path of a checkout is wall time; it tells which process a
faster bridge has to make cheaper.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

from bench._checkout import process  # noqa: E402
from bench._direct import A2aDirect, McpDirect, check_a2a, check_mcp  # noqa: E402
from bench.syncserver import syncserver_command  # noqa: E402
from langshaw import LangshawProtocol  # noqa: E402
from peach import FeasibleAction, LocalExecutor, PeachAdapter, SyncExecutor  # noqa: E402
from strabo.proxy import ProxyRequest  # noqa: E402
from strabo.ucp.business_proxy import business_proxy, shipping_steps, ucp_header_hook  # noqa: E402
from strabo.ucp.platform_agent import (  # noqa: E402
    PROTOCOL,
    SAMPLE_BUYER,
    SAMPLE_FULFILLMENT_PREF,
    SAMPLE_LINE_ITEMS,
    SAMPLE_PAYMENT_DATA,
)
from syncserver import SyncServer  # noqa: E402
from syncserver.client import Client, HttpxClient, LeanClient  # noqa: E402

#: Attempts on a checkout's path, each a hop through the SyncServer to the other
#: agent: Create, Created, Complete, Completed.
HOPS = 4

CREATE = {
    "line_items": SAMPLE_LINE_ITEMS,
    "currency": "USD",
    "buyer": SAMPLE_BUYER,
    "payment_pref": {},
    "discount_codes": {"codes": ["10OFF"]},
    "fulfillment_pref": SAMPLE_FULFILLMENT_PREF,
}


async def merchant_process(*options: str) -> Any:
    return process(
        sys.executable, "-m", "strabo.cli", "merchant", "--port", "0", "--log-level", "warning",
        *options,
    )


# The direct client --------------------------------------------------------------------


class Direct:
    """Checkouts with httpx (or, if ``lean``, the lean client the proxy uses),
    sending the requests the proxy would send."""

    def __init__(self, url: str, lean: bool = False) -> None:
        self.url = url
        self.client: Client = LeanClient(url, 10) if lean else HttpxClient(url, 10, None)
        self.name = "lean" if lean else "direct"
        self.label = "direct lean client" if lean else "direct httpx client"

    async def open(self) -> None:
        """Nothing to open: the client connects on its first request."""

    async def send(self, method: str, path: str, body: Any) -> Any:
        headers = self.headers(method, self.url + path, body)
        answer = await self.client.request(method, path, body, headers)
        assert answer.status_code < 300, answer.text
        return answer.json()

    async def aclose(self) -> None:
        await self.client.aclose()

    def headers(self, method: str, target: str, body: Any) -> dict[str, str]:
        return ucp_header_hook(ProxyRequest("direct", method, target, body, _uuid(), 1))

    async def checkout(self) -> float:
        start = time.perf_counter()
        first, *more = shipping_steps(SAMPLE_FULFILLMENT_PREF)
        body = {
            "line_items": SAMPLE_LINE_ITEMS,
            "currency": "USD",
            "buyer": SAMPLE_BUYER,
            "payment": {},
            "discounts": {"codes": ["10OFF"]},
            "fulfillment": first,
        }
        session = await self.send("POST", "/checkout-sessions", body)
        target = f"/checkout-sessions/{session['id']}"
        for step in more:
            line_items = [
                {
                    "id": li["id"],
                    "quantity": li["quantity"],
                    "item": {k: li["item"][k] for k in ("id", "title")},
                }
                for li in session["line_items"]
            ]
            body = {
                "id": session["id"],
                "line_items": line_items,
                "currency": "USD",
                "buyer": SAMPLE_BUYER,
                "payment": {},
                "discounts": {"codes": ["10OFF"]},
                "fulfillment": step,
            }
            session = await self.send("PUT", target, body)
        body = {
            "id": session["id"],
            "payment_data": SAMPLE_PAYMENT_DATA,
            "risk_signals": {"ip": "127.0.0.1"},
        }
        await self.send("POST", target + "/complete", body)
        return time.perf_counter() - start


def _uuid() -> str:
    import uuid

    return str(uuid.uuid4())


# The Peach pipeline ---------------------------------------------------------------------


class Pipeline:
    """The Platform of strabo/ucp (Listing 5's handlers), creating checkouts one by
    one, and the Business proxy of strabo/ucp; with timings."""

    def __init__(
        self, platform_executor: Any, proxy_executor: Any, merchant: str, transport: str = "rest"
    ) -> None:
        protocol = LangshawProtocol.load(PROTOCOL)
        self.platform = PeachAdapter("platform", protocol, "Platform", platform_executor)
        self.proxy = business_proxy(proxy_executor, merchant, transport=transport)
        self.done: dict[str, asyncio.Event] = {}
        self.http = 0.0  # seconds spent in merchant requests
        self.proxy.http_listeners.append(self._on_http)

        @self.platform.on_enabled("Complete")
        async def complete(fa: FeasibleAction) -> None:
            await self.platform.attempt(
                [fa.bind(payment_data=SAMPLE_PAYMENT_DATA, risk_signals={"ip": "127.0.0.1"})]
            )

        @self.platform.on_completion
        async def completed(keys: dict[str, Any], mas_id: str) -> None:
            self.done[keys["cid"]].set()

    def _on_http(self, event: Any) -> None:
        self.http += event.seconds

    async def checkout(self) -> float:
        start = time.perf_counter()
        create = self.platform.initiating()[0].bind(**CREATE)
        event = self.done[create["cid"]] = asyncio.Event()
        await self.platform.attempt([create])
        await event.wait()
        return time.perf_counter() - start


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` (Linux's /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CPU:
    """CPU time per checkout of each process, for each way of checking out."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.spent: dict[str, dict[str, float]] = {}

    async def measure(self, way: str, checkout: Any) -> float:
        before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        took: float = await checkout()
        spent = self.spent.setdefault(way, {})
        for name, pid in self.pids.items():
            start, end = before[name], cpu_seconds(pid)
            if start is not None and end is not None:
                spent[name] = spent.get(name, 0.0) + end - start
        return took


# The transports ------------------------------------------------------------------------


@dataclass(frozen=True)
class Transport:
    """A checkout transport the proxy speaks, and how to measure it.

    ``directs`` makes the direct clients for a merchant's URL, the yardstick
    (the ratio's denominator) first; ``check``, if any, runs once after the
    warm-up and refuses to measure unless the direct client makes the proxy's
    calls. Adding a transport is a direct client (bench/_direct.py) and an
    entry in :data:`TRANSPORTS`."""

    merchant_options: tuple[str, ...]
    directs: Callable[[str], list[Any]]
    about: str
    check: Callable[[Any, Any], Awaitable[None]] | None = None


TRANSPORTS: dict[str, Transport] = {
    "rest": Transport(
        (),
        lambda url: [Direct(url), Direct(url, lean=True)],
        "UCP 2026-01-11 over REST; direct: httpx (the yardstick) and the proxy's lean client",
    ),
    "mcp": Transport(
        ("--ucp-version", "2026-04-08"),
        lambda url: [McpDirect(url), McpDirect(url, lean=True)],
        "UCP 2026-04-08 over MCP (streamable HTTP); direct: the mcp SDK's ClientSession "
        "(the yardstick) and the proxy's lean MCP client",
        check=check_mcp,
    ),
    "a2a": Transport(
        ("--ucp-version", "2026-04-08"),
        lambda url: [A2aDirect(url), A2aDirect(url, lean=True)],
        "UCP 2026-04-08 over A2A (JSON-RPC message/send); direct: httpx (the yardstick) "
        "and the proxy's lean client",
        check=check_a2a,
    ),
}

WARM_UP = 5


async def compare(
    pipeline: Pipeline, directs: list[Any], n: int, cpu: CPU, transport: Transport, title: str
) -> dict[str, list[float]]:
    """``n`` checkouts each way, one each way in turn (the direct clients' and the
    pipeline's, in an order drawn at random each round), so that all see the same
    machine; the seconds each took, by way (``"pipeline"`` and each direct's name)."""
    times: dict[str, list[float]] = {way: [] for way in [d.name for d in directs] + ["pipeline"]}
    ways = [(d.name, d.checkout) for d in directs] + [("pipeline", pipeline.checkout)]
    order = random.Random(0)
    for way, _ in ways:  # the report's order
        cpu.spent.setdefault(way, {})
    async with contextlib.AsyncExitStack() as stack:
        for direct in directs:
            await direct.open()
            stack.push_async_callback(direct.aclose)
        async with pipeline.proxy, pipeline.platform:
            for _ in range(WARM_UP):
                for _, checkout in ways:
                    await checkout()
            if transport.check is not None:
                await transport.check(pipeline, directs[0])
            pipeline.http = 0.0
            quarters = {n * k // 4 for k in (1, 2, 3, 4)}
            for i in range(n):
                for way, checkout in ways if order.random() < 0.5 else ways[::-1]:
                    times[way].append(await cpu.measure(way, checkout))
                if i + 1 in quarters:
                    print(f"    {title}: {i + 1}/{n}", flush=True)
            # The Business's last Completed may still await its answer (the
            # Platform hears of it first): let it land before the servers stop.
            await pipeline.proxy.drain()
    return times


async def client_cost(host: str, port: int) -> tuple[float, float]:
    """Median round trip of one small POST (its answer parsed) with httpx and with
    the lean client, both through ``syncserver.client``."""
    body = {"instances": [{"action": "Create", "bindings": {"cid": "x", "line_items": [1, 2]}}]}
    url = f"http://{host}:{port}"
    clients: list[Client] = [HttpxClient(url, 5, None), LeanClient(url, 5)]
    timings: list[list[float]] = [[], []]
    for i in range(1200):
        for client, spent in zip(clients, timings, strict=True):
            start = time.perf_counter()
            (await client.request("POST", "/echo", body)).json()
            if i >= 200:
                spent.append(time.perf_counter() - start)
    for client in clients:
        await client.aclose()
    return statistics.median(timings[0]), statistics.median(timings[1])


async def relay_hop(host: str, port: int) -> float:
    """Median time for a line to cross a bare relay process (bench/_servers.py
    --relay) from one of this process's connections to another, with both
    processes idle before each line, as they are while the merchant answers."""
    sender = await asyncio.open_connection(host, port)
    receiver = await asyncio.open_connection(host, port)
    line = b"x" * 300 + b"\n"
    sender[1].write(line)  # the relay pairs connections in the order they connect
    await sender[1].drain()
    await receiver[0].readline()
    timings = []
    for i in range(1200):
        await asyncio.sleep(0.002)  # idle like a checkout waiting on the merchant
        start = time.perf_counter()
        sender[1].write(line)
        await receiver[0].readline()
        if i >= 200:
            timings.append(time.perf_counter() - start)
    for _, writer in (sender, receiver):
        writer.close()
    return statistics.median(timings)


def _config(directory: Path) -> Path:
    path = directory / "ucp.toml"
    path.write_text(
        f'[mas.default]\nprotocols = ["{PROTOCOL}"]\n'
        '[mas.default.agents.platform]\nroles = ["Platform"]\ntoken = "platform"\n'
        '[mas.default.agents.business]\nroles = ["Business"]\ntoken = "business"\n'
    )
    return path


@dataclass
class Result:
    transport: str
    setup: str
    pipeline: Pipeline
    cpu: CPU
    directs: list[Any]
    times: dict[str, list[float]]

    def median(self, way: str) -> float:
        return statistics.median(self.times[way])

    @property
    def yardstick(self) -> Any:
        return self.directs[0]

    @property
    def ratio(self) -> float:
        return self.median("pipeline") / self.median(self.yardstick.name)


async def measure(name: str, transport: Transport, n: int, directory: Path) -> list[Result]:
    """The pipeline against the direct clients of ``transport``, embedded and
    over HTTP; a merchant process each (its stock lasts about a thousand checkouts)."""
    results = []
    async with await merchant_process(*transport.merchant_options) as (host, port, merchant_pid):
        merchant = f"http://{host}:{port}"
        server = SyncServer.embedded(
            [LangshawProtocol.load(PROTOCOL)],
            {"platform": ["Platform"], "business": ["Business"]},
        )
        local = LocalExecutor(server)
        embedded = Pipeline(local, local, merchant, name)
        cpu = CPU({"this process": os.getpid(), "merchant": merchant_pid})
        directs = transport.directs(merchant)
        times = await compare(embedded, directs, n, cpu, transport, f"{name}, embedded")
        results.append(Result(name, EMBEDDED, embedded, cpu, directs, times))
    sync_cmd = syncserver_command(_config(directory), directory / f"{name}.db")
    async with (
        await merchant_process(*transport.merchant_options) as (host, port, merchant_pid),
        process(*sync_cmd) as (shost, sport, sync_pid),
    ):
        merchant = f"http://{host}:{port}"
        url = f"http://{shost}:{sport}"
        over_http = Pipeline(
            SyncExecutor(url, "platform"), SyncExecutor(url, "business"), merchant, name
        )
        cpu = CPU({"this process": os.getpid(), "SyncServer": sync_pid, "merchant": merchant_pid})
        directs = transport.directs(merchant)
        times = await compare(over_http, directs, n, cpu, transport, f"{name}, over HTTP")
        results.append(Result(name, OVER_HTTP, over_http, cpu, directs, times))
    return results


def _load() -> str:
    """The machine's load averages (1, 5, 15 minutes): the ratios hold on a busy
    machine, the times do not."""
    try:
        return ", ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


EMBEDDED = "embedded SyncServer (LocalExecutor)"
OVER_HTTP = "SyncServer over HTTP (SyncExecutor)"
GOAL = 1.3


def report(result: Result, n: int) -> None:
    yardstick = result.yardstick
    d, m = result.median(yardstick.name), result.median("pipeline")
    print(f"{result.transport}: Peach pipeline, {result.setup}")
    for direct in result.directs:
        print(f"    {direct.label:26} {result.median(direct.name) * 1e3:7.2f} ms per checkout "
              "(median)")
    others = "".join(f", {m / result.median(o.name):4.2f}x to the {o.label}"
                     for o in result.directs[1:])
    print(
        f"    {'Peach pipeline':26} {m * 1e3:7.2f} ms per checkout (median)   "
        f"ratio {m / d:4.2f}x to the {yardstick.label} (goal <= {GOAL}x){others}"
    )
    merchant_share = result.pipeline.http / sum(result.times["pipeline"])
    print(
        f"    where the time goes: merchant requests {merchant_share:5.1%}, the bridge "
        f"(attempts, events, handlers) {1 - merchant_share:5.1%}"
    )
    for way, spent in result.cpu.spent.items():
        parts = ", ".join(f"{name} {t / n * 1e3:.2f}" for name, t in spent.items())
        print(f"    CPU ms per checkout, {way:8}: {parts}")
    print()


async def main(quick: bool, transports: list[str]) -> None:
    n = 40 if quick else 150  # the default run, every transport, in about two minutes
    print(f"strabo proxy benchmark: {n} SimpleUCP checkouts each way, one after the other,")
    print(f"the direct clients and the Peach pipeline in turn; transports: {', '.join(transports)}")
    print(f"(load average {_load()} at the start)")
    for name in transports:
        print(f"    {name}: {TRANSPORTS[name].about}")
    print(flush=True)
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in transports:
            results += await measure(name, TRANSPORTS[name], n, Path(tmp))
    print()
    for result in results:
        report(result, n)

    if "rest" in transports:
        async with process(sys.executable, str(ROOT / "bench" / "_servers.py")) as (
            host, port, _
        ):
            with_httpx, minimal = await client_cost(host, port)
        relay = (sys.executable, str(ROOT / "bench" / "_servers.py"), "--relay")
        async with process(*relay) as (host, port, _):
            hop = await relay_hop(host, port)
        print("One small JSON request to a bare Starlette echo endpoint, median round trip:")
        print(
            f"    httpx {with_httpx * 1e3:.2f} ms, the lean HTTP/1.1 client {minimal * 1e3:.2f} ms "
            "(syncserver.client; the SyncExecutor and the proxy use the second, "
            "syncserver/http1.py; the executor's attempts ride its channel)"
        )
        print()
        print("What any server process costs: one line through a bare relay process, median:")
        print(
            f"    {hop * 1e3:.3f} ms a hop; a SimpleUCP checkout crosses the SyncServer {HOPS} "
            f"times: {HOPS * hop * 1e3:.2f} ms"
        )
    print("What the pipeline adds to a checkout, against each direct client:")
    for result in results:
        d, m = result.median(result.yardstick.name), result.median("pipeline")
        against = "".join(f", {(m - result.median(o.name)) * 1e3:+.2f} ms against the {o.label}"
                          for o in result.directs[1:])
        print(
            f"    {result.transport}, {result.setup}: the pipeline takes {(m - d) * 1e3:+.2f} ms "
            f"against the {result.yardstick.label}{against} "
            f"({GOAL}x allows {(GOAL - 1) * d * 1e3:+.2f} ms)"
        )
    print()
    print(f"Summary: the proxy against a direct client of its transport (goal <= {GOAL}x; "
          f"load average {_load()})")
    print(f"    {'transport':9} {'set-up':36} {'direct':>9} {'proxy':>9} {'ratio':>6}  goal")
    for result in results:
        d, m = result.median(result.yardstick.name), result.median("pipeline")
        print(
            f"    {result.transport:9} {result.setup:36} {d * 1e3:6.2f} ms {m * 1e3:6.2f} ms "
            f"{m / d:5.2f}x  {'met' if m / d <= GOAL else 'NOT met'}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer checkouts")
    parser.add_argument(
        "--transport",
        choices=[*TRANSPORTS, "all"],
        default="all",
        help="the checkout transport to measure (default: all of them, in turn)",
    )
    arguments = parser.parse_args()
    chosen = list(TRANSPORTS) if arguments.transport == "all" else [arguments.transport]
    asyncio.run(main(arguments.quick, chosen))
