"""What one request costs as the server's history grows (``bench/syncserver.py
--history N``), and what a batched answer carries as its burst grows.

Two SyncServer processes run side by side, one whose log was pre-filled with
100 enactments and one with ``N`` (each a SimpleUCP Create sent with an attempt
id, written straight into the SQLite file before the server starts, as if
agents had sent them). The same requests go to both, interleaved one to one, and
the ratio of the medians is printed (goal: at most 1.5x):

* ``GET .../enactment?cid=...`` for an enactment of the history;
* an attempt refused with an attempt id (its id is looked up in the log);
* a resend of an attempt of the history (answered from the log);
* ``GET .../enactments`` (the first page).

Then the larger server takes ``M`` one-action attempts and the size of its
write-ahead log is sampled after each (goal: at most 16 MiB at any history).

The batched part starts a server with the batched policy and sends bursts of
N concurrent attempts (N = 1, 32, 128) that share one window: the mean size
of an answer per burst size (goal: at most 2x a lone answer).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._checkout import PROTOCOL, body, client, encoded, process, steps
from langshaw import ActionInstance, LangshawProtocol
from syncserver import SQLiteStore
from syncserver.batch import Batch, Entry

PATH = "/mas/bench/protocols/SimpleUCP"


def _config(directory: Path, extra: str = "") -> Path:
    path = directory / "history.toml"
    path.write_text(
        f'{extra}[mas.bench]\nprotocols = ["{PROTOCOL}"]\n'
        '[mas.bench.agents.platform]\nroles = ["Platform"]\ntoken = "platform"\n'
        + "".join(
            f'[mas.bench.agents.a{i}]\nroles = ["Platform"]\ntoken = "a{i}"\n' for i in range(128)
        )
    )
    return path


def _command(config: Path, db: Path) -> tuple[str, ...]:
    return (
        sys.executable, "-m", "strabo.cli", "syncserver", "--config", str(config),
        "--db", str(db), "--port", "0", "--log-level", "warning",
    )  # fmt: skip


def _create(i: int) -> dict[str, Any]:
    return steps(f"h{i}")[0][2]


async def prefill(db: Path, enactments: int) -> None:
    """``enactments`` Creates in the log, each its own batch, sent with the
    attempt id ``h<i>`` by the platform."""
    protocol = LangshawProtocol.load(PROTOCOL)
    create = protocol.actions["Create"]
    store = SQLiteStore(db)
    await store.open()
    try:
        for start in range(0, enactments, 5000):
            store.append_now(
                "bench",
                protocol,
                [
                    Batch(
                        protocol.name,
                        i + 1,
                        (Entry(ActionInstance(create, _create(i)), "platform", f"h{i}"),),
                    )
                    for i in range(start, min(start + 5000, enactments))
                ],
            )
    finally:
        await store.close()


async def _timed(agent: Any, method: str, path: str, payload: bytes | None) -> float:
    start = time.perf_counter()
    answer = await agent.request(method, path, content=payload)
    elapsed = time.perf_counter() - start
    assert answer.status_code < 500, answer.text
    return elapsed


async def compare(history: int, quick: bool) -> None:
    small = 100
    rounds = 150 if quick else 500
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        config = _config(directory)
        print(f"history: pre-filling {small:,} and {history:,} enactments...", flush=True)
        started = time.perf_counter()
        for n in (small, history):
            await prefill(directory / f"h{n}.db", n)
        print(f"  written in {time.perf_counter() - started:.1f} s; starting both servers")
        async with (
            process(*_command(config, directory / f"h{small}.db")) as (h1, p1, _),
            process(*_command(config, directory / f"h{history}.db")) as (h2, p2, _),
        ):
            agents = {small: client(h1, p1, "platform"), history: client(h2, p2, "platform")}
            times: dict[str, dict[int, list[float]]] = {}
            rng = random.Random(7)
            kinds = ("GET enactment", "refused attempt, with an id", "resend", "GET enactments")
            for kind in kinds:
                times[kind] = {small: [], history: []}
            for r in range(rounds):
                for n, agent in agents.items():
                    i = rng.randrange(n)
                    create = _create(i)
                    samples = times["GET enactment"][n]
                    samples.append(await _timed(agent, "GET", f"{PATH}/enactment?cid=h{i}", None))
                    refused = {**body(("Create", create)), "attempt_id": f"x{r}"}
                    times["refused attempt, with an id"][n].append(
                        await _timed(agent, "POST", f"{PATH}/attempts", encoded(refused))
                    )
                    resend = {**body(("Create", create)), "attempt_id": f"h{i}"}
                    times["resend"][n].append(
                        await _timed(agent, "POST", f"{PATH}/attempts", encoded(resend))
                    )
                    times["GET enactments"][n].append(
                        await _timed(agent, "GET", f"{PATH}/enactments", None)
                    )
            print(f"\n6. cost against history: {small:,} vs {history:,} enactments in the log")
            print(f"   {'request':32} {small:>10,} {history:>10,}   ratio  (goal <= 1.5x)")
            for kind in kinds:
                a, b = (statistics.median(times[kind][n]) for n in (small, history))
                print(f"   {kind:32} {a * 1e3:8.3f}ms {b * 1e3:8.3f}ms  {b / a:5.2f}x")
            await _wal(agents[history], directory / f"h{history}.db-wal", history, quick)
            for agent in agents.values():
                await agent.aclose()


async def _wal(agent: Any, wal: Path, history: int, quick: bool) -> None:
    attempts = 5_000 if quick else 50_000
    largest = 0
    for k in range(attempts):
        answer = await agent.request(
            "POST", f"{PATH}/attempts", content=encoded(body(("Create", _create(history + k))))
        )
        assert answer.status_code == 200, answer.text
        if k % 10 == 0:
            largest = max(largest, _size(wal))
    print(
        f"   WAL after {attempts:,} more one-action attempts: largest seen "
        f"{largest / 2**20:.1f} MiB (goal <= 16 MiB)"
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


async def batched_answers(quick: bool) -> None:
    """The mean answer size per burst size, under the batched policy."""
    sizes = (1, 32, 128)
    bursts = 5 if quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        config = _config(directory, '[server]\npolicy = "batched"\nbatch_window_ms = 20\n')
        async with process(*_command(config, directory / "batched.db")) as (host, port, _):
            agents = [client(host, port, f"a{i}") for i in range(max(sizes))]
            mean: dict[int, float] = {}
            latency: dict[int, float] = {}
            for n in sizes:
                lengths: list[int] = []
                waits: list[float] = []
                for b in range(bursts):
                    payloads = [
                        encoded(body(("Create", _create(10**6 * n + 1000 * b + i))))
                        for i in range(n)
                    ]

                    async def one(i: int, payloads: list[bytes] = payloads) -> tuple[int, float]:
                        start = time.perf_counter()
                        answer = await agents[i].request(
                            "POST", f"{PATH}/attempts", content=payloads[i]
                        )
                        assert answer.status_code == 200, answer.text
                        return len(answer.content), time.perf_counter() - start

                    for length, wait in await asyncio.gather(*(one(i) for i in range(n))):
                        lengths.append(length)
                        waits.append(wait)
                mean[n], latency[n] = statistics.mean(lengths), statistics.median(waits)
            for agent in agents:
                await agent.aclose()
    print("\n7. batched answers (window 20 ms): mean answer size per attempt, by burst size")
    for n in sizes:
        print(
            f"   burst of {n:3}: {mean[n]:7.0f} B per answer ({mean[n] / mean[1]:4.2f}x a lone "
            f"answer; goal <= 2x), median wait {latency[n] * 1e3:6.1f} ms"
        )


INCREMENTAL = PROTOCOL.parent / "incremental-ucp.lsh"
ITEMS = [{"item": {"id": "sku-1"}, "quantity": 1}]


async def _versions_log(db: Path, versions: int) -> None:
    """One IncrementalUCP enactment, ``e1``: Create, Created, then ``versions``
    Update/Updated pairs, each instance its own batch."""
    p = LangshawProtocol.load(INCREMENTAL)
    steps_ = [
        ("platform", "Create", {"eid": "e1", "line_items": ITEMS, "currency": "USD",
                                "payment": {"handlers": []}}),
        ("business", "Created", {"eid": "e1", "Create": True, "id": "chk", "messages": []}),
    ]  # fmt: skip
    for i in range(versions):
        v = f"v{i}"
        steps_.append(
            ("platform", "Update", {"eid": "e1", "v": v, "Created": True, "id": "chk",
                                    "line_items": ITEMS, "currency": "USD"}),
        )  # fmt: skip
        steps_.append(
            ("business", "Updated", {"eid": "e1", "v": v, "Update": True, "line_items": ITEMS,
                                     "messages": []}),
        )  # fmt: skip
    store = SQLiteStore(db)
    await store.open()
    try:
        store.append_now(
            "bench",
            p,
            [
                Batch(p.name, seq, (Entry(ActionInstance(p.actions[a], b), who),))
                for seq, (who, a, b) in enumerate(steps_, 1)
            ],
        )
    finally:
        await store.close()


async def versions(quick: bool) -> None:
    """``GET .../enactment`` of one IncrementalUCP enactment with 10 and with
    1000 versions, side by side: whole (paged at 500), and one role's first 50."""
    rounds = 20 if quick else 60
    counts = (10, 1000)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        config = directory / "versions.toml"
        config.write_text(
            f'[mas.bench]\nprotocols = ["{INCREMENTAL}"]\n'
            '[mas.bench.agents.platform]\nroles = ["Platform"]\ntoken = "platform"\n'
        )
        for n in counts:
            await _versions_log(directory / f"v{n}.db", n)
        async with (
            process(*_command(config, directory / "v10.db")) as (h1, p1, _),
            process(*_command(config, directory / "v1000.db")) as (h2, p2, _),
        ):
            agents = {10: client(h1, p1, "platform"), 1000: client(h2, p2, "platform")}
            path = "/mas/bench/protocols/IncrementalUCP/enactment?eid=e1"
            asks = {"whole": path, "Platform, 50": path + "&role=Platform&limit=50"}
            times: dict[str, dict[int, list[float]]] = {k: {n: [] for n in counts} for k in asks}
            sizes: dict[str, dict[int, int]] = {k: {} for k in asks}
            for _ in range(rounds):
                for n, agent in agents.items():
                    for kind, url in asks.items():
                        start = time.perf_counter()
                        answer = await agent.request("GET", url)
                        times[kind][n].append(time.perf_counter() - start)
                        assert answer.status_code == 200, answer.text
                        sizes[kind][n] = len(answer.content)
            for agent in agents.values():
                await agent.aclose()
    print("\n9. GET .../enactment of one IncrementalUCP enactment: 10 vs 1000 versions")
    for kind in asks:
        a, b = (statistics.median(times[kind][n]) for n in counts)
        print(
            f"   {kind:14} {a * 1e3:8.2f} ms {b * 1e3:8.2f} ms  {b / a:6.2f}x   "
            f"answers {sizes[kind][10]:,} and {sizes[kind][1000]:,} B"
        )
