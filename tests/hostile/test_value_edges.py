"""Values at the edges of JSON: an integer too long to write, a value nested
too deeply to follow. And two callbacks at the edges of the adapter: a proxy's
observer resumed at start-up, and breach listeners (the end of this file).

Python's ``int`` has no size, but its int-to-str conversion stops at
``sys.get_int_max_str_digits()`` (4300 digits), and so does every JSON encoder
here; pydantic's parser stops there too, and at about 200 levels of nesting.
Before: ``10**5000`` passed ``bind()``; over a LocalExecutor on SQLite the
commit failed, was retried three times as ``503 store-failed`` and ended in
ExecutorError; the peer executor raised a raw ValueError; a value 5,000 levels
deep made ``json_fault`` itself raise RecursionError. Now each is a fault with
its place: ``bad-json`` on every path (in process, over HTTP, peer to peer),
never a 503 retried, never a traceback. Real SQLite, real servers on loopback.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import re
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest

from langshaw import ActionInstance
from langshaw.values import MAX_DIGITS, MAX_NESTING, json_fault, json_problem
from peach import BindError, ExecutorError, HandlerError, LocalExecutor, PeachAdapter
from peach.peer import PeerExecutor
from peach.peer.directory import AGENT_HEADER, SIGNATURE_HEADER, sign
from peach.roles import MustAlways, Responsibility, RoleSpec
from strabo.proxy import ProxyAdapter
from syncserver import ServiceError, SyncServer
from tests.harness import Harness, until
from tests.hostile._support import guarded
from tests.peach.test_peer import NONO, directory, settle
from tests.peach.test_peer_json import post

HUGE = 10**5000  # 5001 digits
HUGE_SAYS = f"an integer of 5001 digits, more than JSON encoders here accept ({MAX_DIGITS})"
ORDER = NONO.action("Order")


async def post_raw(url: str, seq: int, instance: str) -> httpx.Response:
    """One message of UnsafeNoNo written by hand, signed as the buyer."""
    body = (
        '{"mas": "default", "sender": "buyer", "messages": [{"protocol": "UnsafeNoNo", '
        f'"seq": {seq}, "instances": [{instance}], "context": []}}]}}'
    ).encode()
    headers = {AGENT_HEADER: "buyer", SIGNATURE_HEADER: sign("buyer-secret", body)}
    async with httpx.AsyncClient() as client:
        return await client.post(f"{url}/peer/messages", content=body, headers=headers)


def nested(depth: int) -> Any:
    """A value of ``depth`` lists, one inside the other."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_json_fault_names_an_integer_too_long_and_a_value_too_deep() -> None:
    assert json_fault(HUGE, "x") == ("x", f"x is {HUGE_SAYS}")
    assert json_fault({"a": [1, -HUGE]}, "b") == ("b.a[1]", f"b.a[1] is {HUGE_SAYS}")
    assert json_fault(10**MAX_DIGITS - 1) is None  # the longest that can be written
    assert json_fault(-(10**MAX_DIGITS) + 1) is None
    assert json_fault(10**MAX_DIGITS) is not None
    assert json_fault(nested(MAX_NESTING)) is None
    # Named from where the check began (the path down to the place would be
    # as long as the nesting).
    too_deep = ("v", f"v is nested too deeply: more than {MAX_NESTING} levels")
    assert json_fault(nested(MAX_NESTING + 1), "v") == too_deep
    assert json_fault({"k": nested(MAX_NESTING)}, "v") == too_deep
    assert json_fault([1, {"k": nested(MAX_NESTING - 2)}], "v") is None
    # Far past the interpreter's recursion limit: a fault, not RecursionError.
    assert json_fault(nested(5000), "v") == too_deep
    assert json_problem({"a": nested(5000)}) == (
        f"value is nested too deeply: more than {MAX_NESTING} levels"
    )


