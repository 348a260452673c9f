"""A hostile review of the day's commits e47bf27 .. cdf55c9: the peer store's
exclusive lock (peach/peer/_store.py), the lean and httpx clients' whole-try
timeouts (syncserver/http1.py, syncserver/client.py), LocalExecutor's copy of
an attempt's values (peach/local.py), json_equal (langshaw/values.py) and the
schema files a $ref names (langshaw/types.py).

Each test is a finding, fixed in the product code (it fails on the code before
its fix), or pins down an edge the review tried and found held.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from langshaw import LangshawError, LangshawProtocol
from peach import ExecutorError, LocalExecutor, PeachAdapter
from peach.peer import MemoryNetwork, PeerExecutor, PeerStoreError, SQLitePeerStore
from strabo.ucp.a2a_transport import _unsent
from syncserver.client import LeanClient, NoAnswer
from tests.harness import Harness
from tests.peach._hostile_support import SIMPLE, create
from tests.peach.test_peer import LOGISTICS, NONO, directory, settle

# 1. The peer store's lock ----------------------------------------------------------


def test_a_store_opened_again_reopens_its_log_instead_of_refusing_itself(
    tmp_path: Path,
) -> None:
    """An executor whose start failed after it had opened its log (here: the
    log holds a protocol the directory lacks) keeps its store open; started
    again, it opened it again, and its own connection's lock refused the new
    one: "open in another agent process", in place of the real fault."""
    store = SQLitePeerStore(tmp_path / "a.db")
    store.open("alice")
    store.db.execute("INSERT INTO meta VALUES ('kept', 'yes')")
    store.open("alice")  # before: PeerStoreError, "open in another agent process"
    assert store.db.execute("SELECT value FROM meta WHERE key = 'kept'").fetchone() == ("yes",)
    with pytest.raises(PeerStoreError, match="open in another agent process"):
        SQLitePeerStore(tmp_path / "a.db").open("alice")  # another store: still refused
    store.close()


async def test_a_peer_executor_started_again_names_its_real_fault(tmp_path: Path) -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]})
    network = MemoryNetwork()
    buyer = PeachAdapter(
        "buyer", NONO, "Buyer",
        PeerExecutor("buyer", roles, store=tmp_path / "b.db", transport=network),
    )
    async with buyer:
        await buyer.attempt([buyer.build_action("Order", {"item": "pen"})])
    played = list(LOGISTICS.roles)
    other = directory([LOGISTICS], {"buyer": played[:1], "seller": played[1:2]})
    moved = PeerExecutor("buyer", other, store=tmp_path / "b.db", transport=network)
    for _ in range(2):  # the second time, before: "is open in another agent process"
        with pytest.raises(ExecutorError, match="has no protocol 'UnsafeNoNo'"):
            moved._load()
    # A start that failed holds nothing: the right directory opens the log in
    # this process (before: refused, the failed executor still held its lock).
    right = PeerExecutor("buyer", roles, store=tmp_path / "b.db", transport=network)
    right._load()
    assert [r.seq for r in right.store.load()] == [1]
    right.store.close()


async def test_a_peer_attempts_values_are_copied_before_it_keeps_and_sends_them(
    tmp_path: Path,
) -> None:
    """A list changed after attempting changed the agent's own view and its
    memory log, not what its peers had (nor a SQLite log): they disagreed."""
    roles = directory([SIMPLE], {"platform": ["Platform"], "business": ["Business"]})
    network = MemoryNetwork()
    sender = PeerExecutor("platform", roles, transport=network)
    receiver = PeerExecutor("business", roles, transport=network)
    platform = PeachAdapter("platform", SIMPLE, "Platform", sender)
    business = PeachAdapter("business", SIMPLE, "Business", receiver)
    async with platform, business:
        items = [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}]
        [done] = await platform.attempt([create(platform, line_items=items)])
        await settle([sender, receiver])
        items[0]["quantity"] = -6
        [(_, mine, _)] = platform.history(done.keys)
        [(_, theirs, _)] = business.history(done.keys)
        assert mine.bindings["line_items"][0]["quantity"] == 1  # type: ignore[index]
        assert theirs.bindings["line_items"][0]["quantity"] == 1  # type: ignore[index]
        [kept] = sender.store.load()
        assert kept.instances[0]["bindings"]["line_items"][0]["quantity"] == 1


_LEGACY_WRITER = """
import os, signal, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=NORMAL")
db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
db.execute("INSERT INTO meta VALUES ('agent', 'alice')")
for i in range(int(sys.argv[2])):
    db.execute("INSERT INTO meta VALUES (?, ?)", (f"k{i}", "v" * 200))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_log_left_by_a_killed_shared_mode_writer_is_recovered_whole(tmp_path: Path) -> None:
    """Held: a log an older strabo (no exclusive lock, the WAL index in a -shm
    file) was writing when killed -9: the exclusive open rebuilds the index from
    the WAL in memory and finds every committed row, past a checkpoint too."""
    path = tmp_path / "a.db"
    # 6,000 rows of 200 bytes: past its autocheckpoint (1,000 pages) too, the
    # -shm saying which frames were copied back and where the WAL restarted.
    done = subprocess.run([sys.executable, "-c", _LEGACY_WRITER, str(path), "6000"], check=False)
    assert done.returncode == -signal.SIGKILL
    assert Path(f"{path}-shm").exists() and Path(f"{path}-wal").stat().st_size > 0
    store = SQLitePeerStore(path)
    store.open("alice")
    assert store.db.execute("SELECT count(*) FROM meta").fetchone() == (6001,)
    for i in range(3000):  # past the autocheckpoint: the lock stays
        store.db.execute("INSERT INTO meta VALUES (?, ?)", (f"n{i}", "w" * 200))
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sqlite3.connect(path, timeout=0).execute("SELECT count(*) FROM meta").fetchone()
    store.close()


