"""The peer's own HTTP/1.1 server (``peach.peer._app``), on a real socket.

It replaced uvicorn and Starlette for the two routes peers post to, so what they
did for it is tested here: keep-alive, requests answered one at a time and in
order (also when a client sends the next before the answer), the errors of a
request it will not read (each a JSON body, the connection closed), the bounds
in size and time, and a stop that lets the answer in hand go out. Nothing
sleeps: the tests wait on the socket (with timeouts) or on events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from peach.peer._app import MAX_BODY, MAX_HEAD, PeerServer
from syncserver.client import open_client

WAIT = 10.0  # seconds any one read may take before the test fails


class Recorder:
    """An endpoint that answers what it got, and notes how many ran at once."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str], bytes]] = []
        self.running = 0
        self.most = 0
        self.gate: asyncio.Event | None = None  # when set up, each call waits on it
        self.entered = asyncio.Event()

    async def __call__(
        self, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        self.running += 1
        self.most = max(self.most, self.running)
        self.entered.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(0)  # give a second request its chance to overlap
            self.calls.append((path, dict(headers), body))
            if body == b"boom":
                raise RuntimeError("the endpoint failed")
            return 200, {"path": path, "body": body.decode(), "n": len(self.calls)}
        finally:
            self.running -= 1


@pytest.fixture
async def served() -> AsyncIterator[tuple[PeerServer, Recorder, str]]:
    recorder = Recorder()
    server = PeerServer(recorder, timeout=WAIT)
    url = await server.start("127.0.0.1", None)
    try:
        yield server, recorder, url
    finally:
        await server.close()


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


def request(
    body: bytes = b"{}", path: str = "/peer/messages", method: str = "POST", extra: str = ""
) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: peer\r\nX-Strabo-Agent: buyer\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], Any]:
    """One response: status, headers (lower-case), JSON body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
    lines = head.decode("latin-1").split("\r\n")[:-2]
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), WAIT)
    return status, headers, json.loads(body)


async def closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1), WAIT) == b""


async def test_requests_on_one_connection_reach_the_endpoint_with_their_headers(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    _, recorder, url = served
    reader, writer = await connect(url)
    for n, path in enumerate(("messages", "flush"), start=1):
        writer.write(request(b'{"x":1}', f"/peer/{path}?ignored=1"))
        status, headers, body = await answer(reader)
        assert (status, body) == (200, {"path": path, "body": '{"x":1}', "n": n})
        assert headers["content-type"] == "application/json" and "connection" not in headers
    assert recorder.calls[0][1]["x-strabo-agent"] == "buyer"  # names lower-cased
    writer.close()


async def test_pipelined_requests_are_answered_one_at_a_time_in_order(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    _, recorder, url = served
    reader, writer = await connect(url)
    writer.write(b"".join(request(f'"{n}"'.encode()) for n in range(5)))
    for n in range(5):
        _, _, body = await answer(reader)
        assert body["body"] == f'"{n}"'
    assert recorder.most == 1
    writer.close()


async def test_the_projects_client_reads_its_answers(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    _, _, url = served
    client = open_client(url, 10.0)
    try:
        for n in range(3):  # kept alive: one connection for all
            response = await client.request(
                "POST", "/peer/messages", content=f'{{"n":{n}}}'.encode(), headers={"a": "b"}
            )
            assert response.status_code == 200 and response.json()["body"] == f'{{"n":{n}}}'
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        (request(method="GET"), 405, "method-not-allowed"),
        (request(path="/peer/other"), 404, "not-found"),
        (request(path="/elsewhere/messages"), 404, "not-found"),
        (request(extra="Transfer-Encoding: chunked\r\n"), 411, "length-required"),
        (request(extra="Content-Length: 2\r\n"), 400, "bad-request"),  # two lengths
        (b"POST /peer/messages HTTP/1.1\r\nContent-Length: x1\r\n\r\n", 400, "bad-request"),
        (b"NOT HTTP AT ALL\r\n\r\n", 400, "bad-request"),
        (b"POST /peer/messages HTTP/1.1\r\nno colon here\r\n\r\n", 400, "bad-request"),
        (
            f"POST /peer/messages HTTP/1.1\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode(),
            413,
            "too-large",
        ),
        (b"POST /peer/messages HTTP/1.1\r\nX: " + b"a" * MAX_HEAD, 431, "head-too-large"),
    ],
)
async def test_a_request_it_will_not_read_is_answered_and_the_connection_closed(
    served: tuple[PeerServer, Recorder, str], data: bytes, status: int, code: str
) -> None:
    _, recorder, url = served
    reader, writer = await connect(url)
    writer.write(data)
    got, headers, body = await answer(reader)
    assert (got, body["error"]["code"]) == (status, code)
    assert headers["connection"] == "close"
    assert await closed(reader)
    assert recorder.calls == []  # (a 413 before its body was even sent)
    writer.close()


async def test_a_client_that_waits_for_100_continue_gets_it(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    _, _, url = served
    reader, writer = await connect(url)
    writer.write(request(b'{"big":1}', extra="Expect: 100-continue\r\n").split(b"\r\n\r\n")[0])
    writer.write(b"\r\n\r\n")
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b'{"big":1}')
    status, _, body = await answer(reader)
    assert (status, body["body"]) == (200, '{"big":1}')
    writer.close()


async def test_http_1_0_and_connection_close_are_answered_then_closed(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    _, _, url = served
    for data in (
        request().replace(b"HTTP/1.1", b"HTTP/1.0", 1),
        request(extra="Connection: close\r\n"),
    ):
        reader, writer = await connect(url)
        writer.write(data)
        status, headers, _ = await answer(reader)
        assert (status, headers["connection"]) == (200, "close")
        assert await closed(reader)
        writer.close()


async def test_an_endpoint_that_fails_is_a_500_and_the_server_serves_on(
    served: tuple[PeerServer, Recorder, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, _, url = served
    reader, writer = await connect(url)
    writer.write(request(b"boom"))
    status, _, body = await answer(reader)
    assert (status, body["error"]["code"]) == (500, "internal")
    assert await closed(reader)
    assert "a peer endpoint failed" in caplog.text
    reader, writer = await connect(url)
    writer.write(request())
    assert (await answer(reader))[0] == 200
    writer.close()


async def test_a_request_that_does_not_arrive_in_time_is_a_408_and_an_idle_connection_closes() -> (
    None
):
    server = PeerServer(Recorder(), timeout=0.2)
    url = await server.start("127.0.0.1", None)
    try:
        reader, writer = await connect(url)
        writer.write(request(b'{"x":1}')[:-3])  # the body's end never comes
        status, _, body = await answer(reader)
        assert (status, body["error"]["code"]) == (408, "request-timeout")
        assert await closed(reader)
        reader, writer = await connect(url)
        writer.write(request())
        assert (await answer(reader))[0] == 200
        assert await closed(reader)  # then nothing: closed once idle for the timeout
        writer.close()
    finally:
        await server.close()


async def test_closing_lets_the_answer_in_hand_go_out(
    served: tuple[PeerServer, Recorder, str],
) -> None:
    server, recorder, url = served
    recorder.gate = asyncio.Event()
    idle_reader, idle_writer = await connect(url)
    reader, writer = await connect(url)
    writer.write(request(b'"last"'))
    await asyncio.wait_for(recorder.entered.wait(), WAIT)
    closing = asyncio.ensure_future(server.close())
    assert await closed(idle_reader)  # an idle connection closes at once
    recorder.gate.set()
    status, headers, body = await answer(reader)
    assert (status, body["body"], headers["connection"]) == (200, '"last"', "close")
    assert await closed(reader)
    await asyncio.wait_for(closing, WAIT)
    with pytest.raises(OSError):
        await connect(url)  # no longer listening
    idle_writer.close()
    writer.close()
