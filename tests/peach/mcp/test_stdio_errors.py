"""``strabo mcp`` over stdio answers every line that is not a JSON-RPC message
with the error JSON-RPC 2.0 requires, so that no client waits on an id forever
(the SDK's transport dropped them)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest

from peach.mcp._stdio import problem
from tests.conftest import PROTOCOLS
from tests.processes import ROOT

PURCHASE = str(PROTOCOLS / "purchase.lsh")

MALFORMED = [
    ("this is not JSON", None, -32700, "Parse error"),
    ('[{"jsonrpc": "2.0", "id": 9, "method": "ping"}]', None, -32600, "a batch"),
    ("{}", None, -32600, "jsonrpc must be \"2.0\""),
    ('{"jsonrpc": "1.0", "id": 7, "method": "ping"}', 7, -32600, "jsonrpc must be \"2.0\""),
    ('{"jsonrpc": "2.0", "id": "x", "params": {}}', "x", -32600, "Invalid Request"),
    ("42", None, -32600, "not a JSON object"),
]


@pytest.mark.parametrize(("line", "ident", "code", "says"), MALFORMED)
def test_each_kind_of_malformed_line_has_its_error(
    line: str, ident: Any, code: int, says: str
) -> None:
    error = problem(line)
    assert error is not None
    assert (error.id, error.error.code) == (ident, code) and says in error.error.message


def test_a_message_passes() -> None:
    assert problem('{"jsonrpc": "2.0", "id": 1, "method": "ping"}') is None
    assert problem('{"jsonrpc": "2.0", "method": "notifications/initialized"}') is None


async def test_strabo_mcp_answers_every_malformed_line_in_order() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "strabo.cli", "mcp", "--protocol", PURCHASE, "--role", "Buyer",
        "--embedded", cwd=ROOT, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None

    def send(line: str) -> None:
        assert process.stdin is not None
        process.stdin.write(line.encode() + b"\n")

    async def receive() -> dict[str, Any]:
        assert process.stdout is not None
        answer: dict[str, Any] = json.loads(await process.stdout.readline())
        return answer

    try:
        async with asyncio.timeout(30):  # the bug: a malformed line got no answer
            send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}))
            assert (await receive())["id"] == 1
            send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
            for line, ident, code, _ in MALFORMED:
                send(line)
                answer = await receive()
                assert answer["id"] == ident and answer["error"]["code"] == code, answer
            send('{"jsonrpc": "2.0", "id": 2, "method": "ping"}')  # and it goes on
            assert await receive() == {"jsonrpc": "2.0", "id": 2, "result": {}}
            process.stdin.close()
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
