"""The SyncServer's HTTP API (docs/syncserver.md describes every endpoint).

Every request but ``/health`` carries ``Authorization: Bearer <token>``; every
error is a JSON body (``syncserver.errors.error_json``: a code and a message)
with a fitting status. Finalized batches stream to agents as server-sent events,
resumable from any sequence number. The endpoints are module-level functions;
what they serve (the server, its limits, who is connected) is on the app
(``app.state.served``), set by :func:`create_app`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from langshaw import ABSENT
from syncserver import _dashboard
from syncserver._attempts import AttemptsEndpoint, Shortcut, encode
from syncserver._channel import EXTENSION, UPGRADE, Channel
from syncserver._presence import Presence
from syncserver._rawstream import HANDOVER, RawStream
from syncserver._rawstream import HEAD as RAW_HEAD
from syncserver._stream import EventStream
from syncserver.config import AgentConfig
from syncserver.errors import ServiceError, error_bytes, error_json, internal
from syncserver.ledger import Ledger
from syncserver.limits import Limits
from syncserver.server import SyncServer

log = logging.getLogger("strabo.syncserver")

DEFAULT_MAX_BODY = Limits.max_body
HEARTBEAT_SECONDS = 15.0
#: Longest query parameter value read (an enactment key, a number).
MAX_PARAM = 2000
#: A page of the log ends once its batches pass about this many bytes (it holds
#: one at least): the page is built whole here and read whole by the client,
#: which reads at most 64 MiB of an answer (``syncserver.http1.MAX_BODY``),
#: however large the batches a window of attempts makes.
LOG_PAGE_BYTES = 8 * 1024 * 1024


def _json(data: Any, status: int = 200) -> Response:
    return Response(encode(data), status_code=status, media_type="application/json")


@dataclass(frozen=True)
class _Served:
    """What the endpoints serve, kept on the app (``app.state.served``)."""

    server: SyncServer
    limits: Limits
    presence: Presence
    chunk: int  # the largest piece of an event written at once
    heartbeat: float


def _served(request: Request) -> _Served:
    served: _Served = request.app.state.served
    return served


def _caller(request: Request) -> AgentConfig:
    """The agent the token names, or the viewer (syncserver._dashboard), who
    reads every protocol and attempts nothing: only GET endpoints call this."""
    return _dashboard.reader(request)


async def health(request: Request) -> Response:
    served = _served(request)
    server = served.server
    presence = served.presence
    return _json({"status": "ok", "policy": server.policy, "streams": presence.total})


async def mas_info(request: Request) -> Response:
    served = _served(request)
    server = served.server
    agent = _caller(request)
    system = server.system(request.path_params["mas"])
    return _json(
        {
            "mas": system.name,
            "agent": agent.name,
            "roles": {p: sorted(r) for p, r in agent.roles.items()},
            "acts_for": agent.acts_for.describe(),
            "mandate": agent.mandate.describe(),  # the caller's own: others' stay private
            "protocols": list(system.protocols),
            "policy": server.policy,
        }
    )


async def agents(request: Request) -> Response:
    served = _served(request)
    server = served.server
    presence = served.presence
    _caller(request)  # any agent of the MAS may see who takes part in it
    system = server.system(request.path_params["mas"])
    return _json(
        {
            "mas": system.name,
            "agents": [
                {
                    "name": name,
                    "roles": {p: sorted(r) for p, r in config.roles.items()},
                    "acts_for": config.acts_for.describe(),
                    "url": config.url,
                    **presence.describe(system.name, name),
                }
                for name, config in sorted(system.agents.items())
            ],
        }
    )


def _ledger_for(request: Request) -> tuple[AgentConfig, Ledger]:
    served = _served(request)
    server = served.server
    agent = _caller(request)
    params = request.path_params
    return agent, server.ledger(params["mas"], params["protocol"], agent)


async def protocol_info(request: Request) -> Response:
    _, ledger = _ledger_for(request)
    protocol = ledger.protocol
    return _json(
        {
            "name": protocol.name,
            "roles": list(protocol.roles),
            "keys": list(protocol.keys),
            "root_keys": list(protocol.root_keys),
            "actions": {
                a.name: {"actor": a.actor, "attributes": list(a.attributes), "doc": a.doc}
                for a in protocol.actions.values()
            },
            "completion": [list(c) for c in protocol.completion],
            "last_seq": ledger.committed_seq,
            "enactments": len(ledger.state),
        }
    )


def _open_stream(request: Request, agent: AgentConfig, ledger: Ledger) -> None:
    """Count a stream (or channel) of ``agent``, within its bound."""
    served = _served(request)
    limits = served.limits
    presence = served.presence
    if presence.streams(ledger.mas, agent.name) >= limits.max_streams_per_agent:
        raise ServiceError(
            429,
            "too-many-streams",
            f"agent {agent.name!r} already holds {limits.max_streams_per_agent} event "
            "streams: close one first (one stream per protocol is enough for an agent)",
        )
    presence.opened(ledger.mas, agent.name, ledger.protocol.name)


async def events(request: Request) -> Response:
    served = _served(request)
    limits = served.limits
    presence = served.presence
    chunk = served.chunk
    heartbeat = served.heartbeat
    agent, ledger = _ledger_for(request)
    after = _int(request.query_params.get("after") or request.headers.get("last-event-id"), 0)
    mas, name = ledger.mas, ledger.protocol.name
    _open_stream(request, agent, ledger)
    hand_over = (request.scope.get("extensions") or {}).get(HANDOVER)
    if hand_over is not None:  # served by strabo's guard: written straight to the socket
        raw = RawStream(
            ledger,
            after,
            limits,
            heartbeat,
            lambda last: _lagging_frame(last, limits),
            on_close=lambda: presence.closed(mas, agent.name, name),
        )
        if not hand_over(raw, RAW_HEAD):  # the client left before the switch
            presence.closed(mas, agent.name, name)
        return Response(status_code=200)  # not sent: the connection is the stream's now
    stream = ledger.subscribe(after, max_bytes=limits.stream_backlog_bytes, heartbeat=heartbeat)
    return EventStream(
        stream,
        lambda: presence.closed(mas, agent.name, name),
        chunk=chunk,
        lagging=lambda last: _lagging_frame(last, limits),
    )


async def channel(request: Request) -> Response:
    served = _served(request)
    server = served.server
    limits = served.limits
    presence = served.presence
    heartbeat = served.heartbeat
    _dashboard.refuse_viewer(request)  # a channel carries attempts: agents only
    agent, ledger = _ledger_for(request)
    tokens = {t.strip().lower() for t in request.headers.get("connection", "").split(",")}
    if "upgrade" not in tokens or request.headers.get("upgrade", "").lower() != UPGRADE:
        raise ServiceError(
            426,
            "upgrade-required",
            f"a channel starts with 'Connection: Upgrade' and 'Upgrade: {UPGRADE}' "
            "(docs/syncserver.md); without them use .../events and .../attempts",
        )
    switch = (request.scope.get("extensions") or {}).get(EXTENSION)
    if switch is None:
        raise ServiceError(
            501,
            "channel-unsupported",
            "this server cannot hand a connection over to a channel (serve the app with "
            "uvicorn and syncserver.uvicorn_options, as strabo syncserver does); "
            "use .../events and .../attempts",
        )
    after = _int(request.query_params.get("after"), 0)
    mas, name = ledger.mas, ledger.protocol.name
    _open_stream(request, agent, ledger)
    handed = switch(
        Channel(
            server,
            ledger,
            agent,
            after,
            limits,
            heartbeat,
            lagging=lambda last: _lagging_frame(last, limits),
            on_attempt=presence.attempted,
            on_close=lambda: presence.closed(mas, agent.name, name),
        )
    )
    if not handed:  # the client left before the switch
        presence.closed(mas, agent.name, name)
    return Response(status_code=101)  # not sent: the connection is the channel's now


async def read_log(request: Request) -> Response:
    _, ledger = _ledger_for(request)
    after = _int(request.query_params.get("after"), 0)
    limit = min(_int(request.query_params.get("limit"), 500), 5000)
    batches = await ledger.read(after, limit)
    events: list[dict[str, Any]] = []
    size = 0
    for batch in batches:
        size += batch.frame_size()
        if events and size > LOG_PAGE_BYTES:
            break  # the client asks again after the last one it got
        events.append(batch.to_json())
    return _json({"events": events, "last_seq": ledger.committed_seq})


async def enactments(request: Request) -> Response:
    _, ledger = _ledger_for(request)
    offset = _int(request.query_params.get("offset"), 0)
    limit = min(_int(request.query_params.get("limit"), 100), 1000)
    state = ledger.state
    keys = ledger.protocol.root_keys
    # Skipped in C, never copied: the first pages cost the same at any history.
    page = [
        {"keys": dict(zip(keys, root, strict=True)), "complete": state.is_complete(root)}
        for root in itertools.islice(state.roots(), offset, offset + limit)
    ]
    return _json({"total": len(state), "offset": offset, "enactments": page})


async def enactment(request: Request) -> Response:
    _, ledger = _ledger_for(request)
    protocol = ledger.protocol
    keys = {}
    for key in protocol.root_keys:
        if key not in request.query_params:
            raise ServiceError(
                400,
                "bad-request",
                f"name the enactment by its root keys as query parameters: "
                f"?{'&'.join(k + '=...' for k in protocol.root_keys)}",
            )
        keys[key] = _param(request.query_params[key], key)
    root = tuple(keys.values())
    if ledger.state.enactment(root) is None:
        # A query string cannot say whether '7' is a string or an integer.
        alternative = tuple(_key_value(v) if isinstance(v, str) else str(v) for v in root)
        if ledger.state.enactment(alternative) is None:
            raise ServiceError(404, "unknown-enactment", f"no enactment with {keys}")
        root = alternative
        keys = dict(zip(protocol.root_keys, root, strict=True))
    page = _Page(request, protocol.root_keys)
    if page.role is not None and page.role not in protocol.roles:
        raise ServiceError(
            400,
            "bad-request",
            f"role={_param(page.role, 'role')!r}: {protocol.name} has the roles "
            f"{', '.join(protocol.roles)}",
        )
    batches, more = await ledger.store.enactment_page(
        ledger.mas, protocol, root, page.after, page.limit
    )
    shown = [{"seq": b.seq, **e.to_json()} for b in batches for e in b.entries]
    replica = await ledger.view(root)
    roles = [page.role] if page.role is not None else list(protocol.roles)
    enabled = {role: replica.enabled(role, root) for role in roles}
    return _json(
        {
            "keys": keys,
            "complete": ledger.state.is_complete(root),
            "instances": shown,
            # Where the next page starts; null on the last page.
            "next_after": batches[-1].seq if more and batches else None,
            "enabled": {
                role: [_enabled_json(e) for e in entries[: page.limit]]
                for role, entries in enabled.items()
            },
            "enabled_total": {role: len(entries) for role, entries in enabled.items()},
        }
    )


class _Page:
    """Paging of one enactment's answer: ``after`` (a batch's seq: the instances
    of later batches), ``limit`` (instances, and enabled actions per role) and
    ``role`` (only that role's enabled actions). A root key of the same name
    wins: the parameter then names the enactment, and the default applies."""

    def __init__(self, request: Request, root_keys: Sequence[str]) -> None:
        params = {k: v for k, v in request.query_params.items() if k not in root_keys}
        self.after = _int(params.get("after"), 0)
        self.limit = max(1, min(_int(params.get("limit"), 500), 5000))
        self.role = params.get("role")


def _enabled_json(e: Any) -> dict[str, Any]:
    return {
        "action": e.action.name,
        "keys": e.keys,
        "new_keys": list(e.new_keys),
        "fixed": {k: v for k, v in e.fixed.items() if v is not ABSENT},
        "absent": [k for k, v in e.fixed.items() if v is ABSENT],
        "to_bind": list(e.to_bind),
    }


async def service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    response = _json(exc.to_json(), exc.status)
    if headers:
        response.headers.update(headers)
    return response


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
    message = {
        404: f"no such endpoint: {request.method} {request.url.path} (see docs/syncserver.md)",
        405: f"{request.method} is not allowed on {request.url.path}",
    }.get(exc.status_code, str(exc.detail))
    return _json(error_json(code, message), exc.status_code)


async def unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return _json(internal(exc), 500)


def create_app(
    server: SyncServer,
    *,
    limits: Limits | None = None,
    max_body: int | None = None,
    heartbeat: float = HEARTBEAT_SECONDS,
    manage_lifespan: bool = True,
    fast_lane: bool | None = None,
) -> Starlette:
    """The Starlette app serving ``server``. With ``manage_lifespan`` the app
    starts and stops the server with its own lifespan. ``fast_lane`` (default:
    the configuration's ``[server] fast_lane``, on) lets the guarded protocol
    answer attempts itself (syncserver/_fastlane.py), past uvicorn's request cycle.

    ``limits`` default to the configuration's; the connection-level ones
    (timeouts, connection count) take effect only when uvicorn runs with
    ``syncserver.uvicorn_options(limits)``, as ``strabo syncserver`` does.
    """
    limits = (limits or server.config.limits).replace(max_body=max_body)
    presence = Presence()
    server.cache_tail(limits.log_cache_bytes)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_lifespan:
            await server.start()
        try:
            yield
        finally:
            if manage_lifespan:
                await server.stop()

    prefix = "/mas/{mas}/protocols/{protocol}"
    attempts = AttemptsEndpoint(server, limits.max_body, on_attempt=presence.attempted)
    app = Starlette(
        routes=[
            Route("/health", health),
            Route("/mas/{mas}", mas_info),
            Route("/mas/{mas}/agents", agents),
            Route(prefix, protocol_info),
            Route(prefix + "/attempts", attempts, methods=["POST"]),
            Route(prefix + "/events", events),
            Route(prefix + "/channel", channel),
            Route(prefix + "/log", read_log),
            Route(prefix + "/enactments", enactments),
            Route(prefix + "/enactment", enactment),
            *_dashboard.routes(server),
        ],
        exception_handlers={
            ServiceError: service_error,
            HTTPException: http_error,
            Exception: unexpected,
        },
        lifespan=lifespan,
        middleware=[Middleware(Shortcut, endpoint=attempts)],
    )
    app.state.served = _Served(server, limits, presence, max(limits.write_buffer, 4096), heartbeat)
    lane = server.config.fast_lane if fast_lane is None else fast_lane
    app.state.fast_lane = attempts if lane else None  # read by syncserver._guard
    return app


def _lagging_frame(last: int, limits: Limits) -> bytes:
    """The last event of a stream that fell behind: where to resume."""
    body = error_bytes(
        "lagging",
        f"this stream fell more than {limits.stream_backlog} batches or "
        f"{limits.stream_backlog_bytes} bytes behind and is closed; reconnect with "
        f"after={last} (or Last-Event-ID: {last}) to resume from the log",
        after=last,
    )
    return b"event: error\ndata: %s\n\n" % body


def _param(value: str, name: str) -> str:
    if len(value) > MAX_PARAM:
        raise ServiceError(
            400, "bad-request", f"{name} is {len(value)} characters long; at most {MAX_PARAM}"
        )
    return value


def _int(value: str | None, default: int) -> int:
    if value is None or value == "":
        return default
    _param(value, "the number")
    try:
        number = int(value)
    except ValueError:
        raise ServiceError(400, "bad-request", f"expected a whole number, not {value!r}") from None
    if not 0 <= number < 2**63:
        raise ServiceError(
            400, "bad-request", f"expected a number from 0 to 2**63 - 1, not {value!r}"
        )
    return number


def _key_value(text: str) -> Any:
    """Digits that round-trip as an integer, as an integer."""
    digits = text.removeprefix("-")
    if digits.isdigit() and len(digits) <= MAX_PARAM and str(int(text)) == text:
        return int(text)
    return text
