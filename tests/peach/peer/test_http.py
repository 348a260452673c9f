"""Peers over real HTTP load no web framework: the endpoint is their own server.

uvicorn and Starlette were most of a peer round trip's time; an agent now
serves its endpoint with ``peach.peer._app`` and posts with the lean client.
Run in a process of its own, so that what other tests imported does not count.
"""

from __future__ import annotations

import subprocess
import sys

from tests.processes import ROOT

CODE = """
import asyncio, socket, sys
from peach import PeachAdapter
from peach.peer import Directory, PeerExecutor
from tests.conftest import SIMPLE_CREATE, SIMPLE_CREATED, load

SIMPLE = load("atomic-ucp.lsh")

def url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"

async def main():
    roles = Directory.of([SIMPLE], {
        "platform": {"roles": ["Platform"], "token": "p", "url": url()},
        "business": {"roles": ["Business"], "token": "b", "url": url()},
    })
    platform_ex, business_ex = (PeerExecutor(a, roles) for a in ("platform", "business"))
    platform = PeachAdapter("platform", SIMPLE, "Platform", platform_ex)
    business = PeachAdapter("business", SIMPLE, "Business", business_ex)
    done = asyncio.Event()
    platform.listeners.append(lambda batch, newly: done.set())

    @business.on_enabled("Created")
    async def answer(feasible):
        await business.attempt([feasible.bind(id="chk", **SIMPLE_CREATED)])

    async with platform, business:
        [create] = await platform.attempt([platform.build_action("Create", SIMPLE_CREATE)])
        while len(platform.history(create.keys)) < 2:
            done.clear()
            await asyncio.wait_for(done.wait(), 30)
        print([i.name for _, i, _ in platform.history(create.keys)])
    print(sorted({m.split(".")[0] for m in sys.modules} & {"starlette", "uvicorn", "h11"}))

asyncio.run(main())
"""


def test_peers_over_http_load_no_web_framework() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["['Create', 'Created']", "[]"]