# 2. The lean client's places ---------------------------------------------------------


async def test_a_thousand_waits_timed_out_lose_none_of_the_hundred_places() -> None:
    """With its 100 places taken, 1,000 requests time out waiting for one; then
    100 requests still run at once (held). The finding: those 1,000 said "no
    answer within", as if sent, and an unsafe A2A tool was then settled as
    "outcome unknown" (strabo.ucp.a2a_transport._unsent) though never sent;
    they now say, as a connection that failed does, that nothing went out."""
    arrived, wanted = 0, 100
    full, gate = asyncio.Event(), asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal arrived
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                arrived += 1
                if arrived >= wanted:
                    full.set()
                await gate.wait()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    client = LeanClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", 30.0)
    try:
        holders = [asyncio.create_task(client.request("GET", "/hold")) for _ in range(100)]
        await asyncio.wait_for(full.wait(), 10)
        client.http.timeout = 0.01
        waited = await asyncio.gather(
            *(client.request("GET", "/wait") for _ in range(1000)), return_exceptions=True
        )
        assert {type(e) for e in waited} == {NoAnswer}
        port = server.sockets[0].getsockname()[1]
        said = f"cannot connect to 127.0.0.1:{port}: all 100 connections busy for 0.01s"
        assert {str(e) for e in waited} == {said}  # before: "no answer within 0.01s"
        assert _unsent(waited[0])  # type: ignore[arg-type]
        assert arrived == 100  # none of them was sent
        gate.set()
        assert {r.status_code for r in await asyncio.gather(*holders)} == {200}
        gate.clear()
        full.clear()
        arrived = 0
        client.http.timeout = 10.0
        burst = asyncio.gather(*(client.request("GET", "/burst") for _ in range(100)))
        await asyncio.wait_for(full.wait(), 5)  # all 100 in the server at once
        gate.set()
        assert {r.status_code for r in await burst} == {200}
    finally:
        gate.set()
        await client.aclose()
        server.close()
        await server.wait_closed()


# 3. LocalExecutor's copy -----------------------------------------------------------------

AGENTS = {"platform": ["Platform"], "business": ["Business"]}


class _Items(list):  # type: ignore[type-arg]
    """An agent's own list type: a JSON array to the server's checks."""


class _Item(dict):  # type: ignore[type-arg]
    """An agent's own mapping type: a JSON object to the server's checks."""


@pytest.mark.parametrize(
    "kind", ["dict subclass", "OrderedDict", "list subclass", "tuple of a dict subclass"]
)
async def test_a_container_subclass_in_an_attempt_reaches_the_server_as_a_copy(
    kind: str,
) -> None:
    """The server takes a dict or list subclass as JSON (isinstance), but the
    copy took only the exact types: such a value, and all inside it, was the
    server's log itself, and a change after the attempt (a quantity of -6)
    went into it behind the checks."""
    line: dict[str, Any] = {"item": {"id": "roses", "title": "Roses"}, "quantity": 1}
    items: Any = {
        "dict subclass": [_Item(line)],
        "OrderedDict": [collections.OrderedDict(line)],
        "list subclass": _Items([dict(line)]),
        "tuple of a dict subclass": (_Item(line),),
    }[kind]
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:
            [done] = await platform.attempt([create(platform, line_items=items)])
            items[0]["quantity"] = -6
            fresh = PeachAdapter("business", SIMPLE, "Business", LocalExecutor(h.server))
            async with fresh:
                [(_, logged, _)] = fresh.history(done.keys)
                assert list(logged.bindings["line_items"]) == [line]
                assert type(logged.bindings["line_items"][0]) is dict


