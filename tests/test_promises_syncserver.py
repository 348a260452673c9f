"""Promises of docs/syncserver.md that no other test held: each test here
quotes the sentence it keeps true, and fails if the promise breaks.

Real parts: SQLite files in a temporary directory, the server over HTTP on a
loopback port where the promise is about the wire."""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from langshaw import ActionInstance, LangshawProtocol
from syncserver import SQLiteStore, SyncServer
from syncserver.batch import Batch, Entry
from syncserver.errors import Rejected
from syncserver.store import StoreError
from tests.conftest import SIMPLE_COMPLETE, SIMPLE_CREATE, load
from tests.harness import Harness
from tests.hostile._support import closed_by_server, raw
from tests.processes import LISTENING, spawn

SIMPLE = load("atomic-ucp.lsh")
AGENTS = {"platform": ["Platform"], "business": ["Business"]}
BASE = "/mas/default/protocols/SimpleUCP"


def create(seq: int) -> Batch:
    """Batch ``seq``: one Create, of checkout ``c<seq>`` (a new enactment each)."""
    instance = ActionInstance(SIMPLE.actions["Create"], {"cid": f"c{seq}", **SIMPLE_CREATE})
    return Batch(SIMPLE.name, seq, (Entry(instance, "platform", f"a{seq}"),))


async def written(path: Path, seqs: list[int]) -> None:
    """A SQLite log holding the batches numbered ``seqs`` (dense or not)."""
    store = SQLiteStore(path)
    await store.open()
    try:
        store.append_now("default", SIMPLE, [create(seq) for seq in seqs])
    finally:
        await store.close()


# "The log is dense (1, 2, 3, ... with no hole, also after kill -9), and a log
# with a hole, which strabo 0.1 could write under the batched policy, is
# refused at start with a message naming the missing batch."


async def test_a_log_with_a_hole_is_refused_at_start_naming_the_missing_batch(
    tmp_path: Path,
) -> None:
    path = tmp_path / "holed.db"
    await written(path, [1, 3])
    server = SyncServer.embedded([SIMPLE], AGENTS, store=str(path))
    with pytest.raises(StoreError, match="has no batch 2 but has batch 3"):
        await server.start()
    # The same log without the hole starts: the refusal is the hole's, not the file's.
    dense = tmp_path / "dense.db"
    await written(dense, [1, 2, 3])
    async with SyncServer.embedded([SIMPLE], AGENTS, store=str(dense)) as server:
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == 3


# "The same batches as JSON pages (`limit` at most 5000, default 500)" and
# "`.../enactments` pages with `offset` and `limit` (default 100, at most 1000)".


async def test_log_and_enactment_pages_are_capped_whatever_limit_is_asked(
    tmp_path: Path,
) -> None:
    path = tmp_path / "long.db"
    await written(path, list(range(1, 5002)))  # 5001 batches, 5001 enactments
    async with Harness("http", [SIMPLE], AGENTS, store=str(path)) as h, h.client(
        "business"
    ) as business:
        default = (await business.get(f"{BASE}/log")).json()
        asked = (await business.get(f"{BASE}/log", params={"limit": 10**6})).json()
        assert len(default["events"]) == 500 and default["last_seq"] == 5001
        assert len(asked["events"]) == 5000
        assert [e["seq"] for e in asked["events"]] == list(range(1, 5001))
        default = (await business.get(f"{BASE}/enactments")).json()
        asked = (await business.get(f"{BASE}/enactments", params={"limit": 10**6})).json()
        assert len(default["enactments"]) == 100 and default["total"] == 5001
        assert len(asked["enactments"]) == 1000 and asked["total"] == 5001


# "`--sync full`: every commit is fsynced (on a worker thread), so it also
# survives power loss; concurrent attempts still share each fsync."


class CountingFull(SQLiteStore):
    """Counts the transactions the writer commits."""

    commits = 0

    def _append(self, rows: Any) -> None:
        type(self).commits += 1
        super()._append(rows)


async def test_sync_full_fsyncs_each_commit_and_concurrent_attempts_share_one(
    tmp_path: Path,
) -> None:
    store = CountingFull(tmp_path / "full.db", "full")
    server = SyncServer.embedded([SIMPLE], AGENTS, store=store)
    async with server:
        assert store._db is not None and store._reader is not None
        # SQLite's FULL (2) syncs the WAL at every commit; NORMAL (1) does not.
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2
        agent = server.agent("default", "platform")
        creates = [
            ActionInstance(SIMPLE.action("Create"), {"cid": f"c{i}", **SIMPLE_CREATE})
            for i in range(32)
        ]
        batches = await asyncio.gather(
            *(server.attempt("default", "SimpleUCP", agent, [c]) for c in creates)
        )
    assert sorted(b.seq for b in batches) == list(range(1, 33))
    assert 1 <= CountingFull.commits < 32  # far fewer commits (each an fsync) than attempts
    with sqlite3.connect(tmp_path / "full.db") as db:  # and every acknowledged one is there
        assert db.execute("SELECT count(*) FROM instances").fetchone()[0] == 32
    normal = SQLiteStore(tmp_path / "normal.db")
    await normal.open()
    try:
        assert normal._db is not None
        assert normal._db.execute("PRAGMA synchronous").fetchone()[0] == 1
    finally:
        await normal.close()


