"""One hop through the SyncServer: an agent's attempt until another agent has it.

    .venv/bin/python bench/hop.py            # 2000 attempts each way
    .venv/bin/python bench/hop.py --quick    # 300

`strabo syncserver` (SQLite) runs in its own process. Two agents, each with
its own SyncExecutor: the Platform attempts Create, one after the other, and
the Business, subscribed, applies each. Two ways, alternating in rounds of 100
so that both see the same machine:

* channel: attempts, answers and events on one upgraded connection per agent
  (the SyncExecutor's default);
* plain HTTP: attempts POSTed, events on ``.../events`` (``channel=False``).

Reported per way: the median time from the Platform's ``attempt()`` call to the
Business applying the batch (the hop the other agent waits on), the median time
to the Platform's answer, and the CPU time of the SyncServer and of this
process (both agents) per attempt, from /proc (Linux).
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

from bench.proxy import CREATE, _config, cpu_seconds  # noqa: E402
from bench.syncserver import process, syncserver_command  # noqa: E402
from langshaw import LangshawProtocol  # noqa: E402
from peach import PeachAdapter, SyncExecutor  # noqa: E402
from strabo.ucp.platform_agent import PROTOCOL  # noqa: E402


class Way:
    """Two agents on one SyncServer, by channel or by plain HTTP."""

    def __init__(self, url: str, channel: bool) -> None:
        protocol = LangshawProtocol.load(PROTOCOL)
        self.platform = PeachAdapter(
            "platform", protocol, "Platform", SyncExecutor(url, "platform", channel=channel)
        )
        self.business = PeachAdapter(
            "business", protocol, "Business", SyncExecutor(url, "business", channel=channel)
        )
        self.waiting: dict[str, tuple[asyncio.Event, list[float]]] = {}
        self.hops: list[float] = []
        self.answers: list[float] = []
        self.cpu = {"SyncServer": 0.0, "agents": 0.0}
        applied = self.business._after

        def after(batch: Any, completed: Any, touched: Any, live: bool) -> None:
            applied(batch, completed, touched, live)
            for entry in batch.entries:
                waiting = self.waiting.get(entry.instance.bindings.get("cid"))
                if waiting is not None:
                    waiting[1].append(time.perf_counter())
                    waiting[0].set()

        self.business._after = after  # type: ignore[method-assign]

    async def attempt(self) -> tuple[float, float]:
        create = self.platform.initiating()[0].bind(**CREATE)
        arrived = asyncio.Event()
        when: list[float] = []
        self.waiting[create["cid"]] = (arrived, when)
        start = time.perf_counter()
        await self.platform.attempt([create])
        answered = time.perf_counter() - start
        await arrived.wait()
        del self.waiting[create["cid"]]
        return when[0] - start, answered


async def main(n: int) -> None:
    print(f"strabo hop benchmark: {n} attempts each way, one after the other\n")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        command = syncserver_command(_config(directory), directory / "s.db")
        async with process(*command) as (host, port, pid):
            url = f"http://{host}:{port}"
            ways = {"channel": Way(url, True), "plain HTTP": Way(url, False)}
            for way in ways.values():
                await way.platform.start()
                await way.business.start()
            try:
                for way in ways.values():
                    for _ in range(50):  # warm up
                        await way.attempt()
                for _ in range(max(1, n // 100)):
                    for way in ways.values():
                        server, agents = cpu_seconds(pid), cpu_seconds(os.getpid())
                        for _ in range(100):
                            hop, answer = await way.attempt()
                            way.hops.append(hop)
                            way.answers.append(answer)
                        if server is not None and agents is not None:
                            way.cpu["SyncServer"] += (cpu_seconds(pid) or 0.0) - server
                            way.cpu["agents"] += (cpu_seconds(os.getpid()) or 0.0) - agents
            finally:
                for way in ways.values():
                    await way.business.stop()
                    await way.platform.stop()
    for name, way in ways.items():
        count = len(way.hops)
        cpu = ", ".join(f"{k} {v / count * 1e3:.3f} ms" for k, v in way.cpu.items())
        print(
            f"{name:10}  to the other agent {statistics.median(way.hops) * 1e3:.3f} ms, "
            f"to the answer {statistics.median(way.answers) * 1e3:.3f} ms (medians); "
            f"CPU per attempt: {cpu}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer attempts")
    asyncio.run(main(300 if parser.parse_args().quick else 2000))
