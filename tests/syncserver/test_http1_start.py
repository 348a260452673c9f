"""The lean client's ``start``: a request written before the call returns.

The server runs in a thread of its own (``http.server``), so that a test can
hold the client's event loop with a blocking wait and still see what arrived:
only bytes written inside ``start()`` can arrive while the loop is held.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from syncserver._places import Places
from syncserver.http1 import Client, TransportError
from syncserver.serving import free_port


class Server(ThreadingHTTPServer):
    daemon_threads = True
    arrived: threading.Event  # set by each request
    closed: threading.Event  # set when a connection told to close has closed
    close_after: bool  # close each connection after its answer (without saying so)
    hold: threading.Event  # a request waits for it before it is answered
    count: int


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.count += 1
        self.server.arrived.set()
        self.server.hold.wait(30)
        answer = b'{"echo":' + body + b"}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        self.wfile.flush()
        if self.server.close_after:
            self.close_connection = True

    def finish(self) -> None:
        super().finish()
        if self.close_connection:
            self.server.closed.set()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def threaded_server(close_after: bool = False) -> Iterator[tuple[str, Server]]:
    server = Server(("127.0.0.1", free_port()), Handler)
    server.arrived, server.closed, server.hold = (threading.Event() for _ in range(3))
    server.hold.set()
    server.close_after, server.count = close_after, 0
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.hold.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


async def test_start_writes_before_it_returns_on_a_kept_connection() -> None:
    with threaded_server() as (url, server):
        client = Client(url)
        assert not client.ready() and client.start("POST", "/x", content=b"1", headers={}) is None
        await client.request("POST", "/x", content=b"0")  # a connection, kept
        server.arrived.clear()
        assert client.ready()
        task = client.start("POST", "/x", content=b"2", headers={"X-Note": "n"})
        assert task is not None
        # The loop is held: only bytes written inside start() can have arrived.
        assert server.arrived.wait(10)
        response = await task
        assert response.status == 200 and response.json() == {"echo": 2}
        await client.aclose()
        assert client.start("POST", "/x", content=b"3", headers={}) is None  # closed


async def test_a_kept_connection_the_server_closed_is_replaced() -> None:
    """The server closed the kept connection, and the client has not read its
    end yet (the loop was held): the request written on it goes again, once,
    on a new connection."""
    with threaded_server(close_after=True) as (url, server):
        client = Client(url)
        await client.request("POST", "/x", content=b"0")
        assert server.closed.wait(10)  # closed; this loop has not seen it
        task = client.start("POST", "/x", content=b"1", headers={})
        assert task is not None
        assert (await task).json() == {"echo": 1}
        assert server.count == 2
        await client.aclose()


async def test_a_started_request_holds_its_place_until_answered_or_cancelled() -> None:
    with threaded_server() as (url, server):
        client = Client(url, timeout=5, max_connections=1)
        await client.request("POST", "/x", content=b"0")
        server.hold.clear()
        server.arrived.clear()
        task = client.start("POST", "/x", content=b"1", headers={})
        assert task is not None and not client.ready()
        await asyncio.get_running_loop().run_in_executor(None, server.arrived.wait, 10)
        # Its one place is taken: another request waits for it, within its timeout.
        client.timeout = 0.2
        with pytest.raises(TransportError, match="all 1 connections busy"):
            await client.request("POST", "/x", content=b"2")
        client.timeout = 5
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        server.hold.set()
        response = await client.request("POST", "/x", content=b"3")  # the place is back
        assert response.json() == {"echo": 3}
        await client.aclose()


async def test_places_are_handed_on_in_turn_and_never_lost() -> None:
    places = Places(1)
    assert places.take_now() and not places.take_now()
    first = asyncio.ensure_future(places.take())
    second = asyncio.ensure_future(places.take())
    await asyncio.sleep(0)  # both wait now
    assert not places.take_now()  # (not ahead of those waiting)
    places.give()  # to the first
    first.cancel()  # cancelled as it was handed the place: passed on to the second
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.wait_for(second, 5)
    places.give()
    assert places.free == 1 and places.take_now()