# "The in-memory state keeps, for each bound value that some later check could
# compare, a 64-bit digest (SipHash) rather than the value, so its size does not
# grow with the size of the values; the log keeps the values."


def longest_text(root: object) -> int:
    """The longest str or bytes reachable from ``root``, the protocol aside (its
    texts are not values)."""
    seen: set[int] = set()
    stack: list[object] = [root]
    longest = 0
    while stack:
        thing = stack.pop()
        if id(thing) in seen or isinstance(thing, (LangshawProtocol, type)):
            continue
        seen.add(id(thing))
        if isinstance(thing, (str, bytes)):
            longest = max(longest, len(thing))
        else:
            stack.extend(gc.get_referents(thing))
    return longest


async def test_the_state_keeps_digests_not_values_and_the_log_keeps_the_values(
    tmp_path: Path,
) -> None:
    title = "R" * 1_000_000
    line_items = [{"item": {"id": "roses", "title": title}, "quantity": 1}]
    path = tmp_path / "log.db"
    server = SyncServer.embedded([SIMPLE], AGENTS, store=str(path))
    async with server:
        agent = server.agent("default", "platform")
        bindings = {**SIMPLE_CREATE, "cid": "c1", "line_items": line_items}
        create = ActionInstance(SIMPLE.action("Create"), bindings)
        await server.attempt("default", "SimpleUCP", agent, [create])
        state = server.ledgers[("default", "SimpleUCP")].state
        assert longest_text(state) < 10_000  # a 1 MB value is not in the state
    with sqlite3.connect(path) as db:
        [(stored,)] = db.execute("SELECT bindings FROM instances").fetchall()
    assert title in stored
    # Restarted, the state is rebuilt from the log as digests again.
    async with SyncServer.embedded([SIMPLE], AGENTS, store=str(path)) as again:
        assert longest_text(again.ledgers[("default", "SimpleUCP")].state) < 10_000


# "An id is bound by what was finalized under it: an attempt that was refused
# (a protocol rule, a `503`) recorded nothing, and leaves its id free." (The
# 503 half is tests/syncserver/test_finalization.py's: a resend after one.)

COMPLETE = {"cid": "c1", "Created": True, "id": "s1", **SIMPLE_COMPLETE}


def attempt(action: str, bindings: dict[str, Any], attempt_id: str) -> dict[str, Any]:
    return {"instances": [{"action": action, "bindings": bindings}], "attempt_id": attempt_id}


async def test_an_attempt_refused_by_a_rule_leaves_its_id_free() -> None:
    async with Harness("http", [SIMPLE], AGENTS) as h, h.client("platform") as platform:
        early = await platform.post(f"{BASE}/attempts", json=attempt("Complete", COMPLETE, "z"))
        assert early.status_code == 409 and early.json()["error"]["rule"] == "dependency"
        create = attempt("Create", {"cid": "c1", **SIMPLE_CREATE}, "z")
        later = await platform.post(f"{BASE}/attempts", json=create)
        assert later.status_code == 200, later.text  # not 409 id-reused
        again = await platform.post(f"{BASE}/attempts", json=create)
        assert again.json() == later.json()  # and now the id is bound to it


# "The last refused attempts, newest first: the server keeps the last 100 per MAS
# in memory."


async def test_the_server_keeps_the_last_100_refusals_newest_first() -> None:
    async with Harness("http", [SIMPLE], AGENTS) as h, h.client("platform") as platform:
        for n in range(100):
            bindings = {**COMPLETE, "cid": f"c{n}"}
            complete = attempt("Complete", bindings, f"{n}")
            early = await platform.post(f"{BASE}/attempts", json=complete)
            assert early.status_code == 409
        newest = {"instances": [{"action": "Nothing", "bindings": {}}]}
        assert (await platform.post(f"{BASE}/attempts", json=newest)).status_code == 422
        kept = (await platform.get("/mas/default/refusals")).json()["refusals"]
    assert len(kept) == 100
    assert kept[0]["rule"] == "unknown-action"
    assert [r["rule"] for r in kept[1:]] == ["dependency"] * 99


# "At most 64 attempts of a channel are checked at once; more are answered
# `429 too-many-in-flight` (the `SyncExecutor` sends no more than that at once)."
# The server's half is tests/hostile/test_channel_hostile.py's; this is the
# executor's: its channel line holds back the 65th attempt until an answer comes.


