"""Proxy benchmark: UCP checkouts through Peach versus the same HTTP calls made directly.

    .venv/bin/python bench/proxy.py            # 200 checkouts each way
    .venv/bin/python bench/proxy.py --quick    # 40

The bundled merchant runs in its own process. The direct client makes, for each
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

Checkouts run one after the other (each waits for the last to complete). The
report gives the wall time per checkout, the ratio to the direct client, the
share of the merchant's requests in it, and the CPU time each process spends per checkout (from
/proc, on Linux): this process (the direct client, or the agents and the
proxy), the SyncServer and the merchant. The checkouts run one after the other,
so CPU time on the path of a checkout is wall time; it tells which process a
faster bridge has to make cheaper.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

from bench.syncserver import process, syncserver_command  # noqa: E402
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


async def merchant_process():
    return process(
        sys.executable, "-m", "strabo.cli", "merchant", "--port", "0", "--log-level", "warning"
    )


# The direct client --------------------------------------------------------------------


class Direct:
    """Checkouts with httpx (or, if ``lean``, the lean client the proxy uses),
    sending the requests the proxy would send."""

    def __init__(self, url: str, lean: bool = False) -> None:
        self.url = url
        self.client: Client = LeanClient(url, 10) if lean else HttpxClient(url, 10, None)

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

    def __init__(self, platform_executor: Any, proxy_executor: Any, merchant: str) -> None:
        protocol = LangshawProtocol.load(PROTOCOL)
        self.platform = PeachAdapter("platform", protocol, "Platform", platform_executor)
        self.proxy = business_proxy(proxy_executor, merchant)
        self.done: dict[str, asyncio.Event] = {}
        self.http = 0.0  # seconds spent in merchant requests
        self.proxy.http_listeners.append(self._on_http)

        @self.platform.on_enabled("Complete")
        async def complete(fa: FeasibleAction) -> None:
            await self.platform.attempt(
                [fa.bind(payment_data=SAMPLE_PAYMENT_DATA, risk_signals={"ip": "127.0.0.1"})]
            )

        @self.platform.on_completion
        async def completed(keys: dict, mas_id: str) -> None:
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
        self.spent: dict[str, dict[str, float]] = {"direct": {}, "lean": {}, "pipeline": {}}

    async def measure(self, way: str, checkout: Any) -> float:
        before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        took = await checkout()
        for name, pid in self.pids.items():
            start, end = before[name], cpu_seconds(pid)
            if start is not None and end is not None:
                self.spent[way][name] = self.spent[way].get(name, 0.0) + end - start
        return took


async def compare(
    merchant: str, pipeline: Pipeline, n: int, cpu: CPU
) -> tuple[list[float], list[float], list[float]]:
    """``n`` checkouts each way, in turn, so that all see the same machine."""
    direct_times, lean_times, pipeline_times = [], [], []
    direct, lean = Direct(merchant), Direct(merchant, lean=True)
    async with pipeline.proxy, pipeline.platform:
        for _ in range(5):  # warm up
            await direct.checkout()
            await lean.checkout()
            await pipeline.checkout()
        pipeline.http = 0.0
        for _ in range(n):
            direct_times.append(await cpu.measure("direct", direct.checkout))
            lean_times.append(await cpu.measure("lean", lean.checkout))
            pipeline_times.append(await cpu.measure("pipeline", pipeline.checkout))
    await direct.aclose()
    await lean.aclose()
    return direct_times, lean_times, pipeline_times


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


async def main(quick: bool) -> None:
    n = 40 if quick else 200
    print(f"strabo proxy benchmark: {n} SimpleUCP checkouts each way, one after the other,")
    print("the direct clients and the Peach pipeline in turn\n")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        # A merchant each (its stock lasts about a thousand checkouts).
        async with await merchant_process() as (host, port, merchant_pid):
            merchant = f"http://{host}:{port}"
            server = SyncServer.embedded(
                [LangshawProtocol.load(PROTOCOL)],
                {"platform": ["Platform"], "business": ["Business"]},
            )
            local = LocalExecutor(server)
            embedded = Pipeline(local, local, merchant)
            cpu = CPU({"this process": os.getpid(), "merchant": merchant_pid})
            times = await compare(merchant, embedded, n, cpu)
            results.append(("embedded SyncServer (LocalExecutor)", embedded, cpu, *times))
        sync_cmd = syncserver_command(_config(directory), directory / "s.db")
        async with (
            await merchant_process() as (host, port, merchant_pid),
            process(*sync_cmd) as (shost, sport, sync_pid),
        ):
            merchant = f"http://{host}:{port}"
            url = f"http://{shost}:{sport}"
            over_http = Pipeline(
                SyncExecutor(url, "platform"), SyncExecutor(url, "business"), merchant
            )
            cpu = CPU(
                {"this process": os.getpid(), "SyncServer": sync_pid, "merchant": merchant_pid}
            )
            times = await compare(merchant, over_http, n, cpu)
            results.append(("SyncServer over HTTP (SyncExecutor)", over_http, cpu, *times))

    async with process(sys.executable, str(ROOT / "bench" / "_servers.py")) as (host, port, _):
        with_httpx, minimal = await client_cost(host, port)
    relay = (sys.executable, str(ROOT / "bench" / "_servers.py"), "--relay")
    async with process(*relay) as (host, port, _):
        hop = await relay_hop(host, port)

    for label, pipeline, cpu, direct_times, lean_times, times in results:
        d, m = statistics.median(direct_times), statistics.median(times)
        lean_d = statistics.median(lean_times)
        print(f"Peach pipeline, {label}")
        print(f"    direct httpx client  {d * 1e3:7.2f} ms per checkout (median)")
        print(f"    direct lean client   {lean_d * 1e3:7.2f} ms per checkout (median)")
        print(
            f"    Peach pipeline       {m * 1e3:7.2f} ms per checkout (median)   "
            f"ratio {m / d:4.2f}x to httpx (target <= 1.3x), {m / lean_d:4.2f}x to the lean client"
        )
        total = sum(times)
        merchant_share = pipeline.http / total
        print(
            f"    where the time goes: merchant requests {merchant_share:5.1%}, the bridge "
            f"(attempts, events, handlers) {1 - merchant_share:5.1%}"
        )
        for way in ("direct", "lean", "pipeline"):
            spent = cpu.spent[way]
            if spent:
                parts = ", ".join(f"{name} {t / n * 1e3:.2f}" for name, t in spent.items())
                print(f"    CPU ms per checkout, {way:8}: {parts}")
        print()
    print("One small JSON request to a bare Starlette echo endpoint, median round trip:")
    print(
        f"    httpx {with_httpx * 1e3:.2f} ms, the lean HTTP/1.1 client {minimal * 1e3:.2f} ms "
        "(syncserver.client; the SyncExecutor and the proxy use the second, syncserver/http1.py; "
        "the executor's attempts ride its channel)"
    )
    print()
    print("What any server process costs: one line through a bare relay process, median:")
    print(
        f"    {hop * 1e3:.3f} ms a hop; a SimpleUCP checkout crosses the SyncServer {HOPS} times: "
        f"{HOPS * hop * 1e3:.2f} ms"
    )
    for label, _, _, direct_times, lean_times, times in results:
        d, m = statistics.median(direct_times), statistics.median(times)
        lean_d = statistics.median(lean_times)
        print(
            f"    {label}: the pipeline takes {(m - lean_d) * 1e3:+.2f} ms against the lean "
            f"direct client, {(m - d) * 1e3:+.2f} ms against the httpx one (1.3x allows "
            f"{0.3 * d * 1e3:+.2f} ms)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer checkouts")
    asyncio.run(main(parser.parse_args().quick))
