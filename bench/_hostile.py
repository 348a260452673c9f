"""Hostile load on a real SyncServer process: shared by bench/soak.py and tests/hostile.

Agents attempt concurrently and record every acknowledgement; log readers page
through the log; a stream subscriber checks that batches arrive in order, each
once; ``kill -9`` may strike at any moment. After each run the log is read back
and checked: sequence numbers dense from 1, and every acknowledged attempt in
it, at the position it was acknowledged at.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse

ROOT = Path(__file__).resolve().parent.parent
PATH = "/mas/soak/protocols/SimpleUCP"
CREATE = {
    "line_items": [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}],
    "currency": "USD",
    "payment_pref": {},
}


def config_file(directory: Path, agents: int, server: str = "") -> Path:
    """A MAS with ``agents`` platform agents (tokens 'p<i>-token'); ``server`` is
    the body of a ``[server]`` table."""
    lines = [f"[server]\n{server}"] if server else []
    lines.append(f'[mas.soak]\nprotocols = ["{ROOT / "protocols" / "atomic-ucp.lsh"}"]')
    for i in range(agents):
        lines.append(f'[mas.soak.agents.p{i}]\nroles = ["Platform"]\ntoken = "p{i}-token"')
    path = directory / "soak.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Tally:
    """What one run saw: acknowledgements, stream order, reads."""

    acked: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # cid -> agent, seq, pos
    attempts: int = 0
    stream_batches: int = 0
    stream_gaps: list[tuple[int, int]] = field(default_factory=list)
    stream_duplicates: int = 0
    log_reads: int = 0
    #: The last batch the subscriber received.
    stream_last: int = 0
    #: Set on every batch the subscriber receives.
    progressed: asyncio.Event = field(default_factory=asyncio.Event)


@contextlib.asynccontextmanager
async def server_process(
    config: Path, db: Path, *options: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``strabo syncserver`` in its own process; yields it and its URL.

    Its standard error is read all along (the last 8 kB kept, for the message if it
    does not start): a server under hostile load may log a great deal (asyncio's
    "socket.send() raised exception." for each write to a stream the client
    aborted came to megabytes in the sse part of bench/soak.py, until streams
    looked at their connection before each write), and a pipe nobody reads
    would block it in its first write past the pipe's buffer, then
    ``proc.wait()`` after the kill, which waits for the pipes to close."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "strabo.cli",
        "syncserver",
        "--config",
        str(config),
        "--db",
        str(db),
        "--port",
        "0",
        "--log-level",
        "warning",
        *options,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    tail = bytearray()
    drain = asyncio.create_task(_drain(proc.stderr, tail))
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        match = re.search(r"listening on (http://\S+)", line.decode())
        if match is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 10)
            raise RuntimeError(
                f"the SyncServer did not start: {line!r} {tail.decode(errors='replace')[-2000:]}"
            )
        yield proc, match.group(1)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        await drain


async def _drain(stream: asyncio.StreamReader, tail: bytearray, keep: int = 8192) -> None:
    """Read ``stream`` to its end, keeping its last ``keep`` bytes in ``tail``."""
    while chunk := await stream.read(65536):
        tail += chunk
        del tail[:-keep]


async def _agent(url: str, name: str, tally: Tally, stop: asyncio.Event, run: str) -> None:
    """Create checkouts one after another; every fifth time, also resend an earlier
    Create under a new attempt id at once (a rejection the server must explain,
    finalized in the same window as legal attempts)."""
    headers = {"Authorization": f"Bearer {name}-token"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client:
        n = 0

        async def post(cid: str, attempt_id: str) -> httpx.Response:
            instance = {"action": "Create", "bindings": {"cid": cid, **CREATE}}
            body = {"instances": [instance], "attempt_id": attempt_id}
            return await client.post(f"{PATH}/attempts", json=body)

        while not stop.is_set():
            n += 1
            cid = f"{run}-{name}-{n}"
            tally.attempts += 1
            try:
                if n % 5 == 0:
                    response, duplicate = await asyncio.gather(
                        post(cid, cid), post(f"{run}-{name}-1", f"{cid}-dup")
                    )
                    if duplicate.status_code != 409:
                        raise AssertionError(f"duplicate: {duplicate.status_code} {duplicate.text}")
                else:
                    response = await post(cid, cid)
            except httpx.HTTPError:
                return  # the server died: this attempt's outcome is unknown, not acknowledged
            if response.status_code != 200:
                raise AssertionError(f"{cid}: {response.status_code} {response.text}")
            data = response.json()
            [position] = data["attempt"]
            tally.acked[cid] = (name, data["seq"], position)


async def _reader(url: str, tally: Tally, stop: asyncio.Event) -> None:
    headers = {"Authorization": "Bearer p0-token"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client:
        after = 0
        while not stop.is_set():
            try:
                response = await client.get(f"{PATH}/log", params={"after": after, "limit": 200})
            except httpx.HTTPError:
                return
            events = response.json()["events"]
            tally.log_reads += 1
            after = events[-1]["seq"] if events else 0  # page forward, then start over


async def _subscriber(url: str, tally: Tally, stop: asyncio.Event, after: int) -> int:
    """Follow the stream from ``after``; record gaps and duplicates; return the last seq."""
    last = after
    headers = {"Authorization": "Bearer p0-token"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=None) as client:
        while not stop.is_set():
            try:
                async with aconnect_sse(
                    client, "GET", f"{PATH}/events", params={"after": last}
                ) as source:
                    async for event in source.aiter_sse():
                        if event.event != "batch":
                            continue
                        seq = int(event.id)
                        if seq <= last:
                            tally.stream_duplicates += 1
                        elif seq != last + 1:
                            tally.stream_gaps.append((last, seq))
                        last = max(last, seq)
                        tally.stream_last = last
                        tally.stream_batches += 1
                        tally.progressed.set()
            except httpx.HTTPError:
                return last
    return last


async def load(
    url: str, tally: Tally, *, agents: int, readers: int, run: str, after: int = 0
) -> tuple[asyncio.Event, list[asyncio.Task[Any]]]:
    """Start the load; set the returned event to stop it (or kill the server)."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_agent(url, f"p{i}", tally, stop, run)) for i in range(agents)]
    tasks += [asyncio.create_task(_reader(url, tally, stop)) for _ in range(readers)]
    tasks.append(asyncio.create_task(_subscriber(url, tally, stop, after)))
    return stop, tasks


