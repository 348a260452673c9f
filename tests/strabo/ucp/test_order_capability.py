"""The Order capability: UCPOrder verified, the merchant's webhooks signed as the
spec says, the order proxy's receiver refusing what is not, and an order at
the bundled merchant reaching the Platform as protocol actions, in order."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from langshaw.verify import verify
from peach import LocalExecutor
from strabo import demo, serve
from strabo.merchant import create_app, merchant_of
from strabo.ucp.order_platform import OrderWatcher
from strabo.ucp.order_proxy import PROFILE_PATH, WEBHOOK_PATH, OrderProxy
from strabo.ucpwire import ap2 as jose
from strabo.ucpwire.signatures import (
    SignatureError,
    sign_request,
    verify_detached,
    verify_request,
)
from syncserver import SyncServer
from tests.conftest import load
from tests.strabo.merchant.shopper import Shopper, line

SECRET = "order-secret"
ROLES = {"orders": ["Business"], "platform-orders": ["Platform"]}


def test_ucp_order_verifies_safe_and_live() -> None:
    protocol = load("ucp-order.lsh")
    for semantics in ("shared", "decentralized"):
        report = verify(protocol, semantics=semantics)
        assert report.complete and report.live and report.safe, report.to_json()
        assert report.dead == {} and report.never_hold == []


# ------------------------------------------------------------------ signatures

KEY = jose.generate_key()
URL = "http://127.0.0.1:9/webhooks/ucp/orders"
HEADERS = {"content-type": "application/json", "ucp-agent": 'profile="http://m/.well-known/ucp"',
           "webhook-id": "w1"}


def signed(body: bytes, key: jose.PrivateKey = KEY, kid: str = "k1") -> dict[str, str]:
    headers = dict(HEADERS)
    headers |= {k.lower(): v for k, v in sign_request("POST", URL, headers, body, key, kid,
                                                        created=int(time.time())).items()}
    return headers


def key_for(kid: str) -> jose.PublicKey | None:
    return KEY.public_key() if kid == "k1" else None


def test_a_signed_request_verifies_and_covers_what_the_spec_requires() -> None:
    body = b'{"id":"o1"}'
    headers = signed(body)
    result = verify_request("POST", URL, headers, body, key_for)
    assert result.kid == "k1"
    assert {"@method", "@authority", "@path", "content-digest", "content-type",
            "ucp-agent", "webhook-id"} <= set(result.components)
    assert re.fullmatch(r"sig1=:[A-Za-z0-9+/]+=*:", headers["signature"])
    assert len(__import__("base64").b64decode(headers["signature"][6:-1])) == 64  # r||s
    assert verify_detached(headers["request-signature"], body, key_for).kid == "k1"


def test_a_signature_from_the_future_or_long_expired_is_refused() -> None:
    """``created`` later than the verifier's clock (past the skew) or an
    ``expires`` long past is no evidence; within the skew both pass."""
    body = b'{"id":"o1"}'
    headers = signed(body)
    created = int(headers["signature-input"].split("created=")[1].split(";")[0])
    assert verify_request("POST", URL, headers, body, key_for, now=created - 200).kid == "k1"
    with pytest.raises(SignatureError, match="created 1000 s in the future"):
        verify_request("POST", URL, headers, body, key_for, now=created - 1000)
    expiring = dict(HEADERS)
    expiring |= {k.lower(): v for k, v in sign_request(
        "POST", URL, expiring, body, KEY, "k1", created=created).items()}
    expiring["signature-input"] += f";expires={created + 60}"  # not signed: base differs
    with pytest.raises(SignatureError, match="expired 940 s ago"):
        verify_request("POST", URL, expiring, body, key_for, now=created + 1000)
    bad = dict(headers, **{"signature-input": headers["signature-input"].replace(
        f"created={created}", "created=soon")})
    with pytest.raises(SignatureError, match="created is not a time"):
        verify_request("POST", URL, bad, body, key_for)


@pytest.mark.parametrize(("change", "code"), [
    ("body", "digest_mismatch"),
    ("body and digest", "signature_invalid"),
    ("header", "signature_invalid"),
    ("path", "signature_invalid"),
    ("key", "key_not_found"),
    ("missing", "signature_missing"),
])
def test_a_tampered_or_missing_signature_is_refused(change: str, code: str) -> None:
    body = b'{"id":"o1"}'
    headers, url = signed(body), URL
    other = b'{"id":"o2"}'
    if change == "body":
        body = other
    elif change == "body and digest":
        headers["content-digest"] = signed(other)["content-digest"]
        body = other
    elif change == "header":
        headers["webhook-id"] = "w2"
    elif change == "path":
        url = URL.replace("orders", "other")
    elif change == "key":
        headers = signed(body, jose.generate_key(), "k2")
    else:
        del headers["signature"], headers["signature-input"]
    with pytest.raises(SignatureError) as caught:
        verify_request("POST", url, headers, body, key_for)
    assert caught.value.code == code
    if change in ("body", "body and digest"):
        with pytest.raises(SignatureError):
            verify_detached(headers["request-signature"], body, key_for)


# ------------------------------------------------------------ the receiver alone


@dataclass
class Receiver:
    url: str
    proxy: OrderProxy
    watcher: OrderWatcher
    client: httpx.AsyncClient

    async def post(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        return await self.client.post(self.url + WEBHOOK_PATH, content=body, headers=headers)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """An order proxy trusting KEY (as kid k1) for the merchant at http://m."""
    server = SyncServer.embedded([load("ucp-order.lsh")], ROLES)
    proxy = OrderProxy(LocalExecutor(server), "http://m",
                       trusted_keys=[jose.public_jwk(KEY, "k1")], timeout=0.5)
    watcher = OrderWatcher(LocalExecutor(server))
    async with serve(proxy.app()) as url, proxy, watcher, httpx.AsyncClient() as client:
        yield Receiver(url, proxy, watcher, client)


