"""kill -9 peer to peer: a peer killed mid-enactment and restarted resumes and completes.

Three processes (tests/peer_agent.py) enact Purchase with no server: a buyer,
a seller and a shipper, each with its own SQLite log and HTTP endpoint on a
loopback port, found through a directory written as TOML. The buyer opens
COUNT enactments at once and every agent reacts to what becomes enabled, so
many enactments are in flight when one agent, chosen per case, is killed with
SIGKILL once it has printed a given number of its own actions (it is told to
hold a few actions later, so the kill never comes after it has done its
part). The log it left, read from a copy, must hold actions of its own and
enactments in which it still has to act. Restarted on the same log and port,
it must resume from the log and perform what it owed, and all three must
complete every enactment, with logs that agree instance for instance (COUNT
happy paths, each action by its agent, nothing twice), nothing left
unacknowledged and no refusal anywhere.

Nothing here sleeps: the test waits on what the agents print, with timeouts,
and kills every process it started when it ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from strabo.serving import free_port
from tests.processes import ROOT

COUNT = 30
AGENTS = {"buyer": "Buyer", "seller": "Seller", "shipper": "Shipper"}
# The happy path of Purchase, and who performs each action.
PATH = {
    "RFQ": "buyer",
    "Quote": "seller",
    "Accept": "buyer",
    "Ship": "seller",
    "Deliver": "shipper",
    "Completed": "buyer",
}
# A run to be killed after K actions holds after K + HOLD (< what it has to do).
HOLD = 10
WAIT = 30.0  # seconds for any one step (starting, reaching the kill point, finishing)


class Agent:
    """One agent process: its stdout read line by line as it comes; ``news`` (shared
    by the agents of a test) is set on every line and every exit."""

    def __init__(self, name: str, directory: Path, store: Path, news: asyncio.Event) -> None:
        self.name = name
        self.directory = directory
        self.store = store
        self.stderr = store.with_suffix(".stderr")
        self.news = news
        self.proc: asyncio.subprocess.Process | None = None
        self.lines: list[str] = []  # of the current run
        self.runs: list[list[str]] = []  # every run's lines
        self._reader: asyncio.Task[None] | None = None

    async def start(self, hold_after: int | None = None) -> None:
        """Start the agent; with ``hold_after``, it performs at most that many
        actions in this run (then its handlers wait, until it is killed)."""
        self.lines = []
        self.runs.append(self.lines)
        with self.stderr.open("ab") as err:  # a file: a full pipe would block the agent
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.peer_agent",
                "--directory",
                str(self.directory),
                "--agent",
                self.name,
                "--store",
                str(self.store),
                "--count",
                str(COUNT),
                *(["--hold-after", str(hold_after)] if hold_after is not None else []),
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self._reader = asyncio.create_task(self._read(self.proc, self.lines))

    async def _read(self, proc: asyncio.subprocess.Process, lines: list[str]) -> None:
        assert proc.stdout is not None
        while raw := await proc.stdout.readline():
            lines.append(raw.decode().rstrip("\n"))
            self.news.set()
        await proc.wait()
        self.news.set()

    def acts(self) -> int:
        return sum(1 for line in self.lines if line.startswith("act "))

    def acted(self, count: int) -> bool:
        return self.acts() >= count

    def line(self, pattern: str) -> re.Match[str] | None:
        for text in self.lines:
            match = re.fullmatch(pattern, text)
            if match:
                return match
        return None

    def exited(self) -> bool:
        return self.proc is not None and self.proc.returncode is not None

    def report(self) -> str:
        tail = self.lines[-3:]
        err = self.stderr.read_text()[-1500:] if self.stderr.exists() else ""
        code = self.proc.returncode if self.proc else None
        return f"{self.name}: exit {code}, {self.acts()} acts, last lines {tail}, stderr: {err!r}"

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(sig)

    async def wait(self) -> int:
        assert self.proc is not None and self._reader is not None
        await asyncio.wait_for(self._reader, WAIT)
        return await self.proc.wait()


async def until(agents: Collection[Agent], what: str, predicate: Callable[[], bool]) -> None:
    """Wait until ``predicate()`` holds, re-checking on each line an agent prints;
    fail if one of ``agents`` exits first, or after WAIT seconds."""
    news = next(iter(agents)).news

    async def wait() -> None:
        while not predicate():
            gone = [a.report() for a in agents if a.exited()]
            assert not gone, f"exited before {what}: {gone}"
            news.clear()
            await news.wait()

    try:
        await asyncio.wait_for(wait(), WAIT)
    except TimeoutError:
        reports = [a.report() for a in agents]
        raise AssertionError(f"no {what} in {WAIT} s: {reports}") from None


def hold_loopback_ports(count: int) -> tuple[list[int], list[socket.socket]]:
    """Distinct loopback ports nobody listens on, below the range the OS picks
    from for outgoing connections: free_port's are in that range, where a client
    socket (even a peer retrying to reach a dead agent: a TCP self-connect) could
    take a killed agent's port before it is restarted. With the sockets that hold
    them until they are closed, at the end of the test.

    Each socket is bound without SO_REUSEADDR, so that the bind fails on a port
    that anyone holds or listens on (another test's, running at the same time
    under pytest-xdist), then marked SO_REUSEADDR, so that the agent (whose
    server sets it too) can bind the port and listen, again after each restart,
    while no other test can pick it."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        low = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return [free_port() for _ in range(count)], []  # not Linux: the OS picks the ports
    held: list[socket.socket] = []
    pick = random.Random()
    while len(held) < count:
        port = pick.randrange(max(1024, low - 16384), low)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.append(sock)
    return sorted(sock.getsockname()[1] for sock in held), held


