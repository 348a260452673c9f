"""MCP over stdio, where every line that is not a JSON-RPC message is answered.

The MCP SDK's stdio transport drops a line it cannot read (invalid JSON, an
array, ``{}``, ``"jsonrpc": "1.0"``): nothing goes back, and a client that sent
a request waits forever on its id. JSON-RPC 2.0 says what to answer instead:
``-32700`` (parse error) for text that is not JSON, ``-32600`` (invalid
request) for JSON that is not a message, with the request's id when it can be
read and ``null`` when it cannot. Here each line is checked before the SDK sees
it, and those answers go out on the SDK's own write stream, in turn with the
others.
"""

from __future__ import annotations

import asyncio
import codecs
import io
import json
import os
import stat
from collections.abc import AsyncIterator
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

__all__ = ["serve_stdio", "stdin_is_a_pipe"]


class _CheckedLines:
    """stdin's lines as the SDK reads them, less those that are not JSON-RPC
    messages: each of those is answered through ``answer`` instead."""

    def __init__(self, lines: Any) -> None:
        self.lines = lines
        self.answer: Any = None  # the SDK's write stream, once it exists

    def __aiter__(self) -> AsyncIterator[str]:
        return self._checked()

    async def _checked(self) -> AsyncIterator[str]:
        async for line in self.lines:
            if not line.strip():
                continue
            error = problem(line)
            if error is None:
                yield line
            elif self.answer is not None:
                await self.answer.send(SessionMessage(error))


def problem(line: str) -> types.JSONRPCError | None:
    """The JSON-RPC error answering ``line``, or None if it is a message."""
    try:
        data = json.loads(line)
    except ValueError as exc:
        return _error(None, types.PARSE_ERROR, f"Parse error: not JSON ({exc})")
    ident = data.get("id") if isinstance(data, dict) else None
    if not isinstance(ident, str | int) or isinstance(ident, bool):
        ident = None
    if isinstance(data, list):
        return _error(None, types.INVALID_REQUEST,
                      "Invalid Request: a batch (array); send one message per line")
    if not isinstance(data, dict):
        return _error(None, types.INVALID_REQUEST, "Invalid Request: not a JSON object")
    if data.get("jsonrpc") != "2.0":
        return _error(ident, types.INVALID_REQUEST,
                      f"Invalid Request: jsonrpc must be \"2.0\", not {data.get('jsonrpc')!r}")
    try:
        types.jsonrpc_message_adapter.validate_python(data, by_name=False)
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        return _error(ident, types.INVALID_REQUEST, f"Invalid Request: {first}")
    return None


def _error(ident: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=ident, error=types.ErrorData(code=code, message=message)
    )


def stdin_is_a_pipe() -> bool:
    """Whether fd 0 is a pipe or a socket, as when an MCP client starts the
    command (not a terminal or a file)."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def _pipe_lines(fd: int) -> AsyncIterator[str]:
    """The lines of pipe ``fd``, read by the event loop: a read that waits can be
    cancelled (a worker thread blocked in ``read`` cannot, so a stop would wait
    for the client's next line). Undecodable bytes are replaced, as before."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**31 - 1)  # lines of any length, as the SDK takes
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0))
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
    try:
        while line := await reader.readline():
            yield decode(line)
    finally:
        transport.close()


async def serve_stdio(server: Any) -> None:
    """Run ``server`` (an SDK ``Server``) on this process's stdin and stdout.
    Where stdin is a pipe, the loop reads it, so that cancelling the serving (a
    SIGTERM, ``strabo mcp``) ends it at once; a terminal or a file is read in a
    worker thread, as the SDK does."""
    # A duplicate of fd 0, read here: the SDK still points fd 1 at stderr while
    # serving, so stray prints miss the wire.
    if stdin_is_a_pipe():
        raw = None
        checked = _CheckedLines(_pipe_lines(os.dup(0)))
    else:
        raw = io.TextIOWrapper(os.fdopen(os.dup(0), "rb"), encoding="utf-8", errors="replace")
        checked = _CheckedLines(anyio.wrap_file(raw))
    try:
        async with stdio_server(stdin=cast(Any, checked)) as (read, write):
            checked.answer = write
            await server.run(read, write, server.create_initialization_options())
    finally:
        if raw is not None:
            raw.close()
