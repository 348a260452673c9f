"""``strabo agent`` says what it waits for, and Ctrl-C is status 130."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from peach.llm.cli import idle_note
from syncserver import SyncServer
from tests.conftest import PROTOCOLS, ROOT


async def test_ctrl_c_stops_the_agent_with_status_130() -> None:
    """Ctrl-C once the agent says what it waits for (its handler is installed
    before that line). stderr is read all along, so that a child that writes much
    there cannot block, and a failure shows why the agent ended (it once ended
    before that line, and the test showed nothing). The 120 s are safety nets
    for a loaded machine (start-up and the SDK's import take seconds there)."""
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-test"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "strabo.cli", "agent", "--protocol", "purchase", "--role",
        "Seller", "--goal", "sell", "--embedded", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    errors = asyncio.create_task(process.stderr.read())
    try:
        seen = []
        while True:  # the line that says what the agent waits for, then Ctrl-C
            line = (await asyncio.wait_for(process.stdout.readline(), 120)).decode()
            if not line:
                await asyncio.wait_for(process.wait(), 120)
                err = (await errors).decode()
                raise AssertionError(
                    f"the agent ended (status {process.returncode}) before saying what it "
                    f"waits for; it printed:\n{''.join(seen)}{err}"
                )
            seen.append(line)
            if "seller plays Seller in Purchase; it acts when the protocol enables it" in line:
                break
        process.send_signal(signal.SIGINT)
        out = (await asyncio.wait_for(process.stdout.read(), 120)).decode()
        await asyncio.wait_for(process.wait(), 120)
        err = (await errors).decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        errors.cancel()
    assert process.returncode == 130, err
    assert "stopped: interrupted" in out and "Traceback" not in err, out + err


async def test_an_agent_with_nothing_enabled_says_so() -> None:
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    server = SyncServer.embedded([protocol], {"s": ["Seller"], "b": ["Buyer"]})
    seller = PeachAdapter("s", protocol, "Seller", LocalExecutor(server))
    buyer = PeachAdapter("b", protocol, "Buyer", LocalExecutor(server))
    async with seller, buyer:
        assert idle_note([seller], 30.4) == (
            "strabo agent: waited 30 s; nothing is enabled for Seller yet (the other agents "
            "have not acted)"
        )
        assert idle_note([buyer], 30) is None  # it may open an enactment: no note
