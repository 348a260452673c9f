"""The read-only dashboard (``/ui``) and the endpoints it reads beyond the API.

The page is three static files (``syncserver/ui/``: HTML, JS, CSS, no build
step, no third-party code) that read the GET endpoints with a bearer token:
an agent's, or the configuration's viewer token (``[server] viewer_token``),
which reads every protocol of every MAS the server hosts and can attempt
nothing, since attempts and channels authenticate agents only. ``/ui`` is
served only with ``[server] dashboard = true``; the endpoints below (which MASes
a token reads, the last refusals, the figures) always are. docs/syncserver.md,
"Dashboard".

Every ``/ui`` answer carries a strict Content-Security-Policy (scripts and
connections to this origin only, no inline script or style), so a value an
agent bound that the page failed to escape could still run nothing.
"""

from __future__ import annotations

import hmac
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from syncserver._attempts import authorize, encode
from syncserver._figures import figures_of
from syncserver.config import VIEWER, AgentConfig
from syncserver.errors import ServiceError
from syncserver.server import SyncServer

#: The page's files: name -> media type. Nothing else under /ui is served.
FILES = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def _json(data: Any) -> Response:
    return Response(encode(data), media_type="application/json")


def _server(request: Request) -> SyncServer:
    server: SyncServer = request.app.state.served.server
    return server


def _token(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def is_viewer(server: SyncServer, token: str | None) -> bool:
    """Whether ``token`` is the configuration's viewer token (in constant time)."""
    viewer = server.config.viewer_token
    return viewer is not None and token is not None and hmac.compare_digest(
        viewer.encode(), token.encode()
    )


def reader(request: Request) -> AgentConfig:
    """Who reads: the agent the token names, or the viewer, who reads every
    protocol of the MAS (as an agent playing no role in each)."""
    server = _server(request)
    mas = request.path_params["mas"]
    if is_viewer(server, _token(request)):
        system = server.system(mas)
        return AgentConfig(VIEWER, "", {p: frozenset() for p in system.protocols})
    return authorize(server, mas, request.headers.get("authorization", ""))


def refuse_viewer(request: Request) -> None:
    """A clear answer for the viewer token where an agent is needed (a channel)."""
    if is_viewer(_server(request), _token(request)):
        raise ServiceError(
            403, "read-only", "the viewer token reads only: attempts need an agent's token"
        )


async def systems(request: Request) -> Response:
    """``GET /mas``: the MASes the token reads (the page's first question)."""
    server = _server(request)
    token = _token(request)
    if token is None:
        raise ServiceError(
            401, "unauthorized", "missing bearer token: send 'Authorization: Bearer <token>'"
        )
    viewer = is_viewer(server, token)
    names = [
        name
        for name, system in server.config.mas.items()
        if viewer or _agent_token(system.tokens, system.agents, token)
    ]
    if not names:
        raise ServiceError(401, "unauthorized", "this token is not valid here")
    return _json({"mas": names, "viewer": viewer})


def _agent_token(tokens: Any, agents: Any, token: str) -> bool:
    name = tokens.get(token)
    return name is not None and hmac.compare_digest(agents[name].token, token)


async def refusals(request: Request) -> Response:
    """``GET /mas/{mas}/refusals``: the last refused attempts, newest first;
    an agent sees its own, the viewer everyone's."""
    who = reader(request)
    mas = request.path_params["mas"]
    server = _server(request)
    # The token says who is the viewer: an agent may be named "(viewer)" too.
    viewer = is_viewer(server, _token(request))
    shown = figures_of(server).refusals(mas, None if viewer else who.name)
    return _json({"mas": mas, "refusals": shown})


async def stats(request: Request) -> Response:
    """``GET /mas/{mas}/stats``: attempts per second, latency, streams."""
    reader(request)
    mas = request.path_params["mas"]
    served = request.app.state.served
    system = _server(request).system(mas)
    presence = served.presence
    streams = {name: presence.streams(mas, name) for name in system.agents}
    return _json(
        {
            "mas": mas,
            **figures_of(served.server).stats(mas),
            "streams": sum(streams.values()) + presence.streams(mas, VIEWER),
            "agents_connected": sum(1 for n in streams.values() if n),
            "agents": len(system.agents),
        }
    )


def _load(name: str) -> bytes:
    return (resources.files("syncserver") / "ui" / name).read_bytes()


def routes(server: SyncServer) -> list[Route]:
    """The dashboard's endpoints; ``/ui`` only if the configuration enables it."""
    found = [
        Route("/mas", systems),
        Route("/mas/{mas}/refusals", refusals),
        Route("/mas/{mas}/stats", stats),
    ]
    figures_of(server)  # start counting
    if not server.config.dashboard:
        return found
    files = {name: _load(name) for name in FILES}  # read once: the wheel's copies

    async def page(request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        if name == "index.html" and "name" in request.path_params:
            # Its relative paths (ui/dashboard.js) resolve from /ui only.
            raise ServiceError(404, "not-found", "the page is /ui, not /ui/index.html")
        if name not in files:
            raise ServiceError(404, "not-found", f"no such file: /ui/{name}")
        return Response(files[name], media_type=FILES[name], headers=HEADERS)

    return [*found, Route("/ui", page), Route("/ui/{name}", page)]
