"""Fixtures: a real merchant on a loopback port, and a mock agent that takes webhooks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from strabo.merchant import Merchant, create_app, merchant_of
from strabo.serving import serve

from .shopper import Shopper

SIMULATION_SECRET = "sim-secret"


@dataclass
class Shop:
    """A running merchant: its URL, its state, and a shopper talking to it."""

    url: str
    merchant: Merchant
    client: httpx.AsyncClient
    shopper: Shopper


@pytest.fixture
async def shop() -> AsyncIterator[Shop]:
    """A fresh merchant (bundled catalog) served by uvicorn on a free port."""
    app = create_app(simulation_secret=SIMULATION_SECRET)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield Shop(url, merchant_of(app), client, Shopper(client))


@dataclass
class MockAgent:
    """An agent's profile (declaring a webhook) and the webhook events it received."""

    url: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def profile_url(self) -> str:
        return f"{self.url}/profile"

    @property
    def ucp_agent(self) -> str:
        """A UCP-Agent header naming this agent's profile."""
        return f'profile="{self.profile_url}"'


def _mock_agent_app(agent: MockAgent) -> Starlette:
    async def profile(request: Request) -> JSONResponse:
        capability = {
            "name": "dev.ucp.shopping.order",
            "version": "2026-01-11",
            "config": {"webhook_url": f"{agent.url}/webhook"},
        }
        return JSONResponse({"ucp": {"version": "2026-01-11", "capabilities": [capability]}})

    async def webhook(request: Request) -> JSONResponse:
        # Recorded the way the traces' mock agent did: "Content-Type", not "content-type".
        def title(name: str) -> str:
            return "-".join(part.capitalize() for part in name.split("-"))

        agent.events.append(
            {
                "path": request.url.path,
                "headers": {title(k): v for k, v in request.headers.items()},
                "body": await request.json(),
            }
        )
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[Route("/profile", profile), Route("/webhook", webhook, methods=["POST"])]
    )


@pytest.fixture
async def agent() -> AsyncIterator[MockAgent]:
    """A mock agent on its own port: ``/profile`` declares ``/webhook``, which records."""
    mock = MockAgent()
    async with serve(_mock_agent_app(mock)) as url:
        mock.url = url
        yield mock
