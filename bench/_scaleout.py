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

Throughput is also measured in CPU: during each set-up's slices, the CPU time
its server processes used (``/proc/PID/stat``), and PostgreSQL's (the server's
processes, found through a backend's parent, when it runs on this machine), per
finalized action. Scaling out should leave the servers' CPU per action flat:
N processes share the work of one, plus following one another's commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
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
    pids: list[int] = field(default_factory=list)  # one per process

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


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command's name (None if the
    process is gone, or there is no /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (0 if it is gone)."""
    fields = _stat(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / _TICK


def parent(pid: int) -> int | None:
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def children(of: int) -> list[int]:
    """The processes whose parent is ``of`` (PostgreSQL's backends)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(entry.name)) and int(fields[1]) == of:
            found.append(int(entry.name))
    return found


class Usage:
    """CPU time used by some processes between :meth:`start` and :meth:`stop`,
    summed over the intervals (processes started meanwhile count from zero)."""

    def __init__(self, pids: Sequence[int] = (), postmaster: int | None = None) -> None:
        self.pids = list(pids)
        self.postmaster = postmaster
        self.seconds = 0.0
        self._start: dict[int, float] = {}

    def _now(self) -> dict[int, float]:
        pids = list(self.pids)
        if self.postmaster is not None:
            pids += [self.postmaster, *children(self.postmaster)]
        return {pid: cpu_seconds(pid) for pid in pids}

    def start(self) -> None:
        self._start = self._now()

    def stop(self) -> None:
        now = self._now()
        self.seconds += sum(t - self._start.get(pid, 0.0) for pid, t in now.items())


async def throughput(
    all_setups: list[Setup],
    agents: int,
    seconds: float,
    slices: int = 4,
    postmaster: int | None = None,
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Finalized actions (echo: requests) per second with ``agents`` concurrent
    agents spread over a set-up's processes, in alternating slices of time; and
    the CPU seconds per action of the set-up's processes, and of PostgreSQL's
    (while each set-up runs, the others are idle)."""
    counts = {s.name: 0 for s in all_setups}
    elapsed = {s.name: 0.0 for s in all_setups}
    servers = {s.name: Usage(s.pids) for s in all_setups}
    database = {s.name: Usage((), postmaster) for s in all_setups}
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
            servers[setup.name].start()
            database[setup.name].start()
            start = time.perf_counter()
            results = await asyncio.gather(
                *(run(setup, i, start + slice_seconds, k * 100_000) for i in range(agents))
            )
            elapsed[setup.name] += time.perf_counter() - start
            servers[setup.name].stop()
            database[setup.name].stop()
            counts[setup.name] += sum(results)
    return (
        {name: counts[name] / elapsed[name] for name in counts},
        {name: servers[name].seconds / max(counts[name], 1) for name in counts},
        {name: database[name].seconds / max(counts[name], 1) for name in counts},
    )


async def postmaster_of(url: str) -> int | None:
    """PostgreSQL's main process, if the server runs on this machine (the parent
    of the backend serving a connection), to count its CPU; None otherwise."""
    import asyncpg

    connection = await asyncpg.connect(url)
    try:  # the backend ends with the connection: it is looked at before
        backend = await connection.fetchval("SELECT pg_backend_pid()")
        found, command = parent(backend), _command(backend)
    finally:
        await connection.close()
    # A remote server's pid may be some other process here: only PostgreSQL's own.
    return found if command.startswith("postgres") else None


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split("(", 1)[1].split(")", 1)[0]
    except (OSError, IndexError):
        return ""


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
                    host, port, pid = await stack.enter_async_context(process(*command))
                    setup.targets.append((host, port))
                    setup.pids.append(pid)
            postmaster = await postmaster_of(url)
            await latency(all_setups, 200, "warm")
            times = await latency(all_setups, n, "lat")
            rates, cpu, pg_cpu = await throughput(all_setups, agents, seconds, 4, postmaster)
    echo50 = statistics.median(times["echo"])
    echo99 = percentile(times["echo"], 99)
    print("6. several SyncServers over PostgreSQL (latency: one sequential agent, attempt ->")
    print("   finalized, each step to the next instance; throughput: 32 concurrent agents")
    print("   spread over the instances, finalized actions/s; echo: requests/s; CPU: of the")
    print("   set-up's server processes, and of PostgreSQL, per action, during its slices)")
    print(
        f"   {'set-up':36} {'median':>9} {'p99':>9} {'ratio':>6} {'throughput':>11} "
        f"{'ratio':>5} {'CPU/action':>10} {'PG':>6}"
    )
    for setup in all_setups:
        m, p = statistics.median(times[setup.name]), percentile(times[setup.name], 99)
        database = f"{pg_cpu[setup.name] * 1e6:4.0f}us" if setup.name.startswith("postgres") else ""
        print(
            f"   {setup.name:36} {m * 1e3:6.3f} ms {p * 1e3:6.3f} ms {m / echo50:5.2f}x "
            f"{rates[setup.name]:8.0f}/s {rates[setup.name] / rates['echo']:5.0%} "
            f"{cpu[setup.name] * 1e6:8.0f}us {database:>6}"
        )
    print(f"   (echo p99 {echo99 * 1e3:.3f} ms; {n} attempts per set-up, {seconds:.0f} s of load;")
    print("   PG: PostgreSQL's CPU, when it runs on this machine)")
    one = rates.get("postgres x1")
    if one:
        print("   N processes against 1 (throughput; servers' CPU per action):")
        for count in instances:
            name = f"postgres x{count}"
            print(
                f"   {name:36} {rates[name] / one:5.2f}x throughput  "
                f"{cpu[name] / cpu['postgres x1']:5.2f}x CPU per action "
                f"({cpu[name] * 1e6 / count:.0f} us per process)"
            )
