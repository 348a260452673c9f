"""Peer-to-peer benchmark: the PeerExecutor against a SyncServer (docs/performance.md
quotes its figures).

    .venv/bin/python bench/peer.py            # full run (about a minute)
    .venv/bin/python bench/peer.py --quick    # smaller counts

SimpleUCP on loopback, the Platform agent in this process and the Business agent
in a process of its own (bench/_business.py), with each executor:

* peer to peer over HTTP (PeerExecutor, each agent serving its endpoint), with
  the agents' logs in SQLite files (WAL) and in memory;
* through a SyncServer in a process of its own, over HTTP (SyncExecutor,
  instant policy, SQLite store);
* through a SyncServer embedded in this process (LocalExecutor), with a memory
  and a SQLite store; for the round trip its Business agent runs in this
  process too (no HTTP anywhere: a floor).

1. Per-action cost: ``await platform.attempt([create])``, sequential, for
   instances built beforehand (each a Create opening a new checkout), timed one
   by one in chunks. Peer to peer this is the local check, the log write and the
   apply; the instance goes to Business afterwards, from the outbox task. For
   the peers the chunk's delivery is timed as well: from the first send until
   Business has accepted every instance of the chunk (the sender holds its
   acknowledgements), per instance, with the CPU time sender and receiver spent.
2. Round trip of a 2-role enactment: Platform attempts Create, Business answers
   Created from an ``on_enabled`` handler, and the time runs until Platform's
   state holds Created (read in an ``adapter.listeners`` callback, which sets
   an event the round trip waits on; nothing polls or sleeps). Sequential
   enactments, the set-ups taking turns in blocks of 25, so that all see the
   same machine; then 32 concurrent ones, in
   alternating slices, with the CPU time each process spent per enactment.

Between phases this process collects and freezes its heap (``gc.freeze``): it
holds the states of every set-up, which real agents would not share, and a full
collection scanning them all would stall whichever set-up runs at that moment.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)  # not bench/: bench/syncserver.py would hide the syncserver package

from bench._business import PROTOCOL, ROUND_TRIP, answer_creates  # noqa: E402
from bench.syncserver import percentile, process, steps, syncserver_command  # noqa: E402
from langshaw import ActionInstance, LangshawProtocol  # noqa: E402
from peach import Executor, LocalExecutor, PeachAdapter, SyncExecutor  # noqa: E402
from peach.peer import Directory, PeerExecutor  # noqa: E402
from strabo.serving import free_port  # noqa: E402
from syncserver import SyncServer  # noqa: E402
from syncserver.batch import Batch  # noqa: E402

MAS = "bench"
BLOCK = 25  # sequential round trips per set-up in a row
TIMEOUT = 30.0  # seconds any one wait may take before the run is declared stuck


def create(protocol: LangshawProtocol, cid: str) -> ActionInstance:
    """Platform's Create of checkout ``cid``, shaped like a real UCP checkout."""
    _, action, bindings = steps(cid)[0]
    return ActionInstance(protocol.action(action), bindings)


