"""A hostile review of the channel's sink and of the batch an answer carries.

A caught-up channel writes a committed batch during the commit itself
(``Subscriber.sink``), and gives the batch of an attempt of its own inside
that attempt's answer. The contract the agent relies on (docs/syncserver.md,
the channel; peach/_channel.py): every batch once, in order, the answer "in
its place, before any later batch of the stream". These tests read the wire of
real channels (uvicorn on loopback) while commits are held back by a store
whose writes (and reads) wait on a gate the test opens, so that the races are
deterministic instead of left to the scheduler.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from langshaw import LangshawProtocol
from syncserver import Limits
from syncserver._channel import Channel
from syncserver.batch import Batch
from syncserver.store import MemoryStore
from tests.conftest import SIMPLE_CREATE
from tests.hostile._support import SIMPLE, create, guarded, raw
from tests.syncserver.test_channel import line

AGENTS = {"p1": ["Platform"], "p2": ["Platform"], "b1": ["Business"]}
KEY = ("default", "SimpleUCP")


class GatedStore(MemoryStore):
    """A memory store whose writes (and, if asked, reads) wait until the test
    opens their gate: batches numbered meanwhile wait for their transaction
    (the ledger's ordinary path for a store that must wait, like fsync)."""

    inline = False
    synchronous_append = False

    def __init__(self) -> None:
        super().__init__()
        self.writes = asyncio.Event()
        self.writes.set()
        self.reads = asyncio.Event()
        self.reads.set()

    async def append(self, mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]) -> None:
        await self.writes.wait()
        self.append_now(mas, protocol, batches)

    async def read(
        self, mas: str, protocol: LangshawProtocol, after: int, until: int
    ) -> list[Batch]:
        await self.reads.wait()
        return await super().read(mas, protocol, after, until)


class Made(list[Channel]):
    changed: asyncio.Event


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    """The channels the server makes (observation only)."""
    channels = Made()
    channels.changed = asyncio.Event()
    original = Channel.connection_made

    def connection_made(self: Channel, transport: Any) -> None:
        original(self, transport)
        channels.append(self)
        channels.changed.set()

    monkeypatch.setattr(Channel, "connection_made", connection_made)
    yield channels


async def until(condition: Callable[[], bool], seconds: float = 30) -> None:
    """Bounded wait for server state no event announces (a batch numbered but
    held at the store's gate), checked every 2 ms. The bound only ends a wait
    that would never end: it is generous, for a machine busy with other tests
    (numbering a 6 MB attempt took more than 5 s there)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        assert loop.time() < deadline, "timed out waiting for the server"
        await asyncio.sleep(0.002)


class Wire:
    """One raw channel's events, however large (a StreamReader's readuntil
    stops at 64 KiB)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buffer = b""

    async def event(self, seconds: float = 5) -> tuple[str, dict[str, Any]]:
        while True:
            end = self.buffer.find(b"\n\n")
            if end < 0:
                chunk = await asyncio.wait_for(self.reader.read(1 << 20), seconds)
                assert chunk, "the server closed the channel"
                self.buffer += chunk
                continue
            block, self.buffer = self.buffer[:end].decode(), self.buffer[end + 2 :]
            kind, data = "message", None
            for text in block.splitlines():
                if text.startswith("event: "):
                    kind = text[7:]
                elif text.startswith("data: "):
                    data = json.loads(text[6:])
            if data is not None:
                return kind, data

    async def until_seq(self, seq: int, seconds: float = 5) -> list[tuple[str, int]]:
        """What the channel gives, as (kind, seq), until a batch or a 200 answer
        of ``seq``."""
        seen: list[tuple[str, int]] = []
        while True:
            kind, data = await self.event(seconds)
            if kind == "batch" or (kind == "answer" and data.get("status") == 200):
                seen.append((kind, data["seq"]))
                if data["seq"] == seq:
                    return seen
            elif kind == "answer":
                seen.append((f"answer {data['status']}", -1))

    def close(self) -> None:
        self.writer.transport.abort()


