"""The servers a benchmark measures, each in its own process, same uvicorn settings."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

UVICORN = {"log_level": "warning", "access_log": False}


async def echo(request: Request) -> Response:
    """Parse the JSON body and send it back: the least a JSON endpoint does."""
    data = json.loads(await request.body())
    return Response(json.dumps(data, separators=(",", ":")), media_type="application/json")


def listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)
    return sock


async def main_echo(port: int) -> None:
    app = Starlette(routes=[Route("/echo", echo, methods=["POST"])])
    sock = listen(port)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(uvicorn.Config(app, **UVICORN)).serve(sockets=[sock])


async def main_relay(port: int) -> None:
    """A bare relay: each line from the first connection goes to the second.

    The least a process between two agents can do (no HTTP, no JSON, no
    protocol, no storage): what it costs is what a hop through any server
    process costs on this machine, wake-ups included."""
    peers: list[asyncio.StreamWriter] = []
    both = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer)
        if len(peers) == 2:
            both.set()
        await both.wait()
        if writer is peers[0]:
            while line := await reader.readline():
                peers[1].write(line)
        else:
            await reader.read()

    server = await asyncio.start_server(handle, sock=listen(port))
    print(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--relay", action="store_true", help="a bare line relay, not HTTP")
    args = parser.parse_args()
    asyncio.run(main_relay(args.port) if args.relay else main_echo(args.port))
    sys.exit(0)
