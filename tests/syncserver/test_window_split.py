"""A batched window's accepted attempts are finalized as consecutive batches of
bounded size (syncserver._window), never as one batch however much arrived.

Each window is held open until every attempt of the test has arrived in it
(an event, not a long window), so what is split is known to be one window.
The bound is made small, in numbers of attempts, through the module constant.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from langshaw import ActionInstance
from syncserver import Batch, SyncServer, _window
from syncserver.batch import Entry
from syncserver.errors import ServiceError
from syncserver.sqlite import SQLiteStore
from syncserver.store import MemoryStore
from tests.conftest import SIMPLE_CREATE, load
from tests.harness import Harness

SIMPLE = load("atomic-ucp.lsh")
COUNT = 8  # attempts in the window, one per agent
AGENTS = {f"p{i}": ["SimpleUCP:Platform"] for i in range(COUNT)}
LOG = "/mas/default/protocols/SimpleUCP/log"


class Arrivals(list[Any]):
    """A window's list of attempts that says when ``count`` have arrived."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.wanted = count
        self.full = asyncio.Event()
        self.order: list[str] = []  # the attempters, in the order they arrived

    def append(self, item: Any) -> None:
        super().append(item)
        self.order.append(item[0].performer)
        if len(self.order) >= self.wanted:
            self.full.set()


def gate(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, window: Arrivals) -> None:
    """Hold ``owner``'s window (its method ``name``) open until ``window`` is full."""
    closing: Callable[[], Awaitable[None]] = getattr(owner, name)

    async def gated() -> None:
        await asyncio.wait_for(window.full.wait(), 10)
        await closing()

    monkeypatch.setattr(owner, name, gated)


def attempt_of(agent: str) -> list[ActionInstance]:
    """Two Creates, one attempt: its entries must stay together. Sizes differ
    from agent to agent, so the split is not a fixed count per batch."""
    n = int(agent[1:])
    items = [{"item": {"id": "roses", "title": "R" * (20 * n)}, "quantity": 1}]
    create = SIMPLE.action("Create")
    return [
        ActionInstance(create, {**SIMPLE_CREATE, "cid": f"{agent}-{part}", "line_items": items})
        for part in "ab"
    ]


def size_of(agent: str) -> int:
    """The bytes an attempt counts for (its entries' event frame, as the split
    measures them)."""
    return sum(Entry(i, agent, None).frame_size() for i in attempt_of(agent))


def bound_for(per_batch: float) -> int:
    """A bound that holds about ``per_batch`` attempts (0: less than any one)."""
    if per_batch == math.inf:
        return 1 << 40
    return max(1, int(sum(size_of(a) for a in AGENTS) / COUNT * per_batch))


def check_split(batches: list[Batch], arrived: list[str], bound: int) -> list[list[str]]:
    """The log's batches are the window's attempts, whole, in arrival order (no
    two of them conflict: the checked order is the arrival order), numbered
    1, 2, ...; each within ``bound`` unless a single attempt, and none closed
    before the next attempt would take it past ``bound``. Returns the
    attempters of each batch."""
    assert [b.seq for b in batches] == list(range(1, len(batches) + 1))
    parts: list[list[str]] = []
    for batch in batches:
        performers = [e.performer for e in batch.entries]
        assert performers[::2] == performers[1::2]  # an attempt's two entries, adjacent
        assert [e.instance["cid"] for e in batch.entries] == [
            f"{p}-{part}" for p in performers[::2] for part in "ab"
        ]
        parts.append(performers[::2])
    assert [p for part in parts for p in part] == arrived  # each once, in order
    for part, following in zip(parts, [*parts[1:], None], strict=True):
        size = sum(size_of(p) for p in part)
        assert size <= bound or len(part) == 1, (part, size, bound)
        if following is not None:  # greedy: the next attempt did not fit
            assert size + size_of(following[0]) > bound, (part, following)
    return parts


async def post(h: Harness, agent: str) -> dict[str, Any]:
    body = {
        "instances": [{"action": i.name, "bindings": dict(i.bindings)} for i in attempt_of(agent)],
        "attempt_id": f"id-{agent}",
    }
    async with h.client(agent) as client:
        answer = await client.post("/mas/default/protocols/SimpleUCP/attempts", json=body)
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