def directory_file(path: Path, ports: dict[str, int] | None = None) -> Path:
    """The system as TOML: the SyncServer's configuration, or with ``ports`` the
    peers' directory (each agent's ``url``)."""
    lines = [f"[mas.{MAS}]", f'protocols = ["{PROTOCOL}"]']
    for agent, role in (("platform", "Platform"), ("business", "Business")):
        lines += [f"[mas.{MAS}.agents.{agent}]", f'roles = ["{role}"]', f'token = "{agent}"']
        if ports is not None:
            lines.append(f'url = "http://127.0.0.1:{ports[agent]}"')
    path.write_text("\n".join(lines) + "\n")
    return path


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system) of this process, or of process ``pid`` (Linux)."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def business_process(*args: str) -> AsyncIterator[int]:
    """bench/_business.py in its own process, until the block exits; yields its pid."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "_business.py"), *args,
        stdout=asyncio.subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)
        if line.strip() != b"ready":
            raise RuntimeError(f"the Business agent ({' '.join(args)}) did not start")
        yield proc.pid
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def until(predicate: Callable[[], bool], event: asyncio.Event) -> None:
    """Wait until ``predicate()`` holds, looking again whenever ``event`` is set."""

    async def wait() -> None:
        while not predicate():
            event.clear()
            if predicate():
                return
            await event.wait()

    await asyncio.wait_for(wait(), TIMEOUT)


class Setup:
    """The Platform agent on one executor, and what the benchmark times with it.

    ``processes`` names the other processes of the set-up (Business's, the
    SyncServer's) by pid, for the CPU they spend."""

    def __init__(
        self, label: str, short: str, executor: Executor, processes: dict[str, int]
    ) -> None:
        self.label = label
        self.short = short
        self.processes = processes
        self.protocol = LangshawProtocol.load(PROTOCOL)
        self.executor = executor
        self.platform = PeachAdapter("platform", self.protocol, "Platform", executor)
        self.platform.listeners.append(self._applied)
        self.created: dict[str, asyncio.Event] = {}  # cid -> set when Created is applied
        self.arrived: dict[str, float] = {}  # cid -> when it was (perf_counter)
        self.attempts: list[float] = []
        # Peer to peer, per chunk: wall seconds per instance delivered, and CPU
        # seconds per instance in this process (sender) and in Business's (receiver).
        self.delivery: list[tuple[float, float, float]] = []
        self.sequential: list[float] = []
        self.concurrent: list[float] = []
        self.concurrent_time = 0.0
        self.cpu: dict[str, float] = {}  # CPU seconds in the concurrent runs, by process

    @property
    def peer(self) -> PeerExecutor | None:
        return self.executor if isinstance(self.executor, PeerExecutor) else None

    def _applied(self, batch: Batch, newly: list[tuple[Any, ...]]) -> None:
        for entry in batch.entries:
            if entry.instance.action.name == "Created":
                cid = entry.instance.bindings["cid"]
                event = self.created.pop(cid, None)
                if event is not None:
                    self.arrived[cid] = time.perf_counter()  # the state holds it now
                    event.set()

    def _cpu(self) -> dict[str, float]:
        here = {"this process": cpu_seconds()}
        return here | {name: cpu_seconds(pid) for name, pid in self.processes.items()}

    async def attempt_chunk(self, cids: list[str], record: bool = True) -> None:
        """Attempt one Create per cid, one after the other, each timed; peer to
        peer, then time their delivery to Business."""
        instances = [create(self.protocol, cid) for cid in cids]
        times = []
        for instance in instances:
            start = time.perf_counter()
            await self.platform.attempt([instance])
            times.append(time.perf_counter() - start)
        peer = self.peer
        if peer is not None:
            # Nothing was sent yet: a peer's attempt() does not give the loop a
            # turn, so the outbox task starts now.
            assert peer.outstanding() == len(cids)
            cpu = self._cpu()
            start = time.perf_counter()
            await until(lambda: peer.outstanding() == 0, peer.progress)
            wall = time.perf_counter() - start
            after = self._cpu()
            if record:
                sender = after["this process"] - cpu["this process"]
                receiver = after["Business"] - cpu["Business"]
                self.delivery.append((wall / len(cids), sender / len(cids), receiver / len(cids)))
        if record:
            self.attempts += times

    async def round_trip(self, cid: str) -> float:
        """Create -> Business's Created -> Platform's state has it, in seconds."""
        instance = create(self.protocol, cid)
        event = self.created[cid] = asyncio.Event()
        start = time.perf_counter()
        await self.platform.attempt([instance])
        await asyncio.wait_for(event.wait(), TIMEOUT)
        # Timed when the state took it, not when this task woke: what the agent
        # does next (its handlers, and peer to peer the commit of what it
        # received) runs in the loop steps between, which differ by set-up.
        return self.arrived.pop(cid) - start

    async def concurrently(self, tag: str, workers: int, each: int) -> None:
        """``workers`` agents' worth of sequential round trips, all at once."""

        async def worker(w: int) -> list[float]:
            return [await self.round_trip(f"{ROUND_TRIP}-{tag}-{w}-{j}") for j in range(each)]

        cpu = self._cpu()
        start = time.perf_counter()
        results = await asyncio.gather(*(worker(w) for w in range(workers)))
        self.concurrent_time += time.perf_counter() - start
        for name, seconds in self._cpu().items():
            self.cpu[name] = self.cpu.get(name, 0.0) + seconds - cpu[name]
        self.concurrent += [t for r in results for t in r]


def settle() -> None:
    """Collect, then freeze what survives: the states of all set-ups live in this
    process, and each full collection would otherwise scan all of them (tens of
    milliseconds, landing on whichever set-up runs then)."""
    gc.collect()
    gc.freeze()


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def progress(text: str) -> None:
    print(f"  {text}", flush=True)


async def main(quick: bool) -> None:
    chunk, chunks = (200, 3) if quick else (500, 8)
    sequential = 200 if quick else 1000
    workers, each, slices = (32, 4, 2) if quick else (32, 10, 4)
    print(
        f"strabo peer-to-peer benchmark ({'quick' if quick else 'full'} run), Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs\n",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            setups: list[Setup] = []
            # Peer to peer: a directory each (its own ports), Business in its own process.
            for short, store in (("sqlite", "SQLite"), ("memory", "memory")):
                ports = {"platform": free_port(), "business": free_port()}
                directory = directory_file(work / f"peer-{short}.toml", ports)
                business_store = str(work / "business.db") if short == "sqlite" else ":memory:"
                business = await stack.enter_async_context(
                    business_process("--directory", str(directory), "--store", business_store)
                )
                executor = PeerExecutor(
                    "platform",
                    Directory.load(directory),
                    store=work / "platform.db" if short == "sqlite" else None,
                )
                setup = Setup(
                    f"peer to peer over HTTP, {store} logs",
                    f"peer/{short}",
                    executor,
                    {"Business": business},
                )
                await stack.enter_async_context(setup.platform)
                setups.append(setup)
            # A SyncServer in its own process, over HTTP.
            config = directory_file(work / "syncserver.toml")
            host, port, server_pid = await stack.enter_async_context(
                process(*syncserver_command(config, work / "syncserver.db"), "--policy", "instant")
            )
            url = f"http://{host}:{port}"
            business = await stack.enter_async_context(
                business_process("--url", url, "--mas", MAS, "--token", "business")
            )
            setup = Setup(
                "SyncServer over HTTP (SyncExecutor, instant, SQLite)",
                "syncserver/http",
                SyncExecutor(url, token="platform", mas=MAS),
                {"Business": business, "SyncServer": server_pid},
            )
            await stack.enter_async_context(setup.platform)
            setups.append(setup)
            # A SyncServer in this process; its Business agent too.
            for short, store in (("memory", ":memory:"), ("SQLite", str(work / "local.db"))):
                server = SyncServer.embedded(
                    [LangshawProtocol.load(PROTOCOL)],
                    {"platform": ["Platform"], "business": ["Business"]},
                    mas=MAS,
                    store=store,
                )
                local = LocalExecutor(server, mas=MAS)
                setup = Setup(
                    f"embedded SyncServer (LocalExecutor, {short})",
                    f"local/{short.lower()}",
                    local,
                    {},
                )
                in_process = PeachAdapter("business", setup.protocol, "Business", local)
                answer_creates(in_process)
                await stack.enter_async_context(setup.platform)
                await stack.enter_async_context(in_process)
                setups.append(setup)

            # 1. attempt() per action, and delivery peer to peer.
            progress(f"1. attempts: {chunks} chunks of {chunk} per executor, interleaved")
            for setup in setups:
                await setup.attempt_chunk([f"warm-{i}" for i in range(100)], record=False)
            settle()
            for k in range(chunks):
                for setup in setups:
                    await setup.attempt_chunk([f"a{k}-{i}" for i in range(chunk)])
                progress(f"   chunk {k + 1}/{chunks}")

            # 2. round trips, sequential then concurrent.
            progress(
                f"2. round trips: {sequential} sequential per set-up, interleaved in "
                f"blocks of {BLOCK}"
            )
            for setup in setups:
                for i in range(50):
                    await setup.round_trip(f"{ROUND_TRIP}-warm-{i}")
            settle()
            for b in range(sequential // BLOCK):
                for setup in setups:
                    # The first one of a block only takes up what the set-up before
                    # left running (acknowledgements, events still on their way).
                    await setup.round_trip(f"{ROUND_TRIP}-s{b}")
                    for i in range(BLOCK):
                        setup.sequential.append(await setup.round_trip(f"{ROUND_TRIP}-s{b}-{i}"))
                if (b + 1) * BLOCK % (sequential // 4) == 0:
                    progress(f"   {(b + 1) * BLOCK}/{sequential}")
            settle()
            progress(f"   {workers} concurrent, {slices} slices of {workers * each} per set-up")
            for k in range(slices):
                for setup in setups:
                    await setup.concurrently(f"c{k}", workers, each)
                progress(f"   slice {k + 1}/{slices}")
            for setup in setups:
                if setup.peer is not None:
                    refused = setup.peer.refusals()
                    assert not refused, refused
    print()
    report(setups, chunk, workers)


def report(setups: list[Setup], chunk: int, workers: int) -> None:
    print(
        "1. Platform's attempt([Create]), sequential, per action "
        f"({len(setups[0].attempts)} attempts each)\n"
    )
    print("| executor | median | p99 | mean |")
    print("|---|---:|---:|---:|")
    for s in setups:
        print(
            f"| {s.label} | {us(statistics.median(s.attempts))} "
            f"| {us(percentile(s.attempts, 99))} | {us(statistics.mean(s.attempts))} |"
        )
    print(
        f"\nPeer to peer, delivery of those attempts to Business (chunks of {chunk}: from "
        "the outbox's first send until Business has accepted all; median of the chunks)\n"
    )
    print("| executor | wall per instance | instances/s | CPU: sender | CPU: receiver |")
    print("|---|---:|---:|---:|---:|")
    for s in setups:
        if s.delivery:
            wall, sender, receiver = (statistics.median(d[i] for d in s.delivery) for i in range(3))
            print(f"| {s.label} | {us(wall)} | {1 / wall:,.0f} | {us(sender)} | {us(receiver)} |")
    print(
        "\n2. Round trip: Platform attempts Create -> Business's Created (on_enabled) -> "
        f"Platform's state has it ({len(setups[0].sequential)} sequential per set-up, "
        f"{len(setups[0].concurrent)} concurrent)\n"
    )
    print(f"| set-up | median | p90 | p99 | {workers} concurrent: enactments/s | median | p99 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in setups:
        print(
            f"| {s.label} | {ms(statistics.median(s.sequential))} "
            f"| {ms(percentile(s.sequential, 90))} | {ms(percentile(s.sequential, 99))} "
            f"| {len(s.concurrent) / s.concurrent_time:,.0f} "
            f"| {ms(statistics.median(s.concurrent))} | {ms(percentile(s.concurrent, 99))} |"
        )
    print(
        f"\nCPU per enactment in the concurrent run ({workers} at once), by process "
        "(this one runs Platform; embedded, everything)\n"
    )
    print("| set-up | this process | Business's | SyncServer's | total |")
    print("|---|---:|---:|---:|---:|")
    for s in setups:
        n = len(s.concurrent)
        cells = [s.cpu.get(p) for p in ("this process", "Business", "SyncServer")]
        shown = [ms(c / n) if c is not None else "" for c in cells]
        print(f"| {s.label} | {' | '.join(shown)} | {ms(sum(c or 0.0 for c in cells) / n)} |")
    by = {s.short: s for s in setups}
    sync = by["syncserver/http"]
    print()
    for short in ("peer/sqlite", "peer/memory"):
        peer = by[short]
        latency = statistics.median(peer.sequential) / statistics.median(sync.sequential)
        rate = (len(peer.concurrent) / peer.concurrent_time) / (
            len(sync.concurrent) / sync.concurrent_time
        )
        print(
            f"{peer.label} against the SyncServer over HTTP: round trip (median) "
            f"{latency:.2f}x ({ms(statistics.median(peer.sequential))} against "
            f"{ms(statistics.median(sync.sequential))}), concurrent throughput {rate:.2f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    asyncio.run(main(parser.parse_args().quick))