def order_body(oid: str = "o1", **extra: Any) -> bytes:
    order = {"id": oid, "checkout_id": "chk_1", "permalink_url": f"http://m/orders/{oid}",
             "line_items": [{"id": "li_1", "quantity": {"total": 1, "fulfilled": 0}}],
             "totals": [{"type": "total", "amount": 100}], "fulfillment": {"events": []},
             "event_id": str(uuid.uuid4()), **extra}
    return json.dumps(order).encode()


def webhook(receiver: Receiver, body: bytes, key: jose.PrivateKey = KEY,
            kid: str = "k1", profile: str = "http://m/.well-known/ucp") -> dict[str, str]:
    headers = {"content-type": "application/json", "ucp-agent": f'profile="{profile}"',
               "webhook-id": str(uuid.uuid4())}
    url = receiver.url + WEBHOOK_PATH
    return headers | sign_request("POST", url, headers, body, key, kid, created=0)


async def test_a_signed_webhook_is_enacted_and_acknowledged(receiver: Receiver) -> None:
    answer = await receiver.post(body := order_body(), webhook(receiver, body))
    assert answer.status_code == 200 and "ucp" in answer.json()
    await receiver.watcher.wait_for("o1", "Placed", 5)
    assert receiver.watcher.actions("o1") == ["Placed"]