# 5. Schema files a $ref names ------------------------------------------------------------

_KALLSYMS = Path("/proc/kallsyms")


def _larger_than_a_schema_file(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return len(file.read(4 * 2**20 + 1)) > 4 * 2**20
    except OSError:
        return False


@pytest.mark.skipif(
    not _larger_than_a_schema_file(_KALLSYMS), reason="needs a /proc/kallsyms over 4 MiB"
)
def test_a_file_that_says_it_is_empty_is_read_no_further_than_the_limit(tmp_path: Path) -> None:
    """/proc's files say they have 0 bytes, whatever they hold (and a log grows
    between the look and the read): the size the look saw bounded nothing, the
    whole file was read (5 MB here; /proc/self/pagemap, hundreds of GB, was
    only saved by its reads of odd sizes failing)."""
    (tmp_path / "big.json").symlink_to(_KALLSYMS)
    (tmp_path / "ref.json").write_text('{"$ref": "big.json"}', encoding="utf-8")
    text = 'Tiny\nwho A\nwhat id key, Go\ndo\n  A : Go(id, x: "ref.json")\nsayso\n  A : x\n'
    (tmp_path / "p.lsh").write_text(text, encoding="utf-8")
    with pytest.raises(LangshawError) as caught:
        LangshawProtocol.load(tmp_path / "p.lsh")
    [error] = caught.value.errors
    assert "more than a schema file may be" in str(error), str(error)  # before: "not JSON"


def test_a_schema_file_with_crlf_lines_is_located_as_before(tmp_path: Path) -> None:
    """The bounded read keeps read_text's universal newlines: a fault's line
    and column are those an editor shows, whatever the line ends."""
    (tmp_path / "s.json").write_bytes(b'{\r\n"type":\r"string",\r\n  "x": }')
    text = 'Tiny\nwho A\nwhat id key, Go\ndo\n  A : Go(id, x: "s.json")\nsayso\n  A : x\n'
    (tmp_path / "p.lsh").write_text(text, encoding="utf-8")
    with pytest.raises(LangshawError) as caught:
        LangshawProtocol.load(tmp_path / "p.lsh")
    [error] = caught.value.errors
    assert "is not JSON: Expecting value at line 4, column 8" in str(error), str(error)


def test_a_directory_or_a_symlink_chain_to_a_device_is_refused(tmp_path: Path) -> None:
    """Held: a $ref to a directory, or through two symlinks to /dev/zero."""
    (tmp_path / "dir").mkdir()
    os.symlink("/dev/zero", tmp_path / "z1")
    os.symlink("z1", tmp_path / "z2.json")
    for target in ("dir", "z2.json"):
        (tmp_path / "ref.json").write_text(f'{{"$ref": "{target}"}}', encoding="utf-8")
        text = 'Tiny\nwho A\nwhat id key, Go\ndo\n  A : Go(id, x: "ref.json")\nsayso\n  A : x\n'
        (tmp_path / "p.lsh").write_text(text, encoding="utf-8")
        with pytest.raises(LangshawError) as caught:
            LangshawProtocol.load(tmp_path / "p.lsh")
        [error] = caught.value.errors
        assert str(error).endswith("not a regular file"), str(error)


async def test_through_httpx_a_request_that_never_connected_says_so() -> None:
    """httpx's ConnectError read "ConnectError: ...", which callers that resend
    only what was never sent (strabo.ucp.a2a_transport) took for "maybe sent"."""
    import httpx

    from strabo.serving import free_port
    from syncserver.client import HttpxClient

    port = free_port()  # nobody listens there
    client = HttpxClient(f"http://127.0.0.1:{port}", 5.0, httpx.AsyncHTTPTransport())
    try:
        with pytest.raises(NoAnswer) as failed:
            await client.request("POST", "/x", {"a": 1})
    finally:
        await client.http.aclose()
    assert str(failed.value).startswith(f"cannot connect to 127.0.0.1:{port}: ConnectError")
    assert _unsent(failed.value)
