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


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(main_echo(parser.parse_args().port))
    sys.exit(0)
