"""SyncServer soak: hostile load that the test suite runs only briefly.

    .venv/bin/python bench/soak.py            # everything (about six minutes)
    .venv/bin/python bench/soak.py --quick    # smaller counts (under two minutes)
    .venv/bin/python bench/soak.py --only sse # one part: stream, kill, sse, slowloris

Parts (docs/performance.md quotes the figures):

stream     30 s of batched load (8 agents, every fifth attempt also sends a
           rejected duplicate), 2 concurrent log readers and a stream subscriber
           checking that batches arrive in order, each once.
kill       20 cycles of kill -9 under that load; after each restart the log must
           be dense and hold every acknowledged attempt.
sse        3,000 event streams that never read (100 agents x 30), then 200
           batches of 40 kB: the server's resident memory before, at its peak and
           after the clients leave.
slowloris  1,500 connections sending one header byte every 2 s, and 1,500 sending
           a declared body one byte every 2 s: how long until the server closed
           each, against the configured timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)  # not bench/: this file's name would hide the packages

from bench._hostile import (  # noqa: E402
    CREATE,
    PATH,
    Tally,
    check_log,
    config_file,
    finish,
    kill_cycles,
    load,
    read_log,
    rss,
    server_process,
)
from syncserver.client import open_client  # noqa: E402

MiB = 2**20
#: A Create's line items of about 40 kB, in the shape the protocol's
#: ``ucp/line_items.json`` requires (``{"item": {"id": ...}, "quantity": ...}``):
#: one line item whose product id is 40,000 characters long.
BIG_LINE_ITEMS = [{"item": {"id": "x" * 40_000, "title": "Roses"}, "quantity": 1}]


def say(text: str) -> None:
    print(text, flush=True)


async def stream_part(directory: Path, seconds: float) -> bool:
    tally = Tally()
    config = config_file(directory, 8)
    options = ("--policy", "batched", "--batch-window-ms", "5")
    async with server_process(config, directory / "stream.db", *options) as (_, url):
        stop, tasks = await load(url, tally, agents=8, readers=2, run="s")
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            await asyncio.sleep(min(5.0, seconds - (time.monotonic() - started)))
            say(f"   {time.monotonic() - started:4.0f} s: {len(tally.acked):6d} acknowledged, "
                f"{tally.stream_batches:6d} batches streamed")
        stop.set()
        await asyncio.gather(*tasks[:-1], return_exceptions=True)  # the agents and readers
        events = await read_log(url)
        failures = await finish(tally, stop, tasks, events[-1]["seq"] if events else 0)
        check = check_log(events, tally)
    behind = check["batches"] - tally.stream_last
    ok = not failures and not tally.stream_gaps and not tally.stream_duplicates and not behind
    ok = ok and check["holes"] == 0 and check["lost"] == 0
    say(f"   {len(tally.acked)} attempts acknowledged, {check['batches']} batches, "
        f"{tally.log_reads} log pages read concurrently")
    say(f"   stream: {tally.stream_batches} batches, {len(tally.stream_gaps)} gaps, "
        f"{tally.stream_duplicates} duplicates, {behind} missing at the end; "
        f"log: {check['holes']} holes, "
        f"{check['lost']} acknowledged attempts missing"
        + (f"; failures: {failures[:3]}" if failures else ""))
    return ok


async def kill_part(directory: Path, cycles: int) -> bool:
    def progress(done: int, total: int, acked: int) -> None:
        say(f"   cycle {done}/{total}: {acked} acknowledged so far")

    report = await kill_cycles(directory, cycles, progress=progress)
    say(f"   {report['cycles']} kill -9 cycles, {report['acknowledged']} attempts acknowledged, "
        f"{report['instances']} instances in the log ({report['batches']} batches)")
    say(f"   log holes {report['holes']}, acknowledged attempts lost {report['lost']}, "
        f"stream gaps {report['stream_gaps']}, duplicates {report['stream_duplicates']}")
    return report["holes"] == 0 and report["lost"] == 0 and "failed_at" not in report


async def open_stream(host: str, port: int, token: str) -> tuple[asyncio.StreamReader,
                                                                asyncio.StreamWriter]:
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that reads nothing
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(f"GET {PATH}/events HTTP/1.1\r\nHost: x\r\n"
                 f"Authorization: Bearer {token}\r\n\r\n".encode())
    await writer.drain()
    await asyncio.wait_for(reader.readuntil(b": connected\n\n"), 30)
    return reader, writer


async def sse_part(directory: Path, streams: int, batches: int, rounds: int = 3) -> bool:
    """Rounds of: open ``streams`` streams that never read, publish ``batches``
    batches of 40 kB, close the streams. Each round's streams start from batch 1,
    so each catches up on the log before the new batches; ``batches`` are
    published before the first round too, so that it takes the same paths as
    the later ones. The first round warms the server up (its allocator, the
    log's cache); the later ones must stay under 300 MiB at their peak and come
    back to where the first one ended. (Without history before it, the first
    round caught up on nothing, and with 600 streams the second round's catch-up
    set the allocator's high-water mark: 73 MiB after round 1, 125 after rounds
    2 and 3 alike.)"""
    agents = max(streams // 30, 1)
    config = config_file(directory, agents)
    ok = True
    async with server_process(config, directory / "sse.db") as (proc, url):
        host, port = url.removeprefix("http://").split(":")
        headers = {"Authorization": "Bearer p0-token"}
        client = open_client(url, 30, headers=headers)
        try:
            await client.request("GET", "/health")
            for n in range(batches):  # the history every round's streams catch up on
                bindings = {**CREATE, "cid": f"history-{n}", "line_items": BIG_LINE_ITEMS}
                body = {"instances": [{"action": "Create", "bindings": bindings}]}
                answer = await client.request("POST", f"{PATH}/attempts", body)
                assert answer.status_code == 200, answer.text
            start = rss(proc.pid)
            say(f"   server at start ({batches} batches in its log): {start / MiB:6.1f} MiB")
            settled = start
            for round_ in range(1, rounds + 1):
                held = []
                for i in range(streams):
                    held.append(await open_stream(host, int(port), f"p{i % agents}-token"))
                connected = peak = rss(proc.pid)
                for n in range(batches):
                    bindings = {**CREATE, "cid": f"big{round_}-{n}", "line_items": BIG_LINE_ITEMS}
                    body = {"instances": [{"action": "Create", "bindings": bindings}]}
                    answer = await client.request("POST", f"{PATH}/attempts", body)
                    assert answer.status_code == 200, answer.text
                    if n % 10 == 0:
                        peak = max(peak, rss(proc.pid))
                for _ in range(10):  # the server pushes what the sockets take; sample it
                    await asyncio.sleep(0.2)
                    peak = max(peak, rss(proc.pid))
                for _, writer in held:
                    writer.transport.abort()
                streams_left = -1
                for _ in range(100):  # until the server has freed every stream
                    await asyncio.sleep(0.1)
                    streams_left = (await client.request("GET", "/health")).json()["streams"]
                    if streams_left == 0:
                        break
                await asyncio.sleep(2)  # the server returns freed pages 1 s after a burst
                after = rss(proc.pid)
                say(f"   round {round_}: {streams} streams open {connected / MiB:6.1f} MiB, "
                    f"peak {peak / MiB:6.1f} MiB, after they closed {after / MiB:6.1f} MiB "
                    f"({streams_left} streams left)")
                if round_ > 1:
                    ok = ok and peak < 300 * MiB and after < settled * 1.15
                ok = ok and streams_left == 0
                settled = after if round_ == 1 else settled
        finally:
            await client.aclose()
    return ok


async def slowloris_part(directory: Path, connections: int, limit: float) -> bool:
    config = config_file(directory, 1, f"header_timeout = {limit}\nbody_timeout = {limit}\n")
    ok = True
    async with server_process(config, directory / "slow.db") as (proc, url):
        host, port = url.removeprefix("http://").split(":")
        for kind in ("headers", "body"):
            head = (f"POST {PATH}/attempts HTTP/1.1\r\nHost: x\r\n"
                    "Authorization: Bearer p0-token\r\nContent-Type: application/json\r\n"
                    "Content-Length: 1000\r\n\r\n").encode()
            conns = []
            for _ in range(connections):
                reader, writer = await asyncio.open_connection(host, int(port))
                if kind == "body":
                    writer.write(head)
                    head_sent = 0
                else:
                    head_sent = 0
                conns.append([reader, writer, head_sent, time.monotonic()])
            closed: dict[int, float] = {}

            async def watch(
                i: int, reader: asyncio.StreamReader, opened: float, closed: dict[int, float]
            ) -> None:
                with contextlib.suppress(ConnectionError):
                    while await reader.read(65536):
                        pass
                closed[i] = time.monotonic() - opened

            watchers = [
                asyncio.create_task(watch(i, c[0], c[3], closed)) for i, c in enumerate(conns)
            ]
            deadline = time.monotonic() + limit * 4 + 10
            while len(closed) < connections and time.monotonic() < deadline:
                for i, conn in enumerate(conns):  # one more byte on every open connection
                    if i in closed:
                        continue
                    writer = conn[1]
                    data = head[conn[2]:conn[2] + 1] if kind == "headers" else b" "
                    conn[2] += 1
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        writer.write(data)
                await asyncio.sleep(2)  # the slowloris pace: one byte every 2 s
            for task in watchers:
                task.cancel()
            for conn in conns:
                conn[1].transport.abort()
            worst = max(closed.values()) if closed else float("nan")
            say(f"   {kind}: {len(closed)}/{connections} closed by the server; slowest after "
                f"{worst:.2f} s (timeout {limit} s); server memory {rss(proc.pid) / MiB:.1f} MiB")
            ok = ok and len(closed) == connections and worst < limit + 2
    return ok


async def main(quick: bool, only: str | None) -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    say(f"strabo SyncServer soak ({'quick' if quick else 'full'} run), Python "
        f"{sys.version.split()[0]}\n")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        if only in (None, "stream"):
            seconds = 5 if quick else 30
            say(f"stream: {seconds} s of batched load with log readers and a subscriber")
            results["stream"] = await stream_part(directory, seconds)
        if only in (None, "kill"):
            cycles = 4 if quick else 20
            say(f"\nkill: {cycles} cycles of kill -9 under batched load")
            results["kill"] = await kill_part(directory, cycles)
        if only in (None, "sse"):
            streams, batches = (600, 50) if quick else (3000, 200)
            say(f"\nsse: {streams} event streams that never read, then {batches} batches of 40 kB")
            results["sse"] = await sse_part(directory, streams, batches)
        if only in (None, "slowloris"):
            connections = 300 if quick else 1500
            say(f"\nslowloris: {connections} connections, one byte every 2 s")
            results["slowloris"] = await slowloris_part(directory, connections, 5.0)
    say("\n" + ", ".join(f"{k}: {'ok' if v else 'FAILED'}" for k, v in results.items()))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--only", choices=["stream", "kill", "sse", "slowloris"],
                        help="run one part only")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.quick, args.only)))
