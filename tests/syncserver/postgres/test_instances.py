"""Two and three ``strabo syncserver`` processes over one PostgreSQL log, under
hostile load, with ``kill -9`` of one of them.

* Conflicting attempts spread over the instances: the same Create sent to every
  instance at once, Created and Failed (which exclude each other) to two: one
  wins, the others are refused by the rule, never by a store failure.
* Load on every instance, then ``kill -9`` of one: its agents resend their
  attempt (same attempt id) to another instance and go on there; a Business
  agent (PeachAdapter, SyncExecutor) reaches the instances through a round-robin
  TCP front, as behind a load balancer, and resumes through it; event streams
  resume on another instance from the last batch they received.
* Then the log, read back: numbered 1, 2, 3, ... with no hole; every
  acknowledged attempt in it where its answer said, the platforms' and the
  Business's alike; replayed through the semantics, no rule broken; every stream
  received every batch once, in order; the Business answered every checkout,
  including those of the killed instance.

Two and three instances, under either policy (a few seconds each).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import signal
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from bench._hostile import server_process
from langshaw import ActionInstance, SocialState
from peach import FeasibleAction, PeachAdapter, SyncExecutor
from peach.executor import Member
from syncserver.batch import Batch
from tests.conftest import PROTOCOLS, SIMPLE_CREATE, SIMPLE_CREATED, load
from tests.harness import until

SIMPLE = load("atomic-ucp.lsh")
PATH = "/mas/shop/protocols/SimpleUCP"
PLATFORMS = 6
REASON = {"status": 400, "code": "invalid", "message": "no"}


def config_file(directory: Path) -> Path:
    lines = [f'[mas.shop]\nprotocols = ["{PROTOCOLS / "atomic-ucp.lsh"}"]']
    agents = {f"p{i}": "Platform" for i in range(PLATFORMS)}
    agents |= {"b0": "Business", "b1": "Business", "business": "Business"}
    for name, role in agents.items():
        lines.append(f'[mas.shop.agents.{name}]\nroles = ["{role}"]\ntoken = "{name}-token"')
    path = directory / "shop.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def instance(action: str, cid: str) -> dict[str, Any]:
    bindings: dict[str, Any] = {"cid": cid}
    if action == "Create":
        bindings |= SIMPLE_CREATE
    elif action == "Created":
        bindings |= {"Create": True, "id": f"k-{cid}", **SIMPLE_CREATED}
    else:
        bindings |= {"Create": True, "reason": REASON}
    return {"action": action, "bindings": bindings}


class Instances:
    """The running instances by index; a killed one is gone from ``live``."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.procs: list[asyncio.subprocess.Process] = []
        self.dead: set[int] = set()

    @property
    def live(self) -> list[int]:
        return [i for i in range(len(self.urls)) if i not in self.dead]

    def kill(self, index: int) -> None:
        self.dead.add(index)
        self.procs[index].send_signal(signal.SIGKILL)

    def port(self, index: int) -> int:
        return int(self.urls[index].rsplit(":", 1)[1])


class Front:
    """A round-robin TCP front for the instances, as a load balancer: each new
    connection goes to the next instance that accepts it."""

    def __init__(self, instances: Instances) -> None:
        self.instances = instances
        self.turn = itertools.count()
        self.server: asyncio.Server | None = None
        self.pipes: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for pipe in self.pipes:
            pipe.cancel()
        await asyncio.gather(*self.pipes, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        count = len(self.instances.urls)
        for _ in range(count):
            index = next(self.turn) % count
            if index in self.instances.dead:
                continue
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    "127.0.0.1", self.instances.port(index)
                )
            except OSError:
                continue
            for pipe in (self._pipe(reader, up_writer), self._pipe(up_reader, writer)):
                task = asyncio.ensure_future(pipe)
                self.pipes.add(task)
                task.add_done_callback(self.pipes.discard)
            return
        writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