@pytest.mark.parametrize(
    ("value", "says"),
    [(HUGE, HUGE_SAYS), (nested(300), "nested too deeply"), (nested(5000), "nested too deeply")],
    ids=["huge-int", "nested-300", "nested-5000"],
)
async def test_local_executor_on_sqlite_refuses_it_as_bad_json_never_retried(
    value: Any, says: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = SyncServer.embedded([NONO], {"buyer": ["Buyer"]}, store=str(tmp_path / "s.db"))
    async with server:
        buyer = PeachAdapter("buyer", NONO, "Buyer", LocalExecutor(server))
        async with buyer:
            [fa] = buyer.initiating()
            with pytest.raises(BindError, match=re.escape(says)) as bound:
                fa.bind(item={"price": value})
            assert bound.value.attribute == "item"
            forged = ActionInstance(ORDER, {"id": "o1", "item": {"price": value}})
            with (
                caplog.at_level(logging.INFO),
                pytest.raises(ExecutorError, match=re.escape(says)) as caught,
            ):
                await buyer.attempt([forged])
            assert (caught.value.code, caught.value.status) == ("bad-json", 400)
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert "store-failed" not in caplog.text
            # The server itself, in process: refused with the place, no traceback.
            with pytest.raises(ServiceError) as refused:
                await server.attempt(
                    "default", "UnsafeNoNo", server.agent("default", "buyer"), [forged]
                )
            assert refused.value.code == "bad-json"
            assert "instances[0].bindings" in refused.value.message
            assert buyer.enactments() == []
            [order] = await buyer.attempt([fa.bind(id="o2", item="pen")])  # it goes on
            assert order.keys == {"id": "o2"}


async def test_bind_and_the_server_draw_the_nesting_line_at_the_same_place() -> None:
    """bind() checks one value; the server checks the bindings' object around
    it, one level more: a value bind() accepts is one the server accepts."""
    server = SyncServer.embedded([NONO], {"buyer": ["Buyer"]})
    async with server:
        buyer = PeachAdapter("buyer", NONO, "Buyer", LocalExecutor(server))
        async with buyer:
            [fa] = buyer.initiating()
            with pytest.raises(BindError, match="nested too deeply"):
                fa.bind(id="o1", item=nested(MAX_NESTING))
            with pytest.raises(ExecutorError, match="nested too deeply"):
                await buyer.attempt([ActionInstance(ORDER, {"id": "o1",
                                                            "item": nested(MAX_NESTING)})])
            [order] = await buyer.attempt([fa.bind(id="o1", item=nested(MAX_NESTING - 1))])
            assert order.keys == {"id": "o1"}


async def test_the_syncserver_over_http_gives_the_in_process_verdict() -> None:
    """A value nested deeper than MAX_NESTING but within what pydantic's
    parser reads (about 200 levels) is refused as the in-process path refuses
    it; deeper, or an integer past 4300 digits, the parser refuses: all
    ``400 bad-json``, with nothing kept."""
    async with guarded([NONO], {"buyer": ["Buyer"]}) as (_, url):
        attempts = f"{url}/mas/default/protocols/UnsafeNoNo/attempts"
        headers = {"Authorization": "Bearer buyer-token", "Content-Type": "application/json"}
        cases = {
            "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1): "nested too deeply",
            "[" * 5000 + "]" * 5000: "not valid JSON",
            "1" * 5001: "not valid JSON",
        }
        async with httpx.AsyncClient() as client:
            for item, says in cases.items():
                body = '{"instances": [{"action": "Order", "bindings": {"id": "o1", "item": %s}}]}'
                body %= item
                answer = await client.post(attempts, content=body, headers=headers)
                assert answer.status_code == 400, answer.text
                error = answer.json()["error"]
                assert error["code"] == "bad-json" and says in error["message"], error
            ok = nested(MAX_NESTING - 1)  # the bindings object is one level more
            order = {"action": "Order", "bindings": {"id": "o2", "item": ok}}
            body = json.dumps({"instances": [order]})
            answer = await client.post(attempts, content=body, headers=headers)
            assert answer.status_code == 200, answer.text
            assert answer.json()["seq"] == 1, answer.text  # the first batch kept


@pytest.mark.parametrize("value", [HUGE, nested(MAX_NESTING + 1)], ids=["huge-int", "nested"])
async def test_a_sync_executor_refuses_it_before_sending(value: Any) -> None:
    async with Harness("http", [NONO], {"buyer": ["Buyer"]}) as h:
        buyer = h.adapter("buyer", "Buyer")
        async with buyer:
            forged = ActionInstance(ORDER, {"id": "o1", "item": {"price": value}})
            with pytest.raises(ExecutorError) as caught:
                await buyer.attempt([forged])
            assert (caught.value.code, caught.value.status) == ("bad-json", 400)
            assert "instances[0].bindings" in str(caught.value)
            assert buyer.enactments() == []


@pytest.mark.parametrize("value", [HUGE, nested(MAX_NESTING + 1)], ids=["huge-int", "nested"])
async def test_a_peer_neither_sends_nor_accepts_it(value: Any, tmp_path: Path) -> None:
    roles = directory([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]}, http=True)
    buyer_ex = PeerExecutor("buyer", roles, store=tmp_path / "b.db")
    seller_ex = PeerExecutor("seller", roles, store=tmp_path / "s.db")
    buyer = PeachAdapter("buyer", NONO, "Buyer", buyer_ex)
    seller = PeachAdapter("seller", NONO, "Seller", seller_ex)
    url = roles.peers["seller"].url
    assert url is not None
    async with buyer, seller:
        forged = ActionInstance(ORDER, {"id": "o1", "item": [value]})
        with pytest.raises(ExecutorError) as caught:
            await buyer.attempt([forged])
        assert caught.value.code == "bad-json"
        assert "instances[0].bindings" in str(caught.value)
        assert buyer.enactments() == [] and buyer_ex.outstanding() == 0
        # Written by hand to the seller (a seq of its own, not the buyer's next):
        # refused at once, never busy. An integer past 4300 digits never reaches
        # the message checks: the seller's parser refuses the whole body (400
        # bad-json, as the SyncServer answers a body that is not JSON).
        if value is HUGE:
            order = '{"action": "Order", "bindings": {"id": "o1", "item": [%s]}}' % ("1" * 5001)
            answer = await post_raw(url, 1000, order)
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["code"] == "bad-json"
            assert "number out of range" in answer.json()["error"]["message"]
        else:
            text = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)
            order = f'{{"action": "Order", "bindings": {{"id": "o1", "item": {text}}}}}'
            for _ in range(2):
                result = await post(url, "UnsafeNoNo", 1000, order)
                assert (result["status"], result["rule"]) == ("refused", "bad-json"), result
                assert result["message"].endswith(f"more than {MAX_NESTING} levels")
        [sent] = await buyer.attempt([buyer.build_action("Order", {"item": "pen"})])
        await settle([buyer_ex, seller_ex], 10.0)
        assert [i.name for _, i, _ in seller.history(sent.keys)] == ["Order"]


