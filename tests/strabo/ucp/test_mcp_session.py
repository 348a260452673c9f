"""The MCP session a Business proxy holds (``strabo.ucp.mcp_transport.McpCheckout``)
through the SDK's client (``client="sdk"``, and any server that does not speak
MCP's stateless revision in plain JSON; test_mcp_lean.py has the lean path):
opened on the first call and reused by every later one (calls after the first
skip the lock and the timer, for speed), dropped when a call gets no answer, and
opened anew by the next call, against the bundled merchant at UCP 2026-04-08.
"""

from __future__ import annotations

from typing import Any

import pytest

from strabo import serve
from strabo.merchant import create_app
from strabo.ucp import versions
from strabo.ucp.mcp_transport import McpCheckout
from syncserver.client import NoAnswer

ARGUMENTS: dict[str, Any] = {
    # A profile nobody serves: the merchant answers 424, which is an answer.
    "meta": {"ucp-agent": {"profile": "http://127.0.0.1:9/profile.json"}},
    "id": "no-such-checkout",
}


async def test_a_session_is_reused_then_dropped_and_opened_anew() -> None:
    mcp = McpCheckout("", timeout=5, client="sdk")
    try:
        async with serve(create_app(ucp_version=versions.NEW)) as url:
            port = int(url.rsplit(":", 1)[1])
            mcp.endpoint = url + "/ucp/mcp"
            first = await mcp.call("get_checkout", ARGUMENTS)
            session = mcp._session
            assert session is not None and session.client is not None
            second = await mcp.call("get_checkout", ARGUMENTS)
            assert mcp._session is session  # the open session, reused
            assert first.status_code == second.status_code == 424, first.body
        with pytest.raises(NoAnswer):  # the merchant is gone
            await mcp.call("get_checkout", ARGUMENTS)
        assert mcp._session is None  # the broken session was dropped
        async with serve(create_app(ucp_version=versions.NEW), port=port):
            again = await mcp.call("get_checkout", ARGUMENTS)
            assert again.status_code == 424, again.body
            assert mcp._session is not None and mcp._session is not session
    finally:
        await mcp.aclose()