class Wire:
    """The connection under a channel line: records each attempt written and how
    many were unanswered when it was (the line's answers are given by the test)."""

    def __init__(self) -> None:
        self.sent: asyncio.Queue[str] = asyncio.Queue()
        self.unanswered = 0
        self.most = 0

    def usable(self) -> bool:
        return True

    async def send(self, data: bytes) -> None:
        self.unanswered += 1
        self.most = max(self.most, self.unanswered)
        self.sent.put_nowait(json.loads(data)["attempt_id"])


async def test_the_executors_channel_sends_at_most_64_attempts_at_once() -> None:
    from peach._channel import Line

    wire = Wire()
    line = Line(wire)  # type: ignore[arg-type]  # the wire is all a line uses
    attempts = [
        asyncio.create_task(line.attempt({"attempt_id": f"a{n}", "instances": []}, dict))
        for n in range(100)
    ]
    # The tasks run until they wait before this test is woken by the first send:
    # as behind a held commit, nothing is answered while the line fills.
    for _ in range(100):  # then each answer, in the order sent, frees a place
        ident = await wire.sent.get()
        wire.unanswered -= 1
        line.answered({"id": ident, "status": 409, "error": {"code": "nono"}})
    answers = await asyncio.gather(*attempts)
    assert [data["status"] for data, _ in answers] == [409] * 100
    assert wire.most == 64  # the line filled up to the server's bound, and no further


# "`log_cache_bytes` | 16 MiB | none: the newest batches (at most 256, and at
# most this many bytes of their events), kept once in memory for every agent
# catching up from the log". (The byte bound is tests/syncserver/test_feed.py's.)


def test_the_log_cache_holds_at_most_256_batches_whatever_its_bytes() -> None:
    from syncserver.feed import Tail
    from syncserver.limits import Limits

    tail = Tail(limit=Limits().log_cache_bytes)  # as the server makes it: bytes to spare
    for seq in range(1, 301):
        tail.add(create(seq))
    held = tail.read(300 - 256, 300)
    assert held is not None and [b.seq for b in held] == list(range(45, 301))
    assert tail.read(300 - 257, 300) is None  # batch 44 was let go


# "A ceiling is read from the enactment's values (bound earlier, by another
# role); when the attribute is not bound where the action is attempted, the
# attempt is refused."


async def test_a_ceiling_whose_attribute_is_not_bound_where_the_action_is_refuses_it() -> None:
    purchase = load("purchase.lsh")
    ceiling = {"ceiling": {"attribute": "price", "max": 10, "on": ["Reject"]}}
    server = SyncServer.embedded(
        [purchase], {"b": ["Buyer"], "free": ["Buyer"], "s": ["Seller"]}, mandates={"b": ceiling}
    )

    def instance(action: str, **bindings: Any) -> ActionInstance:
        return ActionInstance(purchase.action(action), bindings)

    async with server:
        for buyer, enactment in (("b", "r1"), ("free", "r2")):
            rfq = instance("RFQ", ID=enactment, item="pen", budget=5)
            quote = instance("Quote", ID=enactment, qid="q1", RFQ=True, item="pen", price=3)
            await server.attempt("default", "Purchase", server.agent("default", buyer), [rfq])
            await server.attempt("default", "Purchase", server.agent("default", "s"), [quote])
        # The price is bound in the quote's scope (ID, qid), not in Reject's (ID).
        with pytest.raises(Rejected) as refused:
            reject = instance("Reject", ID="r1", Quote=True, reason="no")
            await server.attempt("default", "Purchase", server.agent("default", "b"), [reject])
        assert refused.value.code == "mandate"
        assert "price is not bound where Reject is attempted" in str(refused.value)
        # The same Reject by a buyer without the ceiling is the protocol's to take.
        reject = instance("Reject", ID="r2", Quote=True, reason="no")
        await server.attempt("default", "Purchase", server.agent("default", "free"), [reject])


# Limits, `max_connections`: "At start the server raises its open-file limit to
# fit, or, if the system allows fewer, serves fewer and says so".

WITH_FILES = (
    "import os, resource, sys\n"
    "soft, hard = (int(n) for n in sys.argv[1:3])\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'strabo.cli', *sys.argv[3:]])\n"
)


def serving(tmp_path: Path, soft: int, hard: int, max_connections: int) -> list[str]:
    """`strabo syncserver` started with the open-file limits ``soft`` and ``hard``."""
    config = tmp_path / f"mas-{soft}.toml"
    config.write_text(
        f"[server]\nmax_connections = {max_connections}\n\n"
        '[mas.m]\nprotocols = ["purchase"]\n\n'
        '[mas.m.agents.buyer]\nroles = ["Buyer"]\ntoken = "buyer-secret"\n'
    )
    return [sys.executable, "-c", WITH_FILES, str(soft), str(hard), "syncserver",
            "--config", str(config), "--db", ":memory:", "--port", "0", "--log-level", "warning"]