class RecordingExecutor(SyncExecutor):
    """A SyncExecutor that notes where each acknowledged instance is, as the
    server's answer says (the batch and the positions of the attempt in it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acked: list[tuple[str, str, int, int]] = []  # action, cid, seq, position

    async def _send(
        self, adapter: Member, instances: Sequence[ActionInstance], attempt_id: str
    ) -> tuple[Batch, list[int]]:
        batch, mine = await super()._send(adapter, instances, attempt_id)
        for position in mine:
            done = batch.entries[position].instance
            self.acked.append((done.action.name, done["cid"], batch.seq, position))
        return batch, mine


@dataclass
class Tally:
    acked: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # cid -> agent, seq, pos
    resent: int = 0
    refused_duplicates: int = 0
    streams: dict[int, list[int]] = field(default_factory=dict)  # stream -> seqs received
    progressed: asyncio.Event = field(default_factory=asyncio.Event)


async def post(
    clients: dict[int, httpx.AsyncClient], instances: Instances, home: int, body: dict[str, Any]
) -> tuple[int, httpx.Response]:
    """Send an attempt to the ``home`` instance; if it is unreachable, resend the
    same attempt (same id) to the next live one. Returns where it was answered."""
    order = [home, *(i for i in instances.live if i != home)]
    for index in order:
        if index in instances.dead and index != home:
            continue
        try:
            return index, await clients[index].post(f"{PATH}/attempts", json=body)
        except httpx.TransportError:
            continue  # that instance is gone: the next one
    raise AssertionError("no instance answered")


async def platform(
    name: str,
    home: int,
    instances: Instances,
    tally: Tally,
    stop: asyncio.Event,
    rng: random.Random,
) -> None:
    """Create checkouts on the home instance; now and then, also send an earlier
    checkout's Create to another instance at once (a duplicate it must refuse)."""
    clients = {
        i: httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {name}-token"}, timeout=30
        )
        for i, url in enumerate(instances.urls)
    }
    try:
        for n in itertools.count(1):
            if stop.is_set():
                return
            cid = f"{name}-{n}"
            body = {"instances": [instance("Create", cid)], "attempt_id": f"{cid}-a"}
            sends = [post(clients, instances, home, body)]
            if n % 4 == 0:
                others = [i for i in instances.live if i != home] or [home]
                dup = {"instances": [instance("Create", f"{name}-1")], "attempt_id": f"{cid}-d"}
                sends.append(post(clients, instances, rng.choice(others), dup))
            answers = await asyncio.gather(*sends)
            (where, response), *duplicate = answers
            if where != home:
                home = where  # the home instance died: stay on the one that answered
                tally.resent += 1
            assert response.status_code == 200, (cid, response.status_code, response.text)
            [position] = response.json()["attempt"]
            tally.acked[cid] = (name, response.json()["seq"], position)
            tally.progressed.set()
            for _, refused in duplicate:
                assert refused.status_code == 409, refused.text
                assert refused.json()["error"]["code"] == "duplicate"
                tally.refused_duplicates += 1
    finally:
        for client in clients.values():
            await client.aclose()


async def stream(number: int, home: int, instances: Instances, tally: Tally) -> None:
    """Follow the event stream until cancelled; when the instance dies, resume on
    another from the last batch received."""
    seqs = tally.streams.setdefault(number, [])
    current = home
    headers = {"Authorization": "Bearer b0-token"}
    while True:
        if current in instances.dead:
            current = instances.live[number % len(instances.live)]
        url = instances.urls[current]
        try:
            async with (
                httpx.AsyncClient(base_url=url, headers=headers, timeout=None) as client,
                aconnect_sse(
                    client, "GET", f"{PATH}/events", params={"after": seqs[-1] if seqs else 0}
                ) as source,
            ):
                async for event in source.aiter_sse():
                    if event.event == "batch":
                        seqs.append(int(event.id))
                        tally.progressed.set()
        except httpx.TransportError:
            pass  # the instance died (or dropped the stream): resume elsewhere


