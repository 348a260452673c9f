"""The proxy's HTTP client, against real local servers: the lean client by
default, httpx when a transport or an environment proxy asks for it; what goes
on the wire, and what a request that cannot go gets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from peach import LocalExecutor
from strabo.proxy import ProxyAdapter, ProxyRequest, ProxyRequestError, ProxyUnreachable
from syncserver import SyncServer
from syncserver.client import HttpxClient, LeanClient
from syncserver.serving import free_port, serve
from tests.conftest import paper

SIMPLE = paper("atomic-ucp.lsh")
BINDINGS = {"cid": "c1", "line_items": [{"item": {"id": "roses"}, "quantity": 1}]}


class Merchant:
    """A merchant that records what it receives and echoes it back."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

        async def sessions(request: Request) -> JSONResponse:
            body = await request.body()
            self.seen.append(
                {"path": request.url.path, "headers": dict(request.headers), "body": body}
            )
            return JSONResponse({"id": "chk_1", "echo": await request.json()}, status_code=201)

        self.app = Starlette(
            routes=[
                Route("/checkout-sessions", sessions, methods=["POST"]),
                Route("/shop/v1/checkout-sessions", sessions, methods=["POST"]),
            ]
        )


def new_proxy(base_url: str, **options: Any) -> ProxyAdapter:
    server = SyncServer.embedded([SIMPLE], {"business": ["Business"]})
    proxy = ProxyAdapter(
        "business", SIMPLE, "Business", LocalExecutor(server), base_url=base_url,
        internal=["cid"], retries=0, **options,
    )
    proxy.route("Create->>Created", "POST-/checkout-sessions")
    return proxy


@asynccontextmanager
async def merchant() -> AsyncIterator[tuple[Merchant, str]]:
    shop = Merchant()
    async with serve(shop.app) as url:
        yield shop, url


async def test_the_lean_client_by_default_httpx_with_a_transport() -> None:
    async with merchant() as (_, url):
        async with new_proxy(url) as proxy:
            assert isinstance(proxy._client, LeanClient)
        async with new_proxy(url, transport=httpx.AsyncHTTPTransport()) as proxy:
            assert isinstance(proxy._client, HttpxClient)
            answer = await proxy.request("Create", BINDINGS, idempotency_key="k")
            assert answer["id"] == "chk_1"


async def test_an_environment_proxy_for_the_merchant_means_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    async with new_proxy("http://merchant.example") as proxy:
        assert isinstance(proxy._client, HttpxClient)
    monkeypatch.setenv("NO_PROXY", "merchant.example")
    async with new_proxy("http://merchant.example") as proxy:
        assert isinstance(proxy._client, LeanClient)


async def test_what_goes_on_the_wire() -> None:
    def hook(request: ProxyRequest) -> dict[str, str]:
        return {"UCP-Agent": 'profile="https://p.example"', "Request-Id": f"r-{request.attempt}"}

    async with merchant() as (shop, url), new_proxy(url + "/shop/v1/", header_hook=hook) as proxy:
        answer = await proxy.request("Create", BINDINGS, idempotency_key="key-1")
    [seen] = shop.seen
    assert seen["path"] == "/shop/v1/checkout-sessions"
    headers = seen["headers"]
    assert headers["idempotency-key"] == "key-1"
    assert headers["ucp-agent"] == 'profile="https://p.example"'
    assert headers["request-id"] == "r-1"
    assert headers["content-type"] == "application/json"
    assert answer["echo"] == {"line_items": BINDINGS["line_items"]}  # cid is internal


async def test_a_header_with_a_line_break_is_never_sent() -> None:
    def hook(request: ProxyRequest) -> dict[str, str]:
        return {"Request-Id": "r\r\nX-Smuggled: yes"}

    async with merchant() as (shop, url), new_proxy(url, header_hook=hook) as proxy:
        with pytest.raises(ProxyRequestError, match="cannot send the request"):
            await proxy.request("Create", BINDINGS, idempotency_key="k")
    assert shop.seen == []


async def test_a_base_url_changed_after_the_start_is_followed() -> None:
    async with merchant() as (first, url), merchant() as (second, other), new_proxy(url) as proxy:
        await proxy.request("Create", BINDINGS, idempotency_key="k1")
        proxy.base_url = other
        await proxy.request("Create", BINDINGS, idempotency_key="k2")
    assert [s["headers"]["idempotency-key"] for s in first.seen] == ["k1"]
    assert [s["headers"]["idempotency-key"] for s in second.seen] == ["k2"]


async def test_nobody_listening_is_no_answer() -> None:
    port = free_port()
    async with new_proxy(f"http://127.0.0.1:{port}") as proxy:
        refused = rf"no answer \(cannot connect to 127.0.0.1:{port}"
        with pytest.raises(ProxyUnreachable, match=refused):
            await proxy.request("Create", BINDINGS, idempotency_key="k")