def open_files(pid: int) -> int:
    """The soft open-file limit of process ``pid``, as Linux shows it."""
    for row in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if row.startswith("Max open files"):
            return int(row.split()[3])
    raise AssertionError("no open-file limit in /proc")


@pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads /proc (Linux)")
async def test_the_server_raises_its_open_file_limit_or_serves_fewer_and_says_so(
    tmp_path: Path,
) -> None:
    # Room to raise: 1000 connections need 1128 files, and the hard limit allows it.
    async with spawn(serving(tmp_path, 256, 4096, 1000), "roomy") as roomy:
        await roomy.line_matching(LISTENING)
        assert open_files(roomy.proc.pid) == 1128
        roomy.kill(signal.SIGTERM)
        status, _, err = await roomy.finish()
    assert status == 0 and "serving at most" not in err, err
    # No room: a hard limit of 200 files leaves 72 connections, said at start.
    async with spawn(serving(tmp_path, 200, 200, 10000), "cramped") as cramped:
        url = (await cramped.line_matching(LISTENING)).group(1)
        held = [await raw(url) for _ in range(72)]
        reader, writer = await raw(url)
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await closed_by_server(reader, 5)
        assert answer.startswith(b"HTTP/1.1 503 ") and b'"overloaded"' in answer, answer
        for _, w in [*held, (reader, writer)]:
            w.close()
        cramped.kill(signal.SIGTERM)
        status, _, err = await cramped.finish()
    assert status == 0, err
    assert (
        "strabo syncserver: the system allows 200 open files; serving at most 72 "
        "connections instead of 10000 (raise 'ulimit -n')"
    ) in err


# "An instance the agent attempts that binds the attribute to another value is
# refused (`403`, rule `acts-for`), before the protocol's own checks."


async def test_acts_for_is_checked_before_the_protocols_own_rules() -> None:
    purchase = load("purchase.lsh")
    server = SyncServer.embedded(
        [purchase], {"b": ["Buyer"], "s": ["Seller"]}, acts_for={"s": {"qid": "s"}}
    )
    seller = server.agent("default", "s")

    def quote(qid: str) -> ActionInstance:  # before any RFQ: a dependency broken too
        bindings = {"ID": "r1", "qid": qid, "RFQ": True, "item": "pen", "price": 3}
        return ActionInstance(purchase.action("Quote"), bindings)

    async with server:
        with pytest.raises(Rejected) as forged:
            await server.attempt("default", "Purchase", seller, [quote("other")])
        assert (forged.value.status, forged.value.code) == (403, "acts-for")
        with pytest.raises(Rejected) as early:  # its own qid: the protocol's turn
            await server.attempt("default", "Purchase", seller, [quote("s")])
        assert (early.value.status, early.value.code) == (409, "dependency")


# "`limit` (default 500, at most 5000) bounds the instances (in whole batches)"
# of GET .../enactment.

MANY = LangshawProtocol.parse(
    "Many\nwho A\nwhat id key, n key, Done\ndo\n"
    "  A : Open(id)\n  A : Item(id, n, Open)\n  A : Done(id, Open)\n",
    "many.lsh",
)


async def test_one_enactments_instances_are_paged_at_most_5000_whatever_limit_is_asked(
    tmp_path: Path,
) -> None:
    path = tmp_path / "many.db"
    store = SQLiteStore(path)
    await store.open()
    try:
        opened = ActionInstance(MANY.actions["Open"], {"id": "e1"})
        batches = [Batch(MANY.name, 1, (Entry(opened, "a", None),))] + [
            Batch(MANY.name, seq, (Entry(ActionInstance(
                MANY.actions["Item"], {"id": "e1", "n": f"n{seq}", "Open": True}), "a", None),))
            for seq in range(2, 5003)
        ]  # 5002 instances, one enactment
        store.append_now("default", MANY, batches)
    finally:
        await store.close()
    async with Harness("http", [MANY], {"a": ["A"]}, store=str(path)) as h, h.client("a") as a:
        url = "/mas/default/protocols/Many/enactment"
        default = (await a.get(url, params={"id": "e1"})).json()
        asked = (await a.get(url, params={"id": "e1", "limit": 10**6})).json()
        rest = (await a.get(url, params={"id": "e1", "limit": 10**6,
                                         "after": asked["next_after"]})).json()
    assert len(default["instances"]) == 500
    assert len(asked["instances"]) == 5000 and asked["next_after"] == 5000
    assert [i["seq"] for i in rest["instances"]] == [5001, 5002] and rest["next_after"] is None
