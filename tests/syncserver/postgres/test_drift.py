"""A log is served only with the text of each protocol it was written with.

Two servers sharing a PostgreSQL log, one with a text of Purchase that lacks the
``nono Accept Reject``, would both commit: the Accept of a quote on one and its
Reject on the other, a log that breaks the protocol, replayed silently at every
restart (a rolling upgrade that changes a protocol does just that). So the log
records each protocol's meaning and its digest (``langshaw.identity``) when a
server first starts on it, and a server whose text means something else refuses
to start, saying which protocol and what differs: ``strabo syncserver`` exits
with status 2 and one line. A SQLite log reopened with a changed protocol is
refused the same way, by the same code. A text that means the same (comments,
order, spacing, another file) is no change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from langshaw import ActionInstance, LangshawProtocol
from langshaw.identity import describe_changes, meaning
from syncserver import Rejected, StoreError, SyncServer, load_config
from tests.conftest import PROTOCOLS
from tests.processes import spawn, strabo

TEXT = (PROTOCOLS / "purchase.lsh").read_text()
PURCHASE = LangshawProtocol.parse(TEXT, str(PROTOCOLS / "purchase.lsh"))
AGENTS = {"b": ["Buyer"], "s": ["Seller"]}
# Purchase without the nono that makes accepting and rejecting a quote exclusive.
LAX = TEXT.replace("nono\n  Accept Reject\n", "nono\n")
# Purchase as another file says it: comments, order and spacing differ, not the meaning.
SAME = (
    TEXT.replace("nono\n  Accept Reject\n  Cancel Completed\n", "nono\n  Cancel Completed\n"
                 "  Reject   Accept   # either, not both\n")
    .replace("  Shipper : outcome\n", "  Shipper : outcome  # the shipper's say\n")
)


def protocol(directory: Path, text: str, name: str) -> LangshawProtocol:
    path = directory / f"{name}.lsh"
    path.write_text(text)
    return LangshawProtocol.load(path)


@pytest.fixture(params=["sqlite", "postgres"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "log.db")
    return str(request.getfixturevalue("pg_url"))


def server(protocols: list[LangshawProtocol], store: str) -> SyncServer:
    return SyncServer.embedded(protocols, AGENTS, store=store)


async def purchase(s: SyncServer, agent: str, action: str, **bindings: Any) -> Any:
    instance = ActionInstance(s.ledgers[("default", "Purchase")].protocol.action(action), bindings)
    return await s.attempt("default", "Purchase", s.agent("default", agent), [instance])


async def test_a_server_with_another_text_of_a_protocol_refuses_the_log(
    log: str, tmp_path: Path
) -> None:
    """A server runs on the log with Purchase; a server with a text lacking a
    nono is refused at start, while the first runs (a second server on the
    shared log) and after it stopped (a restart). A text meaning the same is
    served, and holds to the nono."""
    lax = protocol(tmp_path, LAX, "lax")
    async with server([PURCHASE], log) as first:
        await purchase(first, "b", "RFQ", ID="p1", item="pen", budget=9)
        await purchase(first, "s", "Quote", ID="p1", qid="q1", RFQ=True, item="pen", price=3)
        await purchase(first, "b", "Accept", ID="p1", Quote=True, chosen="q1", price=3,
                       address="here")
        with pytest.raises(StoreError) as refused:
            async with server([lax], log) as second:  # refused at start: never reached
                await purchase(second, "b", "Reject", ID="p1", Quote=True, reason="no")
    message = str(refused.value)
    assert message.startswith(f"default/Purchase: {lax.source} is not the text"), message
    assert "(nono Accept Reject removed)" in message and "\n" not in message, message
    with pytest.raises(StoreError, match="nono Accept Reject removed"):
        await server([lax], log).start()
    async with server([protocol(tmp_path, SAME, "same")], log) as same:
        with pytest.raises(Rejected) as nono:
            await purchase(same, "b", "Reject", ID="p1", Quote=True, reason="no")
        assert nono.value.code == "nono"
        assert same.ledgers[("default", "Purchase")].committed_seq == 3


def config(directory: Path, path: Path) -> Path:
    toml = directory / f"{path.stem}.toml"
    toml.write_text(
        f'[mas.shop]\nprotocols = ["{path}"]\n'
        '[mas.shop.agents.b]\nroles = ["Buyer"]\ntoken = "b-token"\n'
    )
    return toml


async def test_strabo_syncserver_exits_2_naming_the_protocol_and_the_change(
    log: str, tmp_path: Path
) -> None:
    original = config(tmp_path, PROTOCOLS / "purchase.lsh")
    async with SyncServer(load_config(original), store=log):
        pass  # the log now says which text of Purchase it is written with
    lax = tmp_path / "lax.lsh"
    lax.write_text(LAX)
    command = strabo("syncserver", "--config", str(config(tmp_path, lax)), "--db", log,
                     "--port", "0")
    async with spawn(command, "syncserver") as process:
        status, out, err = await process.finish(seconds=15)
    assert status == 2 and "listening" not in out, (status, out, err)
    [line] = err.strip().splitlines()
    assert line == (
        f"strabo syncserver: shop/Purchase: {lax} is not the text of Purchase this log was "
        "written with (nono Accept Reject removed): serve the log with that text, or use a "
        "new --db"
    ), line


def test_what_differs_is_said_change_by_change(tmp_path: Path) -> None:
    before = meaning(PURCHASE)

    def changes(text: str) -> list[str]:
        return describe_changes(before, meaning(protocol(tmp_path, text, "changed")))

    assert changes(SAME) == []
    assert changes(LAX) == ["nono Accept Reject removed"]
    assert changes(TEXT.replace("nogo\n  Cancel -/> Ship\n", "nogo\n")) == [
        "nogo Cancel -/> Ship removed"
    ]
    assert changes(TEXT.replace("Seller > Buyer : price", "Buyer > Seller : price")) == [
        "sayso of price Seller > Buyer became Buyer > Seller"
    ]
    assert changes(TEXT.replace("reason: string)", "reason: string, note?: string)")
                   .replace("address, reason,", "address, reason, note,")) == [
        "action Reject gained note", "sayso of note added", "type of note added"
    ]
    assert changes(TEXT.replace("budget: number", "budget: integer")) == [
        "type of budget changed"
    ]