@pytest.mark.parametrize("fault", ["tampered", "missing", "other key", "other business"])
async def test_a_bad_webhook_is_refused_logged_and_enacts_nothing(
    receiver: Receiver, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    body = order_body()
    headers = webhook(receiver, body)
    if fault == "tampered":
        body = order_body("o2")
    elif fault == "missing":
        headers = {k: v for k, v in headers.items()
                   if k.lower() not in ("signature", "signature-input", "request-signature")}
    elif fault == "other key":
        headers = webhook(receiver, body, jose.generate_key(), "k1")
    else:  # signed by a key it trusts, but for another business's profile
        headers = webhook(receiver, body, profile="http://evil/.well-known/ucp")
    with caplog.at_level(logging.WARNING, logger="strabo.ucp"):
        answer = await receiver.post(body, headers)
    codes = {"tampered": (400, "digest_mismatch"), "missing": (401, "signature_missing"),
             "other key": (401, "signature_invalid"),
             "other business": (403, "profile_not_trusted")}
    assert (answer.status_code, answer.json()["code"]) == codes[fault]
    assert [r.code for r in receiver.proxy.refused] == [codes[fault][1]]
    assert "refused webhook" in caplog.text
    assert receiver.proxy.adapter.enactments() == []
    assert receiver.watcher.seen == []


async def test_a_replayed_webhook_enacts_nothing_twice(receiver: Receiver) -> None:
    refund = {"id": "adj_1", "type": "refund", "occurred_at": "2026-01-10T14:30:00Z",
              "status": "completed", "totals": [{"type": "total", "amount": -100}]}
    body = order_body(adjustments=[refund])
    headers = webhook(receiver, body)
    first = await receiver.post(body, headers)
    attempts = receiver.proxy.adapter.counters["attempts"]
    again = await receiver.post(body, headers)
    assert first.status_code == again.status_code == 200
    assert receiver.proxy.adapter.counters["attempts"] == attempts == 2
    # The same event under a new Webhook-Id (a merchant resending the snapshot):
    # what the protocol already has is not performed again either.
    resent = await receiver.post(body, webhook(receiver, body))
    assert resent.status_code == 200
    assert receiver.proxy.adapter.counters["attempts"] == 2
    await receiver.watcher.wait_for("o1", "Refunded", 5)
    assert receiver.watcher.actions("o1") == ["Placed", "Refunded"]


# ----------------------------------------------------- the bundled merchant's webhooks


@dataclass
class Shop:
    url: str
    client: httpx.AsyncClient
    receiver: str
    recorded: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    def headers(self, **extra: str) -> dict[str, str]:
        return {"UCP-Agent": f'profile="{self.receiver}{PROFILE_PATH}"',
                "Request-Signature": "test", "Request-Id": str(uuid.uuid4()),
                "Idempotency-Key": str(uuid.uuid4()), **extra}


async def checkout(shop: Shop) -> str:
    """A checkout completed at the bundled merchant; its order id."""
    shopper = Shopper(shop.client, agent=shop.headers()["UCP-Agent"])
    ready = await shopper.ship_ready(line("bouquet_roses", 2))
    done = await shopper.complete(ready["id"])
    assert done.status_code == 200, done.text
    return str(done.json()["order"]["id"])


@pytest.fixture
async def shop() -> AsyncIterator[tuple[Shop, OrderWatcher]]:
    app = create_app(simulation_secret=SECRET)
    server = SyncServer.embedded([load("ucp-order.lsh")], ROLES)
    async with serve(app) as merchant_url:
        proxy = OrderProxy(LocalExecutor(server), merchant_url)
        watcher = OrderWatcher(LocalExecutor(server))
        recorded: list[tuple[dict[str, str], bytes]] = []
        inner = proxy.app()

        async def recording(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"] == WEBHOOK_PATH:
                chunks = []
                while True:
                    message = await receive()
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body"):
                        break
                body = b"".join(chunks)
                recorded.append(({k.decode(): v.decode() for k, v in scope["headers"]}, body))
                sent = False

                async def replay() -> dict[str, Any]:
                    nonlocal sent
                    if sent:
                        return await receive()
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}

                return await inner(scope, replay, send)
            return await inner(scope, receive, send)

        async with serve(recording) as receiver_url, proxy, watcher, \
                httpx.AsyncClient(base_url=merchant_url) as client:
            assert merchant_of(app).simulation_secret == SECRET
            yield Shop(merchant_url, client, receiver_url, recorded), watcher


async def test_the_merchant_signs_its_webhooks_as_the_spec_says(
    shop: tuple[Shop, OrderWatcher]
) -> None:
    store, _ = shop
    oid = await checkout(store)
    [(headers, body)] = store.recorded
    profile = (await store.client.get("/.well-known/ucp")).json()
    [jwk] = [k for k in profile["signing_keys"] if k["kid"] == "merchant-webhooks"]
    assert headers["ucp-agent"] == f'profile="{store.url}/.well-known/ucp"'
    assert int(headers["webhook-timestamp"]) <= time.time() + 1
    document = json.loads(body)
    assert document["id"] == oid and document["event_id"] == headers["webhook-id"]
    assert document["created_time"].endswith("Z") and document["event_type"] == "order_placed"
    url = f"{store.receiver}{WEBHOOK_PATH}"
    assert verify_request("POST", url, headers, body,
                          lambda kid: jose.key_from_jwk(jwk) if kid == jwk["kid"] else None)
    assert verify_detached(headers["request-signature"], body,
                           lambda kid: jose.key_from_jwk(jwk) if kid == jwk["kid"] else None)


async def test_an_order_shipped_delivered_and_refunded_reaches_the_platform_in_order(
    shop: tuple[Shop, OrderWatcher]
) -> None:
    store, watcher = shop
    oid = await checkout(store)
    await watcher.wait_for(oid, "Placed", 5)
    shipped = await store.client.post(f"/testing/simulate-shipping/{oid}",
                                      headers=store.headers(**{"Simulation-Secret": SECRET}))
    assert shipped.status_code == 200, shipped.text
    await watcher.wait_for(oid, "Shipped", 5)
    delivered = {"id": "evt_d", "type": "delivered", "occurred_at": "2026-01-09T10:00:00Z",
                 "line_items": [{"id": (await store.client.get(
                     f"/orders/{oid}", headers=store.headers())).json()["line_items"][0]["id"],
                     "quantity": 2}]}
    refund = {"id": "adj_r", "type": "refund", "occurred_at": "2026-01-10T10:00:00Z",
              "status": "completed", "amount": -500}
    for update in ({"fulfillment": {"events": [delivered]}}, {"adjustments": [refund]}):
        answer = await store.client.put(f"/orders/{oid}", headers=store.headers(), json=update)
        assert answer.status_code == 200, answer.text
    await watcher.wait_for(oid, "Refunded", 5)
    assert watcher.actions(oid) == ["Placed", "Shipped", "Delivered", "Refunded"]
    shipment = watcher.instance(oid, "Shipped")
    assert shipment is not None and shipment["shipment"]["type"] == "shipped"
    assert watcher.instance(oid, "Delivered")["delivery"]["id"] == "evt_d"  # type: ignore[index]
    assert len(store.recorded) == 4  # placed, shipped, delivered, refunded: each once


# ------------------------------------------------------------------------- the demo


@pytest.mark.parametrize("version", ["2026-01-11", "2026-04-08"])
async def test_the_demo_takes_the_order_through_delivery(
    version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await demo.demo("atomic", None, None, 30.0, ucp_version=version)
    out = capsys.readouterr().out
    assert code == 0, out
    seen = re.findall(r"^\s+(\w+).* seen by the Platform$", out, re.MULTILINE)
    assert seen == ["Placed", "Shipped", "Delivered"], out
    assert out.index("Completed") < out.index("seen by the Platform") < out.index("Summary")


async def test_the_demo_has_no_order_stage_for_an_ending_without_an_order(
    capsys: pytest.CaptureFixture[str]
) -> None:
    code = await demo.demo("resilient", None, None, 30.0, outcome="declined")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "seen by the Platform" not in out and "UCPOrder" not in out


async def test_an_event_the_protocol_types_refuse_is_refused_for_good(
    receiver: Receiver,
) -> None:
    no_date = {"id": "adj_1", "type": "refund", "status": "completed"}  # occurred_at missing
    body = order_body(adjustments=[no_date])
    answer = await receiver.post(body, webhook(receiver, body))
    assert (answer.status_code, answer.json()["code"]) == (422, "invalid_body")  # no retry
    assert [r.code for r in receiver.proxy.refused] == ["invalid_body"]
    await receiver.watcher.wait_for("o1", "Placed", 5)
    assert receiver.watcher.actions("o1") == ["Placed"]
