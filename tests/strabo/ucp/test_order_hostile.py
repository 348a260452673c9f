"""A hostile sender at the order proxy's webhook URL.

What it tries: bodies too large or too slow, keys the merchant's profile does
not list (each a fetch of the profile), algorithm confusion, duplicate headers,
replays (the same webhook twice at once, or under a new id), events out of
order and bodies of the wrong shape. The proxy, the merchant's profile and
the protocol's server are real, on loopback.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from peach import LocalExecutor
from strabo import serve
from strabo.ucp import order_proxy
from strabo.ucp.order_platform import OrderWatcher
from strabo.ucp.order_proxy import WEBHOOK_PATH, OrderProxy
from strabo.ucpwire import ap2 as jose
from strabo.ucpwire.signatures import sign_request
from syncserver import SyncServer
from tests.conftest import load

KEY = jose.generate_key()
ROLES = {"orders": ["Business"], "platform-orders": ["Platform"]}


@dataclass
class Merchant:
    """The merchant's profile (KEY as k1), counting its fetches; ``down`` makes it 500."""

    url: str = ""
    fetches: int = 0
    down: bool = False
    keys: list[tuple[Any, str]] = field(default_factory=lambda: [(KEY, "k1")])

    def app(self) -> Starlette:
        async def profile(request: Request) -> Response:
            self.fetches += 1
            if self.down:
                return PlainTextResponse("down", status_code=500)
            return JSONResponse({"ucp": {"version": "2026-04-08"},
                                 "signing_keys": [jose.public_jwk(k, kid)
                                                  for k, kid in self.keys]})
        return Starlette(routes=[Route("/.well-known/ucp", profile)])


@dataclass
class Receiver:
    url: str
    proxy: OrderProxy
    watcher: OrderWatcher
    merchant: Merchant
    client: httpx.AsyncClient
    profile: str = field(init=False)

    def __post_init__(self) -> None:
        self.profile = self.merchant.url + "/.well-known/ucp"

    def headers(self, body: bytes, key: jose.PrivateKey = KEY, kid: str = "k1",
                webhook_id: str | None = None) -> dict[str, str]:
        headers = {"content-type": "application/json",
                   "ucp-agent": f'profile="{self.profile}"',
                   "webhook-id": webhook_id or str(uuid.uuid4())}
        signed = sign_request("POST", self.url + WEBHOOK_PATH, headers, body, key, kid, created=0)
        return headers | {name.lower(): value for name, value in signed.items()}

    async def post(self, body: Any, headers: Any) -> httpx.Response:
        return await self.client.post(self.url + WEBHOOK_PATH, content=body, headers=headers)

    def attempts(self) -> int:
        return self.proxy.adapter.counters["attempts"]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    server = SyncServer.embedded([load("ucp-order.lsh")], ROLES)
    merchant = Merchant()
    async with serve(merchant.app()) as merchant_url:
        merchant.url = merchant_url
        proxy = OrderProxy(LocalExecutor(server), merchant_url, timeout=2, body_timeout=0.5)
        watcher = OrderWatcher(LocalExecutor(server))
        async with serve(proxy.app()) as url, proxy, watcher, \
                httpx.AsyncClient(timeout=10) as client:
            yield Receiver(url, proxy, watcher, merchant, client)


def order(oid: str = "o1", events: Any = (), **extra: Any) -> bytes:
    return json.dumps({
        "id": oid, "checkout_id": "chk_1", "permalink_url": f"http://m/orders/{oid}",
        "line_items": [{"id": "li_1", "quantity": {"total": 1, "fulfilled": 0}}],
        "totals": [{"type": "total", "amount": 100}],
        "fulfillment": {"events": list(events)}, **extra}).encode()


def event(kind: str, n: int = 1, **extra: Any) -> dict[str, Any]:
    return {"id": f"evt_{n}", "occurred_at": "2026-01-10T14:30:00Z", "type": kind,
            "line_items": [{"id": "li_1", "quantity": 1}], **extra}