async def finish(tally: Tally, stop: asyncio.Event, tasks: list[asyncio.Task[Any]],
                 last_seq: int, seconds: float = 30) -> list[BaseException]:
    """Stop the load, let the subscriber receive every batch up to ``last_seq``,
    then stop it; returns the failures of the load's tasks."""
    stop.set()
    *workers, subscriber = tasks
    results = await asyncio.gather(*workers, return_exceptions=True)

    async def caught_up() -> None:
        while tally.stream_last < last_seq and not subscriber.done():
            tally.progressed.clear()
            await tally.progressed.wait()

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(caught_up(), seconds)
    subscriber.cancel()
    results += await asyncio.gather(subscriber, return_exceptions=True)
    return [r for r in results if isinstance(r, BaseException)
            and not isinstance(r, asyncio.CancelledError)]


async def read_log(url: str) -> list[dict[str, Any]]:
    headers = {"Authorization": "Bearer p0-token"}
    events: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        while True:
            after = events[-1]["seq"] if events else 0
            page = (await client.get(f"{PATH}/log", params={"after": after, "limit": 5000})).json()
            if not page["events"]:
                return events
            events.extend(page["events"])


def check_log(events: list[dict[str, Any]], tally: Tally) -> dict[str, int]:
    """Dense numbering and every acknowledgement present; returns the counts."""
    seqs = [e["seq"] for e in events]
    holes = sum(1 for a, b in itertools.pairwise(seqs) if b != a + 1)
    holes += 0 if not seqs or seqs[0] == 1 else 1
    by_seq = {e["seq"]: e["instances"] for e in events}
    lost = 0
    for cid, (agent, seq, position) in tally.acked.items():
        entries = by_seq.get(seq, [])
        entry = entries[position] if position < len(entries) else None
        if entry is None or entry["bindings"]["cid"] != cid or entry["performer"] != agent:
            lost += 1
    instances = sum(len(e["instances"]) for e in events)
    return {"batches": len(events), "instances": instances, "holes": holes, "lost": lost}


async def kill_cycles(
    directory: Path,
    cycles: int,
    *,
    agents: int = 8,
    readers: int = 2,
    seed: int = 1,
    options: tuple[str, ...] = ("--policy", "batched", "--batch-window-ms", "5"),
    progress: Any = None,
    batches: tuple[int, int] = (20, 300),
    recovered: Callable[[str], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """Run load, ``kill -9`` the server at a random moment, restart it on the same
    database, check the log; ``cycles`` times.

    Each kill strikes once the stream has received between ``batches[0]`` and
    ``batches[1]`` more batches (drawn at random); ``report["kills"]`` says, for
    each, how many batches it came after and how many attempts the agents had
    in flight at that moment (sent, not answered). ``recovered`` is awaited with
    the URL of the server restarted after the last kill, once its log is checked."""
    rng = random.Random(seed)
    config = config_file(directory, agents)
    db = directory / "soak.db"
    tally = Tally()
    report: dict[str, Any] = {}
    kills: list[dict[str, int]] = []
    for cycle in range(cycles):
        async with server_process(config, db, *options) as (proc, url):
            before = len(events := await read_log(url))
            check = check_log(events, tally)
            if check["holes"] or check["lost"]:
                report.update(check, failed_at=cycle)
                return report
            stop, tasks = await load(
                url, tally, agents=agents, readers=readers, run=f"r{cycle}", after=before
            )
            start = tally.stream_batches
            unanswered = tally.attempts - len(tally.acked)  # by earlier kills, for good
            target = start + rng.randint(*batches)
            while tally.stream_batches < target and not any(t.done() for t in tasks):
                tally.progressed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(tally.progressed.wait(), 1)
            kills.append({
                "batches": tally.stream_batches - start,
                "in_flight": tally.attempts - len(tally.acked) - unanswered,
            })
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            stop.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            errors = [r for r in results if isinstance(r, AssertionError)]
            if errors:
                raise errors[0]
        if progress:
            progress(cycle + 1, cycles, len(tally.acked))
    async with server_process(config, db, *options) as (_, url):
        final = check_log(await read_log(url), tally)
        if recovered is not None:
            await recovered(url)
    report.update(final)
    report.update(
        cycles=cycles,
        kills=kills,
        acknowledged=len(tally.acked),
        attempts=tally.attempts,
        stream_gaps=len(tally.stream_gaps),
        stream_duplicates=tally.stream_duplicates,
    )
    return report


def rss(pid: int) -> int:
    """Resident memory of a process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))