async def read_log(url: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    headers = {"Authorization": "Bearer b0-token"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        while True:
            after = events[-1]["seq"] if events else 0
            page = (await client.get(f"{PATH}/log", params={"after": after, "limit": 5000})).json()
            if not page["events"]:
                return events
            events.extend(page["events"])


def replay(events: Sequence[dict[str, Any]]) -> None:
    """Every instance of the log, replayed in order through the semantics, is
    legal for its performer's role."""
    roles = {f"p{i}": {"Platform"} for i in range(PLATFORMS)}
    roles |= {"b0": {"Business"}, "b1": {"Business"}, "business": {"Business"}}
    state = SocialState(SIMPLE)
    for event in events:
        for entry in event["instances"]:
            action = ActionInstance(SIMPLE.action(entry["action"]), entry["bindings"])
            violation = state.attempt([action], roles[entry["performer"]])
            assert violation is None, (event["seq"], entry, violation)


async def wait_for(condition: Any, tally: Tally, seconds: float) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            tally.progressed.clear()
            await tally.progressed.wait()


@contextlib.asynccontextmanager
async def started(config: Path, url: str, count: int, options: Sequence[str]) -> AsyncIterator[
    Instances
]:
    instances = Instances()
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(count):
            proc, base = await stack.enter_async_context(server_process(config, url, *options))
            instances.procs.append(proc)
            instances.urls.append(base)
        yield instances


async def conflicts(instances: Instances, cids: list[str]) -> None:
    """Conflicting attempts spread over the instances: exactly one of each wins."""
    count = len(instances.urls)
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for agent in [f"p{i}" for i in range(count)] + ["b0", "b1"]:
            clients[agent] = [
                await stack.enter_async_context(httpx.AsyncClient(
                    base_url=url, headers={"Authorization": f"Bearer {agent}-token"}, timeout=30
                ))
                for url in instances.urls
            ]

        async def send(agent: str, where: int, body: dict[str, Any]) -> httpx.Response:
            return await clients[agent][where].post(f"{PATH}/attempts", json=body)

        creates = await asyncio.gather(*(
            send(f"p{i}", i, {"instances": [instance("Create", cid)], "attempt_id": f"{cid}-{i}"})
            for cid in cids for i in range(count)
        ))
        answers = await asyncio.gather(*(
            send(agent, where, {"instances": [instance(action, cid)]})
            for cid in cids for agent, where, action in (("b0", 0, "Created"), ("b1", 1, "Failed"))
        ))
    for i, cid in enumerate(cids):
        mine = creates[count * i : count * (i + 1)]
        assert sorted(r.status_code for r in mine) == [200] + [409] * (count - 1), cid
        assert {r.json()["error"]["code"] for r in mine if r.status_code == 409} == {"duplicate"}
        pair = answers[2 * i : 2 * i + 2]
        assert sorted(r.status_code for r in pair) == [200, 409], [r.text for r in pair]
        assert [r.json()["error"]["code"] for r in pair if r.status_code == 409] == ["nono"]


POLICIES = {"instant": ("--policy", "instant"),
            "batched": ("--policy", "batched", "--batch-window-ms", "3")}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("count", [2, 3])
async def test_instances_under_load_and_kill_9(
    tmp_path: Path, pg_url: str, count: int, policy: str
) -> None:
    options = POLICIES[policy]
    config = config_file(tmp_path)
    rng = random.Random(count)
    async with started(config, pg_url, count, options) as instances:
        await conflicts(instances, [f"x{i}" for i in range(12)])

        tally = Tally()
        stop = asyncio.Event()
        answered: set[str] = set()
        front = Front(instances)
        async with front as front_url:
            executor = RecordingExecutor(front_url, "business-token", "shop")
            business = PeachAdapter("business", SIMPLE, "Business", executor)

            @business.on_enabled("Created")
            async def answer(fa: FeasibleAction) -> None:
                await business.attempt([fa.bind(id=f"k-{fa.keys['cid']}", **SIMPLE_CREATED)])
                answered.add(fa.keys["cid"])
                tally.progressed.set()

            async with business:
                streams = [
                    asyncio.create_task(stream(n, n % count, instances, tally))
                    for n in range(count)
                ]
                agents = [
                    asyncio.create_task(
                        platform(f"p{i}", i % count, instances, tally, stop, rng)
                    )
                    for i in range(PLATFORMS)
                ]
                try:
                    await wait_for(lambda: len(tally.acked) >= 60, tally, 60)
                    instances.kill(0)  # kill -9, under load
                    await instances.procs[0].wait()
                    mark = len(tally.acked)
                    await wait_for(lambda: len(tally.acked) >= mark + 60, tally, 60)
                finally:
                    stop.set()
                    results = await asyncio.gather(*agents, return_exceptions=True)
                for result in results:
                    if isinstance(result, BaseException):
                        raise result
                survivor = instances.urls[instances.live[0]]
                events = await read_log(survivor)
                last = events[-1]["seq"]
                # Every stream catches up to the end of the log; the Business has
                # answered every checkout the platforms created.
                await wait_for(
                    lambda: all(s and s[-1] >= last for s in tally.streams.values()), tally, 30
                )
                await until(lambda: set(tally.acked) <= answered, tally.progressed, seconds=30)
                for task in streams:
                    task.cancel()
                await asyncio.gather(*streams, return_exceptions=True)
        events = await read_log(survivor)

    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1))  # dense, from 1
    by_seq = {e["seq"]: e["instances"] for e in events}
    for cid, (agent, seq, position) in tally.acked.items():
        entry = by_seq[seq][position]
        assert (entry["action"], entry["bindings"]["cid"], entry["performer"]) == (
            "Create", cid, agent
        ), "an acknowledged attempt is not in the log where its answer said"
    # The Business's too (some answered through the front after the kill, as a
    # resend of an attempt the killed instance may have committed): each Created
    # where its answer said, once per checkout.
    assert {cid for _, cid, _, _ in executor.acked} >= set(tally.acked)
    for action, cid, seq, position in executor.acked:
        entry = by_seq[seq][position]
        assert (entry["action"], entry["bindings"]["cid"], entry["performer"]) == (
            action, cid, "business"
        ), f"the Business's {action} for {cid} is not in the log where its answer said"
    assert len({cid for _, cid, _, _ in executor.acked}) == len(executor.acked)
    replay(events)
    for number, received in tally.streams.items():
        assert received[: len(seqs)] == seqs, f"stream {number} has a gap or a repeat"
    assert tally.refused_duplicates > 0
    assert tally.resent > 0, "no agent had to resume on another instance"