# ------------------------------------------------------------------ size and time


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_a_huge_body_is_refused_unread(receiver: Receiver, framing: str) -> None:
    body = order(padding="x" * (2 * order_proxy.MAX_BODY))
    headers = receiver.headers(body)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 65536):
            yield body[start:start + 65536]

    try:
        answer = await receiver.post(body if framing == "content-length" else chunks(), headers)
    except httpx.WriteError:  # the proxy answered and closed before all was sent
        answer = None
    if answer is not None:
        assert (answer.status_code, answer.json()["code"]) == (413, "body_too_large")
    assert [r.code for r in receiver.proxy.refused] == ["body_too_large"]
    assert receiver.proxy.adapter.enactments() == []


async def test_a_body_that_never_comes_is_cut(receiver: Receiver) -> None:
    """Headers, ten bytes of a hundred, then nothing: the proxy answers 408."""
    host, port = receiver.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"POST {WEBHOOK_PATH} HTTP/1.1\r\nhost: {host}\r\n"
                 "content-type: application/json\r\ncontent-length: 100\r\n\r\n"
                 '{"id": "o1'.encode())
    await writer.drain()
    try:
        status = await asyncio.wait_for(reader.readline(), 5)
    finally:
        writer.close()
    assert status.split()[1] == b"408"
    assert [r.code for r in receiver.proxy.refused] == ["body_timeout"]


# ------------------------------------------------------------------- keys


async def test_made_up_key_ids_cost_one_fetch_of_the_profile(receiver: Receiver) -> None:
    """overview.md *Fetching*: a refresh for an unknown kid at most once per TTL floor."""
    for _ in range(5):
        body = order()
        answer = await receiver.post(body, receiver.headers(body, jose.generate_key(),
                                                            kid=str(uuid.uuid4())))
        assert (answer.status_code, answer.json()["code"]) == (401, "key_not_found")
    assert receiver.merchant.fetches == 1
    body = order()
    assert (await receiver.post(body, receiver.headers(body))).status_code == 200
    assert receiver.merchant.fetches == 1