@pytest.mark.parametrize(
    ("per_batch", "expected"),
    [(2.5, None), (0, COUNT), (math.inf, 1)],
    ids=["split", "one-attempt-past-the-bound", "under-the-bound"],
)
async def test_a_window_is_split_into_bounded_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_batch: float, expected: int | None
) -> None:
    bound = bound_for(per_batch)
    monkeypatch.setattr(_window, "WINDOW_BATCH_BYTES", bound)
    store = str(tmp_path / "log.db")
    options = {"policy": "batched", "batch_window_ms": 1, "store": store}
    async with Harness("http", [SIMPLE], AGENTS, **options) as h:
        ledger = h.server.ledgers[("default", "SimpleUCP")]
        window = Arrivals(COUNT)
        monkeypatch.setattr(ledger, "_window", window)
        gate(monkeypatch, ledger, "_close_window", window)
        adapters = [h.adapter(agent, "Platform") for agent in AGENTS]
        for adapter in adapters:
            await adapter.start()
        # Half attempt through their PeachAdapter (SyncExecutor), half by POST.
        posting = [a for a in AGENTS if int(a[1:]) % 2]
        answers = await asyncio.gather(
            *(post(h, a) for a in posting),
            *(adapters[int(a[1:])].attempt(attempt_of(a)) for a in AGENTS if a not in posting),
        )
        arrived = window.order
        p0 = h.server.agent("default", "p0")
        batches = await h.server.read("default", "SimpleUCP", p0, 0, 99)
        parts = check_split(batches, arrived, bound)
        if expected is not None:
            assert len(parts) == expected
        else:
            assert 3 <= len(parts) < COUNT  # several batches, several attempts in some
        seq_of = {p: n for n, part in enumerate(parts, 1) for p in part}
        # Each POST's receipt names its own batch and its own positions in it.
        for agent, answer in zip(posting, answers, strict=False):
            batch = batches[answer["seq"] - 1]
            assert answer["seq"] == seq_of[agent]
            assert answer["size"] == len(batch.entries)
            assert [batch.entries[i].instance["cid"] for i in answer["attempt"]] == [
                f"{agent}-a",
                f"{agent}-b",
            ]
        # The log over HTTP says the same.
        async with h.client("p0") as client:
            events = (await client.get(LOG)).json()["events"]
        assert [[i["performer"] for i in e["instances"][::2]] for e in events] == parts
        # Every agent's view holds every instance once, in the batch that holds it.
        for adapter in adapters:
            await adapter.sync()
            assert sorted(adapter.state.roots()) == sorted(
                (f"{a}-{part}",) for a in AGENTS for part in "ab"
            )
            for agent in AGENTS:
                for part in "ab":
                    [(seq, instance, performer)] = adapter.history((f"{agent}-{part}",))
                    assert (seq, performer, instance.name) == (seq_of[agent], agent, "Create")


class FailingSecond:
    """A store whose write holding batch 2 fails once (the disk is full)."""

    failed = False

    def append_now(self, mas: str, protocol: Any, batches: Any) -> None:
        if not self.failed and any(b.seq == 2 for b in batches):
            self.failed = True
            raise OSError("disk full (simulated)")
        super().append_now(mas, protocol, batches)  # type: ignore[misc]


class FailingMemory(FailingSecond, MemoryStore):
    """Writes each batch at once, as it is queued: the parts after batch 2 are
    never queued."""


class FailingSQLite(FailingSecond, SQLiteStore):
    """Writes the first batch at once and the others in the loop's next turn,
    in one transaction."""


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_part_whose_write_fails_is_answered_and_the_rest_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The batches before the failed write stand, with their receipts; every
    later attempt of the window is answered 503 (never left waiting), the log
    holds no hole, and a resend of a failed attempt is finalized afterwards."""
    monkeypatch.setattr(_window, "WINDOW_BATCH_BYTES", bound_for(2.5))
    store = FailingMemory() if kind == "memory" else FailingSQLite(tmp_path / "log.db")
    options: dict[str, Any] = {"store": store, "policy": "batched", "batch_window_ms": 1}
    async with SyncServer.embedded([SIMPLE], AGENTS, **options) as server:
        ledger = server.ledgers[("default", "SimpleUCP")]
        window = Arrivals(COUNT)
        monkeypatch.setattr(ledger, "_window", window)
        gate(monkeypatch, ledger, "_close_window", window)

        async def attempt(agent: str) -> Any:
            try:
                return await server.attempt(
                    "default", "SimpleUCP", server.agent("default", agent), attempt_of(agent),
                    f"id-{agent}",
                )
            except ServiceError as exc:
                return exc

        async with asyncio.timeout(10):  # every attempt is answered, none left waiting
            done = await asyncio.gather(*map(attempt, AGENTS))
        answers = dict(zip(AGENTS, done, strict=True))
        finalized = [a for a, answer in answers.items() if not isinstance(answer, Exception)]
        assert finalized and all(answers[a].seq == 1 for a in finalized)
        assert finalized == window.order[: len(finalized)]  # the first part, whole
        failed = [a for a in window.order if a not in finalized]
        assert failed and all(answers[a].code == "store-failed" for a in failed)
        p0 = server.agent("default", "p0")
        log = await server.read("default", "SimpleUCP", p0, 0, 99)
        assert [[e.performer for e in b.entries][::2] for b in log] == [finalized]
        # Rebuilt from the log: a failed attempt, resent, is finalized now.
        again = await attempt(failed[0])
        assert not isinstance(again, Exception) and again.seq == 2
