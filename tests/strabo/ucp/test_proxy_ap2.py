"""AP2 mandates end to end: a Business proxy presents its principal's mandate.

Real servers on loopback: the bundled merchant with AP2 on (``create_app(ap2=
True)``), behind a recorder of the complete requests it gets; the principal's
Platform profile (``Ap2Signer.profile``) on its own port; an embedded
SyncServer with the sample Platform agents and Business proxies.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from peach import LocalExecutor
from strabo import serve
from strabo.merchant import create_app, merchant_of
from strabo.ucp.ap2 import Ap2Signer, MandateRefused
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.platform_agent import platform_agent
from strabo.ucp.resilient_platform import ResilientPlatform
from strabo.ucp.resilient_proxy import resilient_proxy
from strabo.ucpwire import NEW, OLD
from strabo.ucpwire import ap2 as jose
from syncserver import SyncServer
from tests.conftest import load

ROLES = {"platform": ["Platform"], "business": ["Business"]}
ASGI = Callable[..., Awaitable[None]]


class Completes:
    """The merchant app, recording the JSON body of every ``/complete`` it gets."""

    def __init__(self, app: ASGI) -> None:
        self.app = app
        self.bodies: list[Any] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/complete"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        self.bodies.append(json.loads(raw) if raw else None)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app(scope, replay, send)


@asynccontextmanager
async def principal(max_amount: int, version: str) -> AsyncIterator[Ap2Signer]:
    """A principal's signer, its profile published on a loopback port."""
    holder: dict[str, Ap2Signer] = {}

    async def profile(request: Any) -> JSONResponse:
        return JSONResponse(holder["signer"].profile(version))

    async with serve(Starlette(routes=[Route("/platform", profile)])) as url:
        holder["signer"] = Ap2Signer(jose.generate_key(), kid="buyer-1",
                                     profile_url=f"{url}/platform", max_amount=max_amount)
        yield holder["signer"]


async def resilient_checkout(merchant: Any, signer: Ap2Signer, version: str
                             ) -> tuple[ResilientPlatform, Completes]:
    """One ResilientUCP checkout through the proxy with ``signer``."""
    recorder = Completes(merchant)
    server = SyncServer.embedded([load("resilient-ucp.lsh")], ROLES)
    executor = LocalExecutor(server)
    async with serve(recorder) as url:
        proxy = resilient_proxy(executor, url, ucp_version=version, ap2=signer)
        proxy.backoff = 0.01
        agent = ResilientPlatform(executor)
        async with proxy, agent:
            await asyncio.wait_for(agent.done.wait(), 20)
            await agent.drain()
    return agent, recorder


@pytest.mark.parametrize("version", [OLD, NEW])
async def test_the_proxy_presents_the_principals_mandate_and_the_checkout_completes(
        version: str) -> None:
    merchant = create_app(ap2=True, ucp_version=version)
    async with principal(10**9, version) as signer:
        agent, recorder = await resilient_checkout(merchant, signer, version)
    assert agent.outcome is not None and agent.outcome.name == "Completed", agent.outcome
    [order] = merchant_of(merchant).orders()
    assert agent.outcome["order"]["id"] == order.id
    [body] = recorder.bodies
    mandate = body["ap2"]["checkout_mandate"]
    verified = jose.read_mandate(mandate, lambda kid: jose.key_from_jwk(signer.public_jwk()))
    assert verified.kid == "buyer-1" and verified.checkout["id"] == order.checkout_id
    assert verified.checkout["ap2"]["merchant_authorization"]  # what the merchant signed
    if version == NEW:
        assert verified.checkout["ucp"]["version"] == NEW  # as sent, not translated


async def test_over_the_principals_limit_the_proxy_refuses_locally() -> None:
    merchant = create_app(ap2=True)
    async with principal(1, OLD) as signer:
        agent, recorder = await resilient_checkout(merchant, signer, OLD)
    assert agent.outcome is not None and agent.outcome.name == "Declined"
    [message] = agent.outcome["messages"]
    assert message["code"] == "mandate_limit_exceeded"
    assert message["severity"] == "requires_buyer_input"
    assert "over the principal's limit of 1 USD" in message["content"]
    assert recorder.bodies == []  # nothing was sent to the merchant
    shop = merchant_of(merchant)
    assert shop.orders() == [] and shop.checkouts()[-1].status == "ready_for_complete"


async def test_a_merchant_without_ap2_gets_no_mandate() -> None:
    merchant = create_app()
    async with principal(1, OLD) as signer:  # limits matter only for a mandate
        agent, recorder = await resilient_checkout(merchant, signer, OLD)
    assert agent.outcome is not None and agent.outcome.name == "Completed"
    [body] = recorder.bodies
    assert "ap2" not in body


async def test_simple_ucp_escalates_a_refused_mandate() -> None:
    """SimpleUCP gives the Business no action for a failed Complete: the local
    refusal is an escalation, as any other failure of it."""
    merchant = create_app(ap2=True)
    recorder = Completes(merchant)
    executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
    async with principal(1, OLD) as signer, serve(recorder) as url:
        proxy = business_proxy(executor, url, ucp_version=OLD, ap2=signer)
        platform, _ = platform_agent(executor)
        async with proxy, platform:
            await asyncio.wait_for(proxy.escalated.wait(), 20)
    [escalation] = proxy.escalations
    assert escalation.action == "Complete" and escalation.attempts == 1
    assert escalation.error["code"] == "mandate_limit_exceeded"
    assert recorder.bodies == [] and merchant_of(merchant).orders() == []


def test_the_signer_checks_its_key_and_keeps_it_out_of_its_repr() -> None:
    key = jose.generate_key()
    signer = Ap2Signer(key, kid="k", profile_url="https://p.example/profile", max_amount=5)
    assert "k" in repr(signer) and "private" not in repr(signer).lower()
    with pytest.raises(TypeError):
        Ap2Signer("not a key", kid="k", profile_url="u", max_amount=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Ap2Signer(key, kid="k", profile_url="u", max_amount=-1)
    from cryptography.hazmat.primitives import serialization

    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    again = Ap2Signer.from_pem(pem, kid="k", profile_url="u", max_amount=5)
    assert again.public_jwk() == signer.public_jwk()


def test_limits_name_each_breach() -> None:
    signer = Ap2Signer(jose.generate_key(), kid="k", profile_url="u", max_amount=100,
                       merchants=["https://shop.example"])
    checkout = {"id": "c", "currency": "EUR", "totals": [{"type": "total", "amount": 500}]}
    problems = signer.limits.breaches(checkout, "https://other.example")
    assert len(problems) == 3
    assert signer.limits.breaches({**checkout, "currency": "USD",
                                   "totals": [{"type": "total", "amount": 100}]},
                                  "https://shop.example/") == []
    assert MandateRefused("x").code == "mandate_limit_exceeded"
