"""What the SyncServer benchmarks share: one UCP checkout's steps, request
bodies, the agents' HTTP client, a server process that says where it listens,
percentiles.

``bench/syncserver.py`` and ``bench/_scaleout.py`` both use it (neither imports
the other's module for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from syncserver.client import LeanClient

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL = ROOT / "protocols" / "atomic-ucp.lsh"
BASE = "/mas/bench/protocols/SimpleUCP/attempts"

# Bindings shaped like a real UCP checkout (see the traces in tests/fixtures/ucp).
LINE_ITEMS = [{"item": {"id": "bouquet_roses", "title": "Red Rose Bouquet"}, "quantity": 1}]
BUYER = {"full_name": "John Doe", "email": "john.doe@example.com"}


def steps(cid: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The four actions of one completed checkout: (agent, action, bindings)."""
    checkout = f"chk-{cid}"
    return [
        (
            "platform",
            "Create",
            {
                "cid": cid,
                "line_items": LINE_ITEMS,
                "currency": "USD",
                "buyer": BUYER,
                "payment_pref": {},
                "discount_codes": {"codes": []},
                "fulfillment_pref": {"methods": [{"type": "shipping"}]},
            },
        ),
        (
            "business",
            "Created",
            {
                "cid": cid,
                "Create": True,
                "id": checkout,
                "totals": [{"type": "subtotal", "amount": 3500}, {"type": "total", "amount": 3500}],
                "payment": {
                    "handlers": [{"id": "mock_payment_handler", "name": "dev.ucp.mock_payment"}]
                },
                "discounts": {"codes": [], "applied": []},
            },
        ),
        (
            "platform",
            "Complete",
            {
                "cid": cid,
                "Created": True,
                "id": checkout,
                "payment_data": {
                    "id": "instr_1",
                    "handler_id": "mock_payment_handler",
                    "type": "card",
                    "credential": {"type": "token", "token": "success_token"},
                },
                "risk_signals": {"ip": "127.0.0.1"},
            },
        ),
        (
            "business",
            "Completed",
            {
                "cid": cid,
                "Complete": True,
                "order": {
                    "id": f"order-{cid}",
                    "permalink_url": f"http://127.0.0.1:8182/orders/{cid}",
                },
            },
        ),
    ]


def body(*instances: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"instances": [{"action": a, "bindings": b} for a, b in instances]}


def encoded(payload: Any) -> bytes:
    """A request body as JSON, encoded ahead of a timed request (``content=``)."""
    return json.dumps(payload, separators=(",", ":")).encode()


def client(host: str, port: int, token: str | None = None) -> LeanClient:
    """The load generator's client: ``syncserver.client``'s lean one (keep-alive
    HTTP/1.1, ``syncserver/http1.py``), always, so that the client does not
    measure itself (httpx costs more CPU per request than the servers under test;
    ``open_client`` could pick it for a proxy the environment names). With a
    ``token``, every request carries it as the agent's bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return LeanClient(f"http://{host}:{port}", 30.0, headers)


@contextlib.asynccontextmanager
async def process(*args: str) -> AsyncIterator[tuple[str, int, int]]:
    """Start a server process; yields (host, port, pid) once it listens."""
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            if not line:
                err = await proc.stderr.read() if proc.stderr else b""
                raise RuntimeError(f"{args} failed: {err.decode()}")
            match = re.search(r"listening on http://([\d.]+):(\d+)", line)
            if match:
                yield match.group(1), int(match.group(2)), proc.pid
                break
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