async def channel(url: str, token: str, after: int = 0, rcvbuf: int | None = None) -> Wire:
    reader, writer = await raw(url, rcvbuf=rcvbuf)
    writer.write(
        f"GET /mas/default/protocols/SimpleUCP/channel?after={after} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nConnection: Upgrade\r\n"
        "Upgrade: strabo-channel\r\n\r\n".encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 101 "), head
    assert await asyncio.wait_for(reader.readuntil(b"\n\n"), 5) == b": connected\n\n"
    return Wire(reader, writer)


def big_create(cid: str, size: int) -> dict[str, Any]:
    items = [{"item": {"id": "roses", "title": "R" * size}, "quantity": 1}]
    return {"action": "Create", "bindings": {"cid": cid, **SIMPLE_CREATE, "line_items": items}}


def attempt(cid: str, ident: str | None = None, instance: Any = None) -> bytes:
    return line({"instances": [instance or create(cid)], "attempt_id": ident or cid})


def seqs(seen: list[tuple[str, int]]) -> list[int]:
    return [seq for _, seq in seen if seq >= 0]


# The sink and the answer ---------------------------------------------------------------


async def test_an_answer_comes_before_a_later_batch_committed_in_the_same_transaction() -> None:
    """The attempter's channel gives its answer (carrying batch 1) before
    another agent's LATER batch 2, committed in the same transaction.

    p1's attempt is batch 1, p2's batch 2, committed in one transaction (group
    commit: any store that is not written inline, e.g. SQLite with fsync).
    ``Ledger._settle`` publishes 1, then 2, during the commit; p1's answer is
    decided a loop step later, when its attempt task resumes. Regression: the
    channel left batch 1 out (the answer carries it) but its sink wrote batch
    2 at once, so the wire was [batch 2, answer 1], and peach's feed saw a gap
    it filled from the log over HTTP (measured on SQLite, instant policy: 389
    of 1,555 answers came after a later batch). Now a batch that holds an
    attempt of the channel still waiting for its outcome stops the stream
    there until the answer is written in its place."""
    store = GatedStore()
    async with guarded([SIMPLE], AGENTS, store=store) as (server, url):
        ledger = server.ledgers[KEY]
        p1 = await channel(url, "p1-token")
        p2 = await channel(url, "p2-token")
        store.writes.clear()
        p1.writer.write(attempt("c1"))
        await until(lambda: ledger.next_seq == 2)
        p2.writer.write(attempt("c2"))
        await until(lambda: ledger.next_seq == 3)
        store.writes.set()
        # p2's wire is right: p1's batch, then its own answer.
        assert await p2.until_seq(2) == [("batch", 1), ("answer", 2)]
        seen = await p1.until_seq(1)
        if ("batch", 2) not in seen:
            seen += await p1.until_seq(2)
        p1.close()
        p2.close()
        assert seen == [("answer", 1), ("batch", 2)], (
            f"p1's channel gave {seen}: batch 2 before the answer carrying batch 1"
        )


async def test_a_paused_channel_gives_its_in_flight_batch_once_and_in_order(made: Made) -> None:
    """A channel whose client reads slowly (writing paused) gives the batch of
    its own attempt once, inside the answer, in its place: [batch 1, batch 2,
    answer 3, batch 4].

    Batch 1 is large: the sink writes it and the transport pauses the channel.
    Batches 2 (p2's) and 3 (p1's attempt) are then refused by the sink and
    queued in the Subscriber (syncserver/feed.py). Regression: the attempt's
    answer was written straight to the transport, past the queue, and batch 3
    went out again from the backlog: [batch 1, batch 2, answer 3, batch 3,
    batch 4] (and with more batches queued ahead, the answer overtook them).
    Now an answer whose batch the stream has not given yet waits for it."""
    store = GatedStore()
    # Batch 1 must be larger than what loopback's kernel buffers take (tcp_wmem
    # lets the server's socket hold 4 MiB) for the transport to pause the channel.
    limits = Limits(max_body=16 * 1024 * 1024)
    async with guarded([SIMPLE], AGENTS, limits, store=store) as (server, url):
        ledger = server.ledgers[KEY]
        p1 = await channel(url, "p1-token", rcvbuf=4096)
        p2 = await channel(url, "p2-token")
        assert len(made) == 2
        slow = made[0]
        store.writes.clear()
        p2.writer.write(attempt("big", instance=big_create("big", 6_000_000)))
        await until(lambda: ledger.next_seq == 2)
        p2.writer.write(attempt("c2"))
        await until(lambda: ledger.next_seq == 3)
        p1.writer.write(attempt("c1"))
        await until(lambda: ledger.next_seq == 4)
        store.writes.set()
        await until(lambda: ledger.committed_seq == 3)
        # The precondition: p1's channel is paused, its client not reading yet.
        assert slow._paused, "batch 1 did not fill p1's channel"
        await until(lambda: not slow._in_flight)  # the outcome is known: the answer waits
        seen = await p1.until_seq(3, seconds=10)
        # One more batch, so that anything still queued comes out before it.
        p2.writer.write(attempt("c3"))
        seen += await p1.until_seq(4)
        p1.close()
        p2.close()
        assert seen == [("batch", 1), ("batch", 2), ("answer", 3), ("batch", 4)], (
            f"p1's slow channel gave {seen}"
        )


async def test_pipelined_attempts_racing_another_agent_miss_nothing_and_repeat_nothing() -> None:
    """40 attempts pipelined on one channel (one write) while another agent
    attempts as many: the attempter's wire holds every batch exactly once,
    by the stream or by an answer (order is the first test's concern)."""
    async with guarded([SIMPLE], AGENTS) as (server, url):
        p1 = await channel(url, "p1-token")
        p2 = await channel(url, "p2-token")
        n = 40
        p1.writer.write(b"".join(attempt(f"a{i}") for i in range(n)))
        p2.writer.write(b"".join(attempt(f"b{i}") for i in range(n)))
        await until(lambda: server.ledgers[KEY].committed_seq == 2 * n)
        seen = await p1.until_seq(2 * n)
        while sum(1 for kind, _ in seen if kind == "answer") < n:
            seen += [(kind, data.get("seq", -1)) for kind, data in [await p1.event()]]
        p1.close()
        p2.close()
        got = seqs(seen)
        assert sorted(got) == list(range(1, 2 * n + 1)), f"missing or repeated: {got}"


async def test_an_answer_waiting_for_its_batch_is_written_when_the_stream_ends(
    made: Made,
) -> None:
    """A paused channel holds its attempt's answer until the stream reaches the
    batch; if the stream ends first (here the server ends every stream, as on
    a restart), the answer still goes out before the channel closes."""
    store = GatedStore()
    limits = Limits(max_body=16 * 1024 * 1024)  # batch 1 must fill loopback's buffers
    async with guarded([SIMPLE], AGENTS, limits, store=store) as (server, url):
        ledger = server.ledgers[KEY]
        p1 = await channel(url, "p1-token", rcvbuf=4096)
        p2 = await channel(url, "p2-token")
        slow = made[0]
        store.writes.clear()  # both numbered first: a paused channel reads no lines
        p2.writer.write(attempt("big", instance=big_create("big", 6_000_000)))
        await until(lambda: ledger.next_seq == 2)
        p1.writer.write(attempt("c1"))
        await until(lambda: ledger.next_seq == 3)
        store.writes.set()
        await until(lambda: ledger.committed_seq == 2 and not slow._in_flight)
        assert slow._paused, "batch 1 did not fill p1's channel"
        assert list(slow._deferred) == [2]  # the answer waits for batch 2
        server.close_streams()
        answers = []
        while True:
            try:
                kind, data = await p1.event(seconds=10)
            except AssertionError:  # the server closed the channel
                break
            if kind == "answer":
                answers.append(data)
        p1.close()
        p2.close()
        assert [(a["id"], a["status"], a["seq"]) for a in answers] == [("c1", 200, 2)]


async def test_pipelined_attempts_on_sqlite_reach_each_wire_in_order(tmp_path: Any) -> None:
    """The routine case of the first test, without a gate: two agents
    pipelining attempts on real SQLite (instant policy, a commit per batch),
    so that another agent's commit often lands between an attempt's commit
    and its answer. Each wire gives every batch once, in order, its own in
    their answers. (Measured before the fix: 389 of 1,555 answers came after a
    later batch.)"""
    async with guarded([SIMPLE], AGENTS, store=str(tmp_path / "log.db")) as (server, url):
        p1 = await channel(url, "p1-token")
        p2 = await channel(url, "p2-token")
        n = 60
        p1.writer.write(b"".join(attempt(f"a{i}") for i in range(n)))
        p2.writer.write(b"".join(attempt(f"b{i}") for i in range(n)))
        for wire in (p1, p2):
            seen = await wire.until_seq(2 * n)
            assert seqs(seen) == list(range(1, 2 * n + 1)), seen
            assert sum(1 for kind, _ in seen if kind == "answer") == n, seen
        assert server.ledgers[KEY].committed_seq == 2 * n
        p1.close()
        p2.close()


async def test_a_rejected_attempt_in_flight_hides_no_batch() -> None:
    """An attempt rejected (422) while other agents' batches commit: the
    rejected agent's stream still gives every batch (nothing of its own to
    leave out)."""
    store = GatedStore()
    async with guarded([SIMPLE], AGENTS, store=store) as (server, url):
        ledger = server.ledgers[KEY]
        b1 = await channel(url, "b1-token")
        p2 = await channel(url, "p2-token")
        store.writes.clear()
        p2.writer.write(attempt("c1"))
        await until(lambda: ledger.next_seq == 2)
        # A Created missing its attributes: rejected while batch 1 waits.
        created = {"action": "Created", "bindings": {"cid": "nope", "Create": True}}
        b1.writer.write(line({"instances": [created], "attempt_id": "bad"}))
        store.writes.set()
        seen = await b1.until_seq(1)
        p2.writer.write(attempt("c2"))
        seen += await b1.until_seq(2)
        b1.close()
        p2.close()
        assert seqs(seen) == [1, 2], seen
        assert ("answer 422", -1) in seen or ("answer 400", -1) in seen, seen


@pytest.mark.parametrize("same", [True, False], ids=["resent", "reused"])
async def test_an_old_attempt_id_hides_no_batch_from_a_catching_up_channel(
    made: Made, same: bool
) -> None:
    """An attempt id finalized in batch 1, sent again while a new channel of
    the same agent still catches up from the log (its read held at the gate):
    resent with the same instances, its answer carries batch 1 and comes in
    batch 1's place, once; reused for OTHER instances, it is refused (409
    id-reused) and batch 1 comes as a batch. Either way every batch once, in
    order.

    Regression: the ledger checked a reused id only when the attempt was
    rejected, so the new instances were finalized as batch 2 under the old id,
    and the channel, which left out any batch holding an id in flight, skipped
    batch 1 for good (and gave batch 2 twice): [answer 2, batch 2, batch 3]."""
    store = GatedStore()
    limits = Limits(log_cache_bytes=0)  # catch-up reads go to the store
    async with guarded([SIMPLE], AGENTS, limits, store=store) as (server, url):
        ledger = server.ledgers[KEY]
        first = await channel(url, "p1-token")
        first.writer.write(attempt("c1", "reused"))
        assert await first.until_seq(1) == [("answer", 1)]
        first.close()
        p2 = await channel(url, "p2-token")
        store.reads.clear()
        try:
            again = await channel(url, "p1-token", after=0)  # its catch-up waits on the read
            catching_up = made[-1]
            again.writer.write(attempt("c1" if same else "c9", "reused"))
            await until(lambda: "reused" in catching_up._in_flight)
        finally:
            store.reads.set()  # a failure must not leave the server waiting to stop
        if not same:  # refused before the stream goes past batch 1, which it holds
            kind, data = await again.event()
            assert (kind, data["id"], data["status"], data["error"]["code"]) == (
                "answer",
                "reused",
                409,
                "id-reused",
            ), data
        seen = await again.until_seq(1)
        p2.writer.write(attempt("c3"))
        seen += await again.until_seq(2)
        again.close()
        p2.close()
        assert seen == [("answer" if same else "batch", 1), ("batch", 2)], seen
        assert ledger.committed_seq == 2


async def test_a_slow_reader_neither_stalls_other_commits_nor_grows_without_bound(
    made: Made,
) -> None:
    """A channel whose client never reads: other agents' attempts are answered
    as before (the sink refuses, it does not block the commit), its backlog
    stays within the stream's byte bound (then it is dropped as lagging), and
    it is closed by write_timeout at the latest."""
    # The kernel takes up to 4 MiB (tcp_wmem) before the transport pauses: send more.
    limits = Limits(write_timeout=3, stream_backlog_bytes=256 * 1024)
    async with guarded([SIMPLE], AGENTS, limits) as (server, url):
        dead = await channel(url, "p1-token", rcvbuf=4096)
        p2 = await channel(url, "p2-token")
        slow = made[0]
        [subscriber] = [s for s in server.ledgers[KEY].subscribers if s.sink == slow._sink]
        peak = 0
        size = 80_000
        for i in range(100):
            p2.writer.write(attempt(f"x{i}", instance=big_create(f"x{i}", size)))
            kind, data = await p2.event()
            while kind != "answer":
                kind, data = await p2.event()
            assert data["status"] == 200, data
            peak = max(peak, subscriber._bytes)
            assert slow.transport is not None
            # At most one frame past the high-water mark: then the sink refuses.
            assert slow.transport.get_write_buffer_size() <= limits.write_buffer + 2 * size
        assert peak <= limits.stream_backlog_bytes
        assert subscriber.lagging or slow._closed, "the dead reader is still queued"
        # It is dropped: the server closes it (lagging, or the write timeout).
        await until(lambda: slow._closed, seconds=limits.write_timeout + 3)
        dead.close()
        p2.close()


async def test_the_same_attempt_id_twice_in_flight_with_other_instances() -> None:
    """A second line reusing the id of an attempt still in flight, for other
    instances, is refused at once (409 id-reused); the first attempt still
    gets its batch once, inside its answer: [answer 409, answer 1, batch 2].

    Regression: the channel kept the ids in flight in a set, not per line, so
    the refusal took the first attempt's id out of it and its batch went out
    on the stream AND in its answer: [answer 422, batch 1, answer 1, batch 2]."""
    store = GatedStore()
    async with guarded([SIMPLE], AGENTS, store=store) as (server, url):
        ledger = server.ledgers[KEY]
        p1 = await channel(url, "p1-token")
        store.writes.clear()
        p1.writer.write(attempt("c1", "same"))
        await until(lambda: ledger.next_seq == 2)
        p1.writer.write(attempt("c2", "same"))
        try:
            kind, data = await p1.event()
        finally:
            store.writes.set()  # a failure must not leave the server waiting to stop
        assert (kind, data["status"], data["error"]["code"]) == ("answer", 409, "id-reused"), data
        seen = await p1.until_seq(1)
        if seen == [("batch", 1)]:
            seen += await p1.until_seq(1)  # and its answer
        p2 = await channel(url, "p2-token")
        p2.writer.write(attempt("c3"))
        seen += await p1.until_seq(2)
        p2.close()
        p1.close()
        assert seqs(seen) == [1, 2], f"p1's channel gave {seen}"


async def test_a_channel_reopened_mid_stream_gives_each_later_batch_once_in_order() -> None:
    """Reconnecting with a last-seen position while another agent keeps
    committing (pipelined): every batch after it exactly once, in order, from
    the log, then the backlog, then the sink."""
    async with guarded([SIMPLE], AGENTS) as (server, url):
        ledger = server.ledgers[KEY]
        p2 = await channel(url, "p2-token")
        p2.writer.write(b"".join(attempt(f"a{i}") for i in range(20)))
        await until(lambda: ledger.committed_seq == 20)
        p2.writer.write(b"".join(attempt(f"b{i}") for i in range(40)))
        p1 = await channel(url, "p1-token", after=7)
        seen = await p1.until_seq(60)
        assert seqs(seen) == list(range(8, 61)), seen
        # Then it lags: reopened from its last, it goes on without a hole.
        p1.close()
        p2.writer.write(attempt("c"))
        await until(lambda: ledger.committed_seq == 61)
        again = await channel(url, "p1-token", after=60)
        p2.writer.write(attempt("d"))
        assert seqs(await again.until_seq(62)) == [61, 62]
        again.close()
        p2.close()


async def test_vanished_clients_do_not_break_a_commit_that_reaches_them(made: Made) -> None:
    """Channels whose clients reset the connection just before a transaction
    commits: the sinks that write to them during the commit raise nothing, and
    the attempts in that transaction, and the next ones, are answered."""
    store = GatedStore()
    async with guarded([SIMPLE], AGENTS, store=store) as (server, url):
        ledger = server.ledgers[KEY]
        gone = [await channel(url, "p1-token") for _ in range(5)]
        p2 = await channel(url, "p2-token")
        b1 = await channel(url, "b1-token")
        store.writes.clear()
        p2.writer.write(b"".join(attempt(f"c{i}") for i in range(5)))
        await until(lambda: ledger.next_seq == 6)
        for wire in gone:
            wire.close()  # abort: a reset, not a clean end of input
        store.writes.set()
        assert seqs(await b1.until_seq(5)) == [1, 2, 3, 4, 5]
        p2.writer.write(attempt("c9"))
        assert seqs(await b1.until_seq(6)) == [6]
        answers = []
        while len(answers) < 6:
            kind, data = await p2.event()
            if kind == "answer":
                answers.append(data["status"])
        assert answers == [200] * 6
        p2.close()
        b1.close()