async def test_a_failed_refresh_forgets_no_key(receiver: Receiver,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(order_proxy, "REFRESH_FLOOR", 0.0, raising=False)
    body = order()
    assert (await receiver.post(body, receiver.headers(body))).status_code == 200
    receiver.merchant.down = True
    body = order()
    answer = await receiver.post(body, receiver.headers(body, jose.generate_key(), kid="k9"))
    assert answer.json()["code"] == "key_not_found"
    body = order()
    answer = await receiver.post(body, receiver.headers(body))
    assert answer.status_code == 200, answer.text


async def test_a_key_the_merchant_withdrew_stops_verifying_once_the_keys_are_old(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key rotated out of the merchant's profile is trusted no longer than
    ``KEYS_TTL``, even when no signer names an unknown kid."""
    body = order()
    assert (await receiver.post(body, receiver.headers(body))).status_code == 200
    receiver.merchant.keys = [(jose.generate_key(), "k2")]  # k1 withdrawn
    body = order()
    assert (await receiver.post(body, receiver.headers(body))).status_code == 200  # still fresh
    monkeypatch.setattr(order_proxy, "KEYS_TTL", 0.0)
    monkeypatch.setattr(order_proxy, "REFRESH_FLOOR", 0.0)
    body = order()
    answer = await receiver.post(body, receiver.headers(body))
    assert (answer.status_code, answer.json()["code"]) == (401, "key_not_found")
    assert receiver.merchant.fetches == 2


def _detached(header: dict[str, Any], signature: bytes) -> str:
    return (jose.b64url(json.dumps(header).encode()) + ".." + jose.b64url(signature))


@pytest.mark.parametrize("alg", ["none", "HS256"])
async def test_no_algorithm_but_the_keys_own_is_accepted(receiver: Receiver, alg: str) -> None:
    """'none', or HS256 keyed with the public JWK (the classic confusion)."""
    body = order()
    header = {"alg": alg, "kid": "k1", "b64": False, "crit": ["b64"]}
    encoded = jose.b64url(json.dumps(header).encode())
    secret = json.dumps(jose.public_jwk(KEY, "k1")).encode()
    mac = hmac.new(secret, encoded.encode() + b"." + body, hashlib.sha256).digest()
    headers = {"content-type": "application/json", "ucp-agent": f'profile="{receiver.profile}"',
               "request-signature": _detached(header, b"x" if alg == "none" else mac)}
    answer = await receiver.post(body, headers)
    assert (answer.status_code, answer.json()["code"]) == (400, "algorithm_unsupported")
    # RFC 9421: an alg parameter naming HMAC changes nothing, the key's curve decides.
    signed = receiver.headers(body)
    signed["signature-input"] += ';alg="hmac-sha256"'
    answer = await receiver.post(body, signed)
    assert (answer.status_code, answer.json()["code"]) == (401, "signature_invalid")
    assert receiver.proxy.adapter.enactments() == []


async def test_duplicate_headers_are_read_as_verified(receiver: Receiver) -> None:
    body = order()
    headers = receiver.headers(body)
    appended = [*headers.items(), ("webhook-id", "forged")]
    assert (await receiver.post(body, appended)).status_code == 401  # the signed one is not it
    first = await receiver.post(body, headers)
    attempts = receiver.attempts()
    prepended = [("webhook-id", "forged"), *headers.items()]
    again = await receiver.post(body, prepended)
    assert first.status_code == again.status_code == 200
    assert receiver.attempts() == attempts == 1


# ------------------------------------------------------------ replays and order


async def test_the_same_webhook_twice_at_once_is_enacted_once(receiver: Receiver) -> None:
    body = order(events=[event("shipped")])
    headers = receiver.headers(body)
    answers = await asyncio.gather(*(receiver.post(body, headers) for _ in range(4)))
    assert [a.status_code for a in answers] == [200] * 4
    assert receiver.attempts() == 2
    await receiver.watcher.wait_for("o1", "Shipped", 5)
    assert receiver.watcher.actions("o1") == ["Placed", "Shipped"]


async def test_a_2026_01_11_replay_under_a_new_id_enacts_nothing_new(receiver: Receiver) -> None:
    """Its Webhook-Id is not signed: a new one passes, the protocol's state stops it."""
    body = order(events=[event("shipped")])
    headers = receiver.headers(body)
    old = {k: v for k, v in headers.items() if k.lower() not in ("signature", "signature-input")}
    assert (await receiver.post(body, old)).status_code == 200
    assert (await receiver.post(body, old | {"webhook-id": "new"})).status_code == 200
    assert receiver.attempts() == 2


async def test_delivered_before_shipped_enacts_both_in_order(receiver: Receiver) -> None:
    body = order(events=[event("delivered")])
    assert (await receiver.post(body, receiver.headers(body))).status_code == 200
    await receiver.watcher.wait_for("o1", "Delivered", 5)
    assert receiver.watcher.actions("o1") == ["Placed", "Shipped", "Delivered"]


async def test_a_shipment_after_a_cancellation_is_not_enacted(receiver: Receiver) -> None:
    body = order(events=[event("canceled")])
    assert (await receiver.post(body, receiver.headers(body))).status_code == 200
    body = order(events=[event("canceled"), event("shipped", 2)])
    assert (await receiver.post(body, receiver.headers(body))).status_code == 200
    await receiver.watcher.wait_for("o1", "Canceled", 5)
    assert receiver.watcher.actions("o1") == ["Placed", "Canceled"]


@pytest.mark.parametrize("shape", ["line without id", "fulfillment a list", "adjustments a number",
                                   "line items not objects"])
async def test_a_signed_body_of_the_wrong_shape_is_refused_not_a_crash(
    receiver: Receiver, shape: str
) -> None:
    if shape == "line without id":
        body = order(events=[event("delivered", line_items=[{"quantity": 1}])])
    elif shape == "fulfillment a list":
        body = order(fulfillment=[event("shipped")])
    elif shape == "adjustments a number":
        body = order(adjustments=5)
    else:
        body = order(events=[event("delivered")], line_items=["li_1"])
    answer = await receiver.post(body, receiver.headers(body))
    assert answer.status_code in (400, 422), answer.text
    assert answer.json()["code"] == "invalid_body"