def write_directory(tmp_path: Path, ports: list[int]) -> Path:
    lines = ["[mas.purchase]", 'protocols = ["purchase"]']
    for (name, role), port in zip(AGENTS.items(), ports, strict=True):
        lines += [
            f"[mas.purchase.agents.{name}]",
            f'roles = ["{role}"]',
            f'token = "{name}-secret"',
            f'url = "http://127.0.0.1:{port}"',
        ]
    path = tmp_path / "mas.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def read_log(store: Path) -> dict[str, Any]:
    """What an agent's SQLite file holds: its log (performer, action, bindings as
    JSON), its outbox and its refusals. Reads a copy, so that the file itself is
    left exactly as the agent left it."""
    copy = store.parent / "copy" / store.name
    shutil.rmtree(copy.parent, ignore_errors=True)
    copy.parent.mkdir()
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{store}{suffix}").exists():
            shutil.copy(f"{store}{suffix}", f"{copy}{suffix}")
    db = sqlite3.connect(copy)
    try:
        log = [
            (performer, item["action"], json.dumps(item["bindings"], sort_keys=True))
            for performer, instances in db.execute(
                "SELECT performer, instances FROM log ORDER BY protocol, seq"
            )
            for item in json.loads(instances)
        ]
        outbox = db.execute("SELECT protocol, seq, peer FROM outbox").fetchall()
        refusals = db.execute("SELECT * FROM refusals").fetchall()
    finally:
        db.close()
    return {"log": log, "outbox": outbox, "refusals": refusals}


def enactments(log: list[tuple[str, str, str]]) -> dict[str, list[str]]:
    """The actions of each enactment (by ID) in a log, in log order."""
    actions: dict[str, list[str]] = {}
    for _, action, bindings in log:
        actions.setdefault(json.loads(bindings)["ID"], []).append(action)
    return actions


