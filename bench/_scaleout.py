"""Several SyncServers over PostgreSQL, against SQLite and the echo baseline.

Run by ``bench/syncserver.py --db postgresql://...`` (or ``--db postgres``, which
starts a throwaway PostgreSQL with its default durability, ``bench/_pgcluster.py``).
Every set-up runs at once, each server in its own process(es), and the
measurements take turns between them, so that all see the same machine:

* echo: the bare Starlette JSON echo (the reference of bench/syncserver.py);
* sqlite: one ``strabo syncserver`` on a SQLite file (``--sync normal``);
* postgres xN: N ``strabo syncserver`` processes sharing the PostgreSQL log; a
  sequential agent sends each step of a checkout to the next instance (as a
  round-robin load balancer would), the concurrent agents are spread over them.
* postgres x1, ``synchronous_commit=off``: what PostgreSQL's commit flush costs
  (such a commit survives the SyncServer being killed, as SQLite's ``normal``
  does, not PostgreSQL itself crashing).

Each set-up has a MAS of its own, so its ledger starts empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench._checkout import PROTOCOL, ROOT, body, client, encoded, percentile, process, steps
from syncserver.client import LeanClient


@dataclass
class Setup:
    name: str
    mas: str
    command: list[tuple[str, ...]]  # one command per process
    targets: list[tuple[str, int]] = field(default_factory=list)  # (host, port) per process

    def path(self) -> str:
        return "/echo" if self.mas == "" else f"/mas/{self.mas}/protocols/SimpleUCP/attempts"


def _config(directory: Path, mas: str, agents: int) -> Path:
    lines = [f'[mas.{mas}]\nprotocols = ["{PROTOCOL}"]']
    for name in ("platform", "business", *(f"a{i}" for i in range(agents))):
        lines.append(
            f'[mas.{mas}.agents.{name}]\nroles = ["Platform", "Business"]\ntoken = "{name}"'
        )
    path = directory / f"{mas}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _syncserver(config: Path, db: str) -> tuple[str, ...]:
    return (
        sys.executable, "-m", "strabo.cli", "syncserver", "--config", str(config),
        "--db", db, "--port", "0", "--log-level", "warning",
    )


def _with_setting(url: str, setting: str) -> str:
    return url + ("&" if "?" in url else "?") + setting


def setups(directory: Path, url: str, instances: Sequence[int], agents: int) -> list[Setup]:
    result = [Setup("echo", "", [(sys.executable, str(ROOT / "bench" / "_servers.py"))])]
    config = _config(directory, "sqlite", agents)
    result.append(Setup("sqlite", "sqlite", [_syncserver(config, str(directory / "s.db"))]))
    for n in instances:
        config = _config(directory, f"pg{n}", agents)
        result.append(Setup(f"postgres x{n}", f"pg{n}", [_syncserver(config, url)] * n))
    config = _config(directory, "pgasync", agents)
    result.append(
        Setup(
            "postgres x1, synchronous_commit=off",
            "pgasync",
            [_syncserver(config, _with_setting(url, "synchronous_commit=off"))],
        )
    )
    return result


async def latency(all_setups: list[Setup], n: int, run: str) -> dict[str, list[float]]:
    """One sequential agent per set-up, one request each in turn."""
    times: dict[str, list[float]] = {s.name: [] for s in all_setups}
    clients: dict[str, list[dict[str, LeanClient]]] = {}
    for setup in all_setups:
        clients[setup.name] = [
            {a: client(h, p, None if not setup.mas else a) for a in ("platform", "business")}
            for h, p in setup.targets
        ]
    step = 0
    for i in range(n // 4):
        for agent, action, bindings in steps(f"{run}-{i}"):
            payload = encoded(body((action, bindings)))  # before the clock: time the round trip
            for setup in all_setups:
                pool = clients[setup.name]
                each = pool[step % len(pool)][agent]
                start = time.perf_counter()
                answer = await each.request("POST", setup.path(), content=payload)
                times[setup.name].append(time.perf_counter() - start)
                assert answer.status_code == 200, answer.text
            step += 1
    for pool in clients.values():
        for agent_clients in pool:
            for each in agent_clients.values():
                await each.aclose()
    return times


async def throughput(
    all_setups: list[Setup], agents: int, seconds: float, slices: int = 4
) -> dict[str, float]:
    """Finalized actions (echo: requests) per second with ``agents`` concurrent
    agents spread over a set-up's processes, in alternating slices of time."""
    counts = {s.name: 0 for s in all_setups}
    elapsed = {s.name: 0.0 for s in all_setups}
    slice_seconds = seconds / slices

    async def run(setup: Setup, i: int, deadline: float, j0: int) -> int:
        host, port = setup.targets[i % len(setup.targets)]
        agent = client(host, port, f"a{i}" if setup.mas else None)
        done, j = 0, j0
        while time.perf_counter() < deadline:
            for _, action, bindings in steps(f"t{i}-{j}"):
                answer = await agent.request("POST", setup.path(), body((action, bindings)))
                assert answer.status_code == 200, answer.text
                done += 1
            j += 1
        await agent.aclose()
        return done

    for k in range(slices):
        for setup in all_setups:
            start = time.perf_counter()
            results = await asyncio.gather(
                *(run(setup, i, start + slice_seconds, k * 100_000) for i in range(agents))
            )
            elapsed[setup.name] += time.perf_counter() - start
            counts[setup.name] += sum(results)
    return {name: counts[name] / elapsed[name] for name in counts}


async def compare(url: str, instances: Sequence[int], quick: bool) -> None:
    import tempfile

    n = 400 if quick else 2000
    seconds = 2.0 if quick else 6.0
    agents = 32
    with tempfile.TemporaryDirectory() as tmp:
        all_setups = setups(Path(tmp), url, instances, agents)
        async with contextlib.AsyncExitStack() as stack:
            for setup in all_setups:
                for command in setup.command:
                    host, port, _ = await stack.enter_async_context(process(*command))
                    setup.targets.append((host, port))
            await latency(all_setups, 200, "warm")
            times = await latency(all_setups, n, "lat")
            rates = await throughput(all_setups, agents, seconds)
    echo50 = statistics.median(times["echo"])
    echo99 = percentile(times["echo"], 99)
    print("6. several SyncServers over PostgreSQL (latency: one sequential agent, attempt ->")
    print("   finalized, each step to the next instance; throughput: 32 concurrent agents")
    print("   spread over the instances, finalized actions/s; echo: requests/s)")
    print(f"   {'set-up':38} {'median':>9} {'p99':>9} {'ratio':>6} {'throughput':>11} {'ratio':>6}")
    for setup in all_setups:
        m, p = statistics.median(times[setup.name]), percentile(times[setup.name], 99)
        print(
            f"   {setup.name:38} {m * 1e3:6.3f} ms {p * 1e3:6.3f} ms {m / echo50:5.2f}x "
            f"{rates[setup.name]:8.0f}/s {rates[setup.name] / rates['echo']:6.0%}"
        )
    print(f"   (echo p99 {echo99 * 1e3:.3f} ms; {n} attempts per set-up, {seconds:.0f} s of load)")
