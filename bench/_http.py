"""A minimal keep-alive HTTP/1.1 client for load generation.

httpx spends more CPU per request than the servers under test, so it would
measure itself; this client only writes a prepared request and reads the
response by its Content-Length.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


class Connection:
    def __init__(self, host: str, port: int, token: str | None = None) -> None:
        self.host, self.port, self.token = host, port, token
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()

    def prepare(self, method: str, path: str, body: Any = None) -> bytes:
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        if self.token:
            headers.append(f"Authorization: Bearer {self.token}")
        if body is not None:
            headers += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        return ("\r\n".join(headers) + "\r\n\r\n").encode() + payload

    async def send(self, request: bytes) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.lower() == "content-length":
                length = int(value)
        body = await self.reader.readexactly(length) if length else b""
        return status, body

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, raw = await self.send(self.prepare(method, path, body))
        return status, json.loads(raw) if raw else None
