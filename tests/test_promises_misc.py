"""Promises of README.md, docs/merchant.md, docs/mcp.md, docs/a2a.md and
docs/patterns.md that no other test held: each test here quotes the sentence it
keeps true, and fails if the promise breaks. Real servers on loopback ports."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import httpx
import pytest

from langshaw import ActionInstance, LangshawProtocol
from langshaw.verify import verify
from strabo.cli import main
from syncserver import SyncServer
from syncserver.errors import Rejected
from tests.conftest import PROTOCOLS
from tests.peach.mcp.test_hostile import ACCEPT, purchase_role
from tests.processes import spawn, strabo
from tests.strabo.merchant.conftest import Shop, shop  # noqa: F401 (the fixture)
from tests.strabo.merchant.shopper import headers, line

# docs/mcp.md: "`--auth-token T` ... is required to listen elsewhere than on
# loopback (on loopback, requests naming another host are refused, against DNS
# rebinding)."

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"}}}


async def test_a_role_server_on_loopback_refuses_a_request_naming_another_host() -> None:
    async with purchase_role() as (_, url, _), httpx.AsyncClient(timeout=10) as http:
        for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example"):
            rebound = await http.post(url, json=INITIALIZE, headers={**ACCEPT, "Host": host})
            assert rebound.status_code == 421, (host, rebound.text)  # Misdirected Request
            assert "mcp-session-id" not in rebound.headers  # no session was opened
        plain = await http.post(url, json=INITIALIZE, headers=ACCEPT)
        assert plain.status_code == 200, plain.text  # the same request, naming loopback


# docs/merchant.md: "Completed and canceled sessions refuse updates, completion and
# cancelation with 409 `CHECKOUT_NOT_MODIFIABLE`." (The canceled half is
# tests/strabo/merchant/test_merchant_app.py's.)


async def test_a_completed_session_refuses_update_completion_and_cancelation(
    shop: Shop,  # noqa: F811 (the fixture)
) -> None:
    ready = await shop.shopper.ship_ready(line("bouquet_roses"))
    done = await shop.shopper.complete(ready["id"])
    assert done.status_code == 200 and done.json()["status"] == "completed", done.text
    orders = len(shop.merchant.orders())
    for attempt in (
        shop.shopper.update(ready),
        shop.shopper.complete(ready["id"]),  # a new Idempotency-Key: not a replay
        shop.shopper.cancel(ready["id"]),
    ):
        refused = await attempt
        assert refused.status_code == 409, refused.text
        assert refused.json()["code"] == "CHECKOUT_NOT_MODIFIABLE"
    after = (await shop.shopper.get(ready["id"])).json()
    assert after["status"] == "completed" and len(shop.merchant.orders()) == orders


# README.md: "The header says so in place of the SyncServer's address
# (`--policy`, a SyncServer's, is refused there)", of `strabo demo --executor peer`.


def test_the_demo_refuses_a_policy_with_the_peer_executor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["demo", "--executor", "peer", "--policy", "batched"])
    out, err = capsys.readouterr()
    assert status == 2
    assert err.startswith("strabo demo: --policy is the SyncServer's finalization policy")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""  # nothing ran: no checkout, no merchant


# docs/patterns.md, Broadcast: "Adding `nogo Wrap -/> Post` would make the
# cut-off part of the protocol, and would make it **unsafe between peers** for an
# inherent reason: a member may post before hearing that the round was wrapped
# up. On a SyncServer it would be safe (the late post is refused)."


def broadcast_with_a_cutoff() -> LangshawProtocol:
    path = PROTOCOLS / "patterns" / "broadcast.lsh"
    text = path.read_text()
    assert "  Closed -/> Open" in text
    return LangshawProtocol.parse(
        text.replace("  Closed -/> Open", "  Closed -/> Open\n  Wrap -/> Post"), str(path)
    )


async def test_a_cutoff_after_wrap_is_safe_on_a_syncserver_and_unsafe_between_peers() -> None:
    cut = broadcast_with_a_cutoff()
    assert verify(cut, semantics="shared").verdict == "ok"
    peers = verify(cut, semantics="decentralized")
    assert peers.verdict == "unsafe"
    assert [c["rule"] for c in peers.to_json()["conflicts"]] == ["nogo"]
    server = SyncServer.embedded([cut], {"chair": ["Chair"], "member": ["Member"]})
    async with server:
        chair, member = server.agent("default", "chair"), server.agent("default", "member")

        async def act(agent: Any, action: str, **bindings: Any) -> None:
            needs = {d: True for d in cut.actions[action].dependencies}
            instance = ActionInstance(cut.actions[action], {"session": "s", "round": 1,
                                                            **needs, **bindings})
            await server.attempt("default", cut.name, agent, [instance])

        await act(chair, "Open", topic="t")
        await act(member, "Post", post="p1", topic="t", author="m", text="early")
        await act(chair, "Wrap", digest="d")
        with pytest.raises(Rejected) as late:
            await act(member, "Post", post="p2", topic="t", author="m", text="late")
        assert late.value.code == "nogo"


# docs/merchant.md, Create: "Titles and prices always come from the catalog."


async def test_titles_and_prices_come_from_the_catalog_whatever_the_platform_sends(
    shop: Shop,  # noqa: F811 (the fixture)
) -> None:
    claimed = {"item": {"id": "bouquet_roses", "title": "Cheap roses", "price": 1}, "quantity": 2}
    created = await shop.shopper.create(claimed)
    assert created.status_code == 201, created.text
    checkout = created.json()
    [item] = [li["item"] for li in checkout["line_items"]]
    assert (item["title"], item["price"]) == ("Bouquet of Red Roses", 3800)
    [subtotal] = [t["amount"] for t in checkout["totals"] if t["type"] == "subtotal"]
    assert subtotal == 2 * 3800
    # An update claiming another title and price for the same line changes neither.
    line_id = checkout["line_items"][0]["id"]
    claimed = {**claimed, "id": line_id, "item": {**claimed["item"], "title": "Free", "price": 0}}
    body = {"id": checkout["id"], "line_items": [claimed], "currency": "USD", "payment": {}}
    updated = await shop.client.put(f"/checkout-sessions/{checkout['id']}", json=body,
                                    headers=headers())
    assert updated.status_code == 200, updated.text
    [item] = [li["item"] for li in updated.json()["line_items"]]
    assert (item["title"], item["price"]) == ("Bouquet of Red Roses", 3800)


# docs/merchant.md: "SIGTERM (`docker stop`, systemd) and Ctrl-C stop it
# gracefully: requests in flight finish (5 s at most), it says `strabo merchant:
# stopped` on stderr and exits 0 for SIGTERM". (The status and the line are
# tests/strabo/test_exit_and_files.py's; this is the request in flight.)


async def checkout_under_way(
    m: Any, length: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A POST /checkout-sessions to the merchant ``m`` whose body it has asked
    for (100-continue) and not yet got: a request in flight."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers().items())
    url = (await m.line_matching(r"UCP merchant listening on (http://\S+)")).group(1)
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"POST /checkout-sessions HTTP/1.1\r\nHost: x\r\n{head}Content-Type: "
        f"application/json\r\nContent-Length: {length}\r\nExpect: 100-continue\r\n\r\n"
        .encode()
    )
    continued = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    assert continued.startswith(b"HTTP/1.1 100 "), continued
    return reader, writer


async def test_a_request_in_flight_when_the_merchant_is_stopped_is_answered() -> None:
    body = json.dumps({"line_items": [line("bouquet_roses")], "currency": "USD",
                       "payment": {}}).encode()
    async with spawn(strabo("merchant", "--port", "0", "--log-level", "info"), "merchant") as m:
        reader, writer = await checkout_under_way(m, len(body))
        m.kill(signal.SIGTERM)
        assert m.proc.stderr is not None
        said = b""
        while b"Waiting for connections to close" not in said:  # uvicorn holds the stop
            line_read = await asyncio.wait_for(m.proc.stderr.readline(), 30)
            assert line_read, said.decode()
            said += line_read
        writer.write(body)
        answer = await asyncio.wait_for(reader.read(), 30)  # then the connection closes
        writer.close()
        status, _, err = await m.finish()
    assert answer.startswith(b"HTTP/1.1 201 "), answer[:300]
    assert b'"Bouquet of Red Roses"' in answer
    assert status == 0 and err.rstrip().endswith("strabo merchant: stopped"), err


async def test_a_request_in_flight_that_never_ends_holds_the_stop_5_seconds_at_most() -> None:
    """The other half: a request whose body never comes is given up after 5 s,
    and the merchant still stops (0, "stopped"), rather than wait for it."""
    async with spawn(strabo("merchant", "--port", "0", "--log-level", "info"), "merchant") as m:
        _, writer = await checkout_under_way(m, 100)  # no body comes
        stopped_at = time.monotonic()
        m.kill(signal.SIGTERM)
        status, _, err = await asyncio.wait_for(m.finish(), 60)
        took = time.monotonic() - stopped_at
        writer.close()
    assert status == 0 and err.rstrip().endswith("strabo merchant: stopped"), err
    # 5 s of grace, the rest slack for a loaded machine; without the cap, for ever.
    assert took < 15, took


async def test_an_mcp_role_server_runs_at_most_64_waits_at_once() -> None:
    """docs/mcp.md: "at most 64 waits run at once: past that, the oldest ends at
    once with no events and an `ended` note" (the default of the role server's
    event log; tests/peach/mcp/test_hostile.py checks the mechanism with 1)."""
    import inspect

    from peach.mcp import RoleServer
    from peach.mcp._events import EventLog

    assert inspect.signature(RoleServer).parameters["max_waits"].default == 64
    log = EventLog(max_waits=64)
    waits = [asyncio.create_task(log.wait(None, 60)) for _ in range(65)]
    try:
        oldest = await asyncio.wait_for(waits[0], 10)
        assert oldest["events"] == [] and "more than 64 waits at once" in oldest["ended"]
        assert log.waiting == 64 and not any(w.done() for w in waits[1:])
    finally:
        log.close()  # every other wait ends, saying the server stops
        ended = await asyncio.gather(*waits[1:], return_exceptions=True)
    assert all(isinstance(e, EOFError) for e in ended)
