"""What event-stream subscribers cost the SyncServer (``bench/syncserver.py
--fanout``).

One SyncServer process; one agent attempts actions one after the other while
S other agents follow the protocol's event stream (``GET .../events``), read
by a separate process that reads and discards (so the readers do not share
the server's interpreter). S alternates between 1 and ``--subscribers`` (128),
slice by slice, on the same server. Printed: the attempter's throughput and
median latency with each S, and the server's CPU time per event per extra
subscriber (``/proc/PID/stat``: user + system).

Goals: at most 5 us of server CPU per subscriber per event; with 128
subscribers, at least 50% of the throughput with one. Printed beside them, the
floor: what one ``socket.send`` of the same frame costs here, in the bench's
process, to a reader process waiting in epoll, since writing a subscriber its
frame is at least one send.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._checkout import PROTOCOL, body, client, encoded, process, steps

PATH = "/mas/bench/protocols/SimpleUCP"
ROOT = Path(__file__).resolve().parent.parent


def _config(directory: Path, readers: int) -> Path:
    path = directory / "fanout.toml"
    path.write_text(
        f'[mas.bench]\nprotocols = ["{PROTOCOL}"]\n'
        '[mas.bench.agents.platform]\nroles = ["Platform"]\ntoken = "platform"\n'
        + "".join(
            f'[mas.bench.agents.r{i}]\nroles = ["Business"]\ntoken = "r{i}"\n'
            for i in range(readers)
        )
    )
    return path


def frame_size() -> int:
    """The bytes of the frame each subscriber is written per event: one Create."""
    from langshaw import ActionInstance, LangshawProtocol
    from syncserver.batch import Batch, Entry

    protocol = LangshawProtocol.load(PROTOCOL)
    instance = ActionInstance(protocol.action("Create"), steps("f100000")[0][2])
    return len(Batch(protocol.name, 100000, (Entry(instance, "platform", None),)).sse_frame)


def _cpu(pid: int) -> float:
    """The process's user + system CPU seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _read(host: str, port: int, count: int, after: int) -> None:
    """The readers' process: ``count`` event streams from batch ``after`` on,
    read and discarded."""

    async def one(i: int, ready: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            f"GET {PATH}/events?after={after} HTTP/1.1\r\nHost: bench\r\n"
            f"Authorization: Bearer r{i}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        ready.set()
        while await reader.read(65536):
            pass

    events = [asyncio.Event() for _ in range(count)]
    tasks = [asyncio.create_task(one(i, events[i])) for i in range(count)]
    await asyncio.gather(*(e.wait() for e in events))
    print("ready", flush=True)
    await asyncio.gather(*tasks)


async def _readers(host: str, port: int, count: int, after: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench._fanout", "--read", host, str(port), str(count), str(after),
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.strip() == b"ready", line
    return proc


def _floor_reader(port: int, count: int, ready: Any) -> None:
    """The floor's readers, in a process of their own: ``count`` connections
    waited on with epoll and drained, as the bench's readers do."""
    import select
    import socket

    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    poller = select.epoll()
    for sock in socks:
        sock.setblocking(False)
        poller.register(sock.fileno(), select.EPOLLIN)
    by_fd = {sock.fileno(): sock for sock in socks}
    ready.set()
    while True:
        for fd, _ in poller.poll():
            with contextlib.suppress(BlockingIOError):
                if not by_fd[fd].recv(1 << 20):
                    return


def send_floor(size: int, count: int, rounds: int = 5) -> float:
    """The CPU seconds one ``socket.send`` of ``size`` bytes costs here, to one
    of ``count`` loopback connections in turn (the least of ``rounds``): what
    writing a frame to a subscriber costs at the least. As in the bench, the
    reader is another process waiting in epoll, so the send also wakes it (the
    kernel's part: a loopback send does the receiving socket's work too)."""
    import multiprocessing
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(count)
    ready = multiprocessing.Event()
    reader = multiprocessing.Process(
        target=_floor_reader, args=(listener.getsockname()[1], count, ready), daemon=True
    )
    reader.start()
    writers = [listener.accept()[0] for _ in range(count)]
    ready.wait(60)
    for writer in writers:
        writer.setblocking(False)
        writer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frame = b"x" * size
    best = float("inf")
    try:
        for _ in range(rounds):
            spent = 0.0
            for _ in range(100):
                start = time.process_time()
                for writer in writers:
                    writer.send(frame)
                spent += time.process_time() - start
                time.sleep(0.002)  # untimed: the reader drains and waits again
            best = min(best, spent / (100 * count))
    finally:
        for sock in (*writers, listener):
            sock.close()
        reader.join(10)
    return best


async def compare(subscribers: int, quick: bool) -> None:
    seconds = 1.5 if quick else 4.0
    rounds = 2 if quick else 3
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        config = _config(directory, subscribers)
        command = (
            sys.executable, "-m", "strabo.cli", "syncserver", "--config", str(config),
            "--db", str(directory / "fanout.db"), "--port", "0", "--log-level", "warning",
        )  # fmt: skip
        async with process(*command) as (host, port, pid):
            agent = client(host, port, "platform")
            done = {1: 0, subscribers: 0}
            spent = {1: 0.0, subscribers: 0.0}
            cpu = {1: 0.0, subscribers: 0.0}
            rcpu = {1: 0.0, subscribers: 0.0}
            acpu = {1: 0.0, subscribers: 0.0}
            waits: dict[int, list[float]] = {1: [], subscribers: []}
            serial = 0
            for _ in range(rounds):
                for count in (1, subscribers):
                    info = await agent.request("GET", PATH)
                    readers = await _readers(host, port, count, info.json()["last_seq"])
                    try:
                        cpu0, start = _cpu(pid), time.perf_counter()
                        rcpu0, acpu0 = _cpu(readers.pid), time.process_time()
                        while time.perf_counter() - start < seconds:
                            serial += 1
                            payload = encoded(body(("Create", steps(f"f{serial}")[0][2])))
                            sent = time.perf_counter()
                            answer = await agent.request(
                                "POST", f"{PATH}/attempts", content=payload
                            )
                            waits[count].append(time.perf_counter() - sent)
                            assert answer.status_code == 200, answer.text
                            done[count] += 1
                        spent[count] += time.perf_counter() - start
                        cpu[count] += _cpu(pid) - cpu0
                        rcpu[count] += _cpu(readers.pid) - rcpu0
                        acpu[count] += time.process_time() - acpu0
                    finally:
                        readers.terminate()
                        await readers.wait()
            await agent.aclose()
    one, many = done[1] / spent[1], done[subscribers] / spent[subscribers]
    per_event = {n: cpu[n] / done[n] for n in done}
    extra = (per_event[subscribers] - per_event[1]) / (subscribers - 1)
    print(f"\n8. event stream fan-out: one attempter, 1 vs {subscribers} subscribers")
    for n, rate in ((1, one), (subscribers, many)):
        print(
            f"   {n:4} subscriber(s): {rate:7.0f} actions/s, median latency "
            f"{statistics.median(waits[n]) * 1e3:6.3f} ms, server CPU {per_event[n] * 1e6:7.1f} "
            "us per event"
        )
    print(
        f"   throughput with {subscribers}: {many / one:5.0%} of one (goal >= 50%); "
        f"server CPU per subscriber per event {extra * 1e6:5.1f} us (goal <= 5 us)"
    )
    floor = send_floor(frame_size(), subscribers)
    print(
        f"   the floor: one socket.send of the frame costs {floor * 1e6:4.1f} us of CPU here "
        f"({subscribers} loopback connections): a subscriber costs "
        f"{extra / floor:4.2f}x that"
    )
    # What the machine allows: every process of the bench shares its cores, and
    # the readers' reads cost about what the server's writes do.
    cores = os.cpu_count() or 1
    readers_cpu = rcpu[subscribers] / done[subscribers]
    attempter_cpu = acpu[subscribers] / done[subscribers]
    busy = (cpu[subscribers] + rcpu[subscribers] + acpu[subscribers]) / spent[subscribers]
    at_floor = per_event[1] + (subscribers - 1) * floor + readers_cpu + attempter_cpu
    print(
        f"   the machine: CPU per event with {subscribers}: server "
        f"{per_event[subscribers] * 1e6:.0f} + readers {readers_cpu * 1e6:.0f} "
        f"+ attempter {attempter_cpu * 1e6:.0f} us, "
        f"{busy / cores:.0%} of {cores} cores busy; with every subscriber at the floor, "
        f"{cores} cores allow at most {min(1.0, cores / at_floor / one):.0%} of one"
    )


if __name__ == "__main__" and sys.argv[1:2] == ["--read"]:
    asyncio.run(_read(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
