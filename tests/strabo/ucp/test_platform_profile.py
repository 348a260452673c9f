"""The Platform profile the UCP proxies name in ``UCP-Agent`` (strabo.ucp.profile).

A merchant fetches the profile a request names; one serving 2026-04-08 reads
the platform's version and capabilities from it and refuses a request whose
profile it cannot fetch. The proxies used to name ``https://strabo.example/profile``,
which nobody serves; now each serves its own on loopback while it runs (or
names a public URL it is given), in the version it speaks. Real parts: the
bundled merchant and the proxy's profile server over HTTP on loopback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from peach import LocalExecutor
from strabo import serve
from strabo.merchant import create_app, merchant_of
from strabo.proxy import ProxyRequest
from strabo.ucp import versions
from strabo.ucp.ap2 import Ap2Signer
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.checkout import ucp_header_hook
from strabo.ucp.incremental_platform import incremental_platform
from strabo.ucp.incremental_proxy import incremental_proxy
from strabo.ucp.profile import CACHE_CONTROL, platform_profile
from strabo.ucpwire import ap2 as jose
from syncserver import SyncServer
from tests.conftest import load

OLD, NEW = versions.OLD, versions.NEW
ROLES = {"platform": ["Platform"], "business": ["Business"]}
CHECKOUT = "dev.ucp.shopping.checkout"
USED = {CHECKOUT: None, "dev.ucp.shopping.fulfillment": CHECKOUT,
        "dev.ucp.shopping.discount": CHECKOUT}


def signer() -> Ap2Signer:
    return Ap2Signer(jose.generate_key(), kid="buyer-1", profile_url="https://p.example/p",
                     max_amount=100)


# ------------------------------------------------------------------ the document


def test_the_2026_04_08_profile_has_what_the_platform_schema_requires() -> None:
    document = platform_profile(NEW)
    ucp = document["ucp"]
    assert ucp["version"] == NEW
    [service] = ucp["services"]["dev.ucp.shopping"]
    assert service["transport"] == "rest" and {"version", "spec", "schema"} <= set(service)
    assert {name: entries[0].get("extends") for name, entries in ucp["capabilities"].items()} \
        == USED
    for [entry] in ucp["capabilities"].values():
        assert entry["version"] == NEW
        assert entry["spec"].startswith(f"https://ucp.dev/{NEW}/specification/")
        assert entry["schema"].startswith(f"https://ucp.dev/{NEW}/schemas/shopping/")
    assert ucp["payment_handlers"] == {}
    assert "signing_keys" not in document


def test_the_2026_01_11_profile_lists_its_capabilities() -> None:
    document = platform_profile(OLD)
    assert document["ucp"]["version"] == OLD
    assert {c["name"]: c.get("extends") for c in document["ucp"]["capabilities"]} == USED
    assert all(c["version"] == OLD and c["spec"].startswith("https://ucp.dev/specification/")
               for c in document["ucp"]["capabilities"])
    assert document["payment"] == {"handlers": []}


@pytest.mark.parametrize("version", [OLD, NEW])
def test_a_signer_adds_ap2_and_its_key_and_more_can_be_declared(version: str) -> None:
    principal = signer()
    order = {"dev.ucp.shopping.order": {"config": {"webhook_url": "https://p.example/hook"}}}
    document = platform_profile(version, signer=principal, declared=order)
    assert document["signing_keys"] == [principal.public_jwk()]
    assert jose.advertised(document) is not None  # as Ap2Signer.profile declares it
    assert jose.advertised(principal.profile(version)) is not None
    listed = document["ucp"]["capabilities"]
    named = (listed if version == NEW
             else {c["name"]: [c] for c in listed})
    assert named[jose.CAPABILITY][0]["extends"] == CHECKOUT
    assert named["dev.ucp.shopping.order"][0]["config"] == {"webhook_url": "https://p.example/hook"}
    with pytest.raises(ValueError, match="version must be"):
        platform_profile("2026-01-23")


def test_the_header_hook_names_no_unfetchable_profile() -> None:
    request = ProxyRequest("Create", "POST", "http://m/checkout-sessions", {}, "k", 1)
    assert "strabo.example" not in ucp_header_hook(request)["UCP-Agent"]


# ------------------------------------------------------------ served by the proxy


def executor(protocol: str = "atomic-ucp.lsh") -> LocalExecutor:
    return LocalExecutor(SyncServer.embedded([load(protocol)], ROLES))


def request() -> ProxyRequest:
    return ProxyRequest("Create", "POST", "http://m/checkout-sessions", {}, "k", 1)


async def test_a_running_proxy_serves_its_profile_over_http() -> None:
    proxy = business_proxy(executor(), "http://127.0.0.1:9", ucp_version=NEW)
    assert proxy.profile_url is None
    async with proxy:
        url = proxy.profile_url
        assert url is not None and url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as client:
            answer = await client.get(url)
        assert answer.status_code == 200
        assert answer.json() == proxy.profile() == platform_profile(NEW)
        assert answer.headers["cache-control"] == CACHE_CONTROL
        assert proxy.header_hook is not None
        assert proxy.header_hook(request())["UCP-Agent"] == f'profile="{url}"'
    assert proxy.profile_url is None
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(url)


async def test_a_public_profile_url_is_named_and_nothing_is_served() -> None:
    proxy = business_proxy(executor(), "http://127.0.0.1:9")
    proxy.platform_profile = "https://platform.example/ucp-profile"
    async with proxy:
        assert proxy.profile_url == "https://platform.example/ucp-profile"
        assert proxy._profile_site.url is None
        assert proxy.header_hook is not None
        assert proxy.header_hook(request())["UCP-Agent"] == (
            'profile="https://platform.example/ucp-profile"; version="2026-01-11"')


async def test_an_ap2_signer_keeps_naming_its_own_profile() -> None:
    principal = signer()
    proxy = business_proxy(executor(), "http://127.0.0.1:9", ap2=principal)
    async with proxy:
        assert proxy.header_hook is not None
        agent = proxy.header_hook(request())["UCP-Agent"]
        assert agent.startswith(f'profile="{principal.profile_url}"')
        assert proxy.profile()["signing_keys"] == [principal.public_jwk()]


@asynccontextmanager
async def merchant(version: str) -> AsyncIterator[tuple[str, Any]]:
    app = create_app(ucp_version=version)
    async with serve(app) as url:
        yield url, merchant_of(app)


@pytest.mark.parametrize("version", [OLD, NEW])
async def test_the_merchant_fetches_the_proxys_profile_and_logs_no_error(
        version: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="strabo.merchant")
    async with merchant(version) as (url, shop):
        ex = executor("incremental-ucp.lsh")
        proxy = incremental_proxy(ex, url)
        platform, done = incremental_platform(ex)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 20)
            await platform.drain()
            assert proxy.ucp_version == version
            assert proxy._profile_site.fetches >= 1  # the merchant read it
            [session] = shop.checkouts()
            assert session.status == "completed"
            # What the merchant negotiates with it: every capability the proxy uses.
            async with httpx.AsyncClient(base_url=url) as client:
                answer = await client.get(f"/checkout-sessions/{session.id}", headers={
                    "UCP-Agent": f'profile="{proxy.profile_url}"', "Request-Id": "r",
                    "Request-Signature": "s"})
        assert answer.status_code == 200, answer.text
        capabilities = answer.json()["ucp"]["capabilities"]
        if version == NEW:
            assert set(capabilities) == set(USED)
    problems = [r.getMessage() for r in caplog.records
                if r.name == "strabo.merchant" and ("profile" in r.getMessage()
                                                    or r.levelno >= logging.WARNING)]
    assert problems == []