async def enact_with_kills(tmp_path: Path, victim: str, kills: tuple[int, ...]) -> None:
    """Run the three agents; each time the victim has printed ``kills[i]`` actions
    in its current run, kill it with SIGKILL and restart it on its log. A run
    that will be killed is told to hold after HOLD more actions than that: the
    kill may land while it is acting, but never after it has done all its work."""
    ports, holders = hold_loopback_ports(len(AGENTS))
    directory = write_directory(tmp_path, ports)
    news = asyncio.Event()
    agents = {name: Agent(name, directory, tmp_path / f"{name}.db", news) for name in AGENTS}
    everyone = list(agents.values())
    target = agents[victim]
    owed: set[tuple[str, str]] = set()
    try:
        for agent in agents.values():
            await agent.start(kills[0] + HOLD if agent is target else None)
        for run, kill_after in enumerate(kills, 1):
            await until(everyone, f"{kill_after} acts", partial(target.acted, kill_after))
            target.kill()
            assert await target.wait() == -signal.SIGKILL
            assert not any(a.line(r"done .*") for a in agents.values()), "done before the kill"

            # The kill landed mid-enactment: the log the victim left holds actions
            # of its own, and enactments in which it has yet to act.
            left = read_log(target.store)
            assert any(performer == victim for performer, _, _ in left["log"]), left["log"]
            owed = {
                (action, enactment)
                for enactment, done in enactments(left["log"]).items()
                for action, performer in PATH.items()
                if performer == victim and action not in done
            }
            assert owed, f"{victim} had nothing left to do in the enactments of its log"

            await target.start(kills[run] + HOLD if run < len(kills) else None)
            await until(everyone, "ready", lambda: target.line(r"ready .*") is not None)
            resumed = target.line(r"ready \w+ enactments=(\d+)")
            assert resumed is not None, target.lines
            # It knows at least the enactments of its log (peers may have told it more).
            assert int(resumed[1]) >= len(enactments(left["log"])), "it did not resume its log"

        await until(everyone, "done", lambda: all(a.line(r"done .*") for a in everyone))
        for agent in everyone:
            assert agent.line(rf"done {agent.name} complete={COUNT} refusals=0"), agent.lines
        for agent in agents.values():
            agent.kill(signal.SIGTERM)
        for agent in agents.values():
            assert await agent.wait() == 0, agent.report()
    finally:
        for agent in agents.values():
            agent.kill()
        for agent in agents.values():
            if agent.proc is not None:
                await agent.proc.wait()
        for sock in holders:
            sock.close()

    logs = {name: read_log(agent.store) for name, agent in agents.items()}
    for name, held in logs.items():
        assert held["refusals"] == [], (name, held["refusals"])
        assert held["outbox"] == [], (name, held["outbox"])
        duplicates = [i for i, n in Counter(held["log"]).items() if n > 1]
        assert not duplicates, (name, duplicates)
    # Every agent holds the same instances, performer for performer...
    reference = set(logs["buyer"]["log"])
    for name, held in logs.items():
        assert set(held["log"]) == reference, (
            name,
            sorted(reference ^ set(held["log"]))[:5],
        )
    # ... and they are COUNT whole happy paths, each action by its agent.
    assert all(PATH[action] == performer for performer, action, _ in reference)
    paths = enactments(logs["buyer"]["log"])
    assert len(paths) == COUNT
    for actions in paths.values():
        assert sorted(actions) == sorted(PATH), actions
    # The restarted agent performed what it owed in the enactments of its log.
    again = {tuple(line.split()[1:]) for line in agents[victim].runs[-1] if line.startswith("act ")}
    assert owed <= again, sorted(owed - again)[:5]


@pytest.mark.parametrize(
    ("victim", "kills"),
    [
        ("seller", (COUNT // 2,)),  # the responder, while quoting
        ("seller", (COUNT + COUNT // 3,)),  # the responder, while shipping
        ("seller", (COUNT // 3, COUNT // 3)),  # twice: killed again after its restart
        ("buyer", (COUNT // 3,)),  # the initiator, while still opening enactments
        ("buyer", (COUNT + COUNT // 3,)),  # the initiator, after opening all, while accepting
        ("shipper", (COUNT // 3,)),  # a third party, while delivering
    ],
    ids=[
        "responder-quoting",
        "responder-shipping",
        "responder-twice",
        "initiator-opening",
        "initiator-accepting",
        "third-party",
    ],
)
async def test_peer_killed_mid_enactment_resumes_and_completes(
    tmp_path: Path, victim: str, kills: tuple[int, ...]
) -> None:
    await enact_with_kills(tmp_path, victim, kills)