# A proxy's observer, resumed at start-up ---------------------------------------------


def seller_proxy(server: SyncServer) -> ProxyAdapter:
    """A proxy that answers Order with Ship; its route is not automatic (Order
    excluded), so the observer the test registers is the one resumed."""
    proxy = ProxyAdapter(
        "seller", NONO, "Seller", LocalExecutor(server),
        base_url="http://127.0.0.1:9", exclude=["Order"],
    )
    proxy.route("Order->>Ship", "POST-/ship")
    return proxy


@pytest.mark.parametrize("policy", ["stop", "log"])
async def test_an_observer_resumed_at_start_up_fails_as_any_handler_does(
    policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: ``_resume`` called the observer itself, so a plain ``def`` one
    that raised escaped ``start()``: the proxy did not start at all, whatever
    its handler_errors policy said. Now it runs as any handler does: logged,
    counted, and what handler_errors says happens."""
    server = SyncServer.embedded([NONO], {"buyer": ["Buyer"], "seller": ["Seller"]})
    async with server:
        buyer = PeachAdapter("buyer", NONO, "Buyer", LocalExecutor(server))
        async with buyer:  # an Order waits for its Ship before the proxy starts
            await buyer.attempt([buyer.build_action("Order", {"item": "pen"})])
        proxy = seller_proxy(server)
        proxy.handler_errors = policy  # type: ignore[assignment]
        seen: list[str] = []

        @proxy.observation("Order")  # type: ignore[arg-type]  # a plain def, on purpose
        def resumed(instance: ActionInstance, performer: str) -> None:
            seen.append(performer)
            raise RuntimeError("the observer fails at once")

        if policy == "stop":
            with pytest.raises(HandlerError, match="the observer fails at once"):
                async with proxy:
                    await asyncio.wait_for(asyncio.Event().wait(), 10.0)  # cut by the failure
        else:
            logged = asyncio.Event()  # set once the failure is counted, then logged
            handler = logging.Handler(logging.ERROR)
            handler.emit = lambda record: logged.set()  # type: ignore[method-assign]
            logging.getLogger("strabo.peach").addHandler(handler)
            try:
                async with proxy:
                    await until(lambda: proxy.counters["handler errors"] == 1, logged)
            finally:
                logging.getLogger("strabo.peach").removeHandler(handler)
        assert seen == ["buyer"] and proxy.counters["handler errors"] == 1
        assert any("the observer fails at once" in r.getMessage() for r in caplog.records)


# Breach listeners ---------------------------------------------------------------------


async def breach(listeners: list[Any]) -> PeachAdapter:
    """A buyer whose must-always "no-orders" breaks with its own Order, with
    ``listeners`` as its breach listeners (that very list); returned once the
    breach is reported and the buyer stopped."""
    server = SyncServer.embedded([NONO], {"buyer": ["Buyer"]})
    spec = RoleSpec(
        "Buyer",
        responsibilities=[
            Responsibility(
                "Quiet",
                must_always=(MustAlways("no-orders", "no order", lambda a: not a.enactments()),),
            )
        ],
    )
    async with server:
        buyer = PeachAdapter("buyer", NONO, "Buyer", LocalExecutor(server))
        buyer.adopt(spec)
        buyer.breach_listeners = listeners
        changed = asyncio.Event()
        buyer.listeners.append(lambda batch, newly: changed.set())
        async with buyer:
            await buyer.attempt([buyer.build_action("Order", {"item": "pen"})])
            await until(lambda: buyer.counters["breaches"] == 1, changed)
    return buyer


async def test_an_async_breach_listener_is_refused_never_left_unawaited() -> None:
    """Before: its coroutine was dropped (Python's "never awaited" warning, its
    body never run, nothing counted). Now it is refused as ``notify`` refuses an
    async listener: counted (breach listener errors), its coroutine closed; the
    other listeners still run."""
    calls: list[str] = []

    async def pager(constraint: MustAlways) -> None:
        calls.append("pager")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        buyer = await breach([pager, lambda constraint: calls.append(constraint.name)])
        gc.collect()  # a dropped coroutine warns when it is collected
    assert not [w for w in caught if "never awaited" in str(w.message)]
    assert buyer.counters["breach listener errors"] == 1
    assert calls == ["no-orders"]


async def test_a_breach_listener_added_during_a_breach_runs_from_the_next() -> None:
    """Before: the loop ran over the live list, so a listener added by another
    during a breach ran in that same pass. Now the list is read once per
    breach, as ``adapter.listeners`` is once per batch."""
    calls: list[str] = []

    def late(constraint: MustAlways) -> None:
        calls.append("late")

    def first(constraint: MustAlways) -> None:
        calls.append("first")
        listeners.append(late)

    listeners: list[Any] = [first]
    buyer = await breach(listeners)
    assert calls == ["first"]
    assert buyer.breach_listeners == [first, late]
