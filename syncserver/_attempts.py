"""``POST /mas/{mas}/protocols/{protocol}/attempts``, the SyncServer's busiest endpoint.

Served as plain ASGI, in front of Starlette's routing: profiled under the proxy
benchmark (2026-11-23), Starlette's routing, ``Request`` and ``Response`` took
about a third of the server's CPU per attempt, more than checking and
committing the attempt. The endpoint's behaviour is the one docs/syncserver.md
describes, errors included; any other request goes on to the Starlette app.

Served by ``strabo syncserver`` (the guarded uvicorn protocol), most attempts
never become ASGI at all: the guard's fast lane (syncserver/_fastlane.py) reads
them off the socket and calls the same two steps, :meth:`AttemptsEndpoint.admit`
and :meth:`AttemptsEndpoint.finish`, whose :class:`Answer` it writes itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from syncserver._figures import counted
from syncserver.config import AgentConfig
from syncserver.errors import Rejected, ServiceError, describe, error_bytes, internal
from syncserver.ledger import Ledger
from syncserver.server import SyncServer
from syncserver.wire import AttemptIn

log = logging.getLogger("strabo.syncserver")

_PATH = re.compile(r"/mas/([^/]+)/protocols/([^/]+)/attempts")


def route(path: str) -> tuple[str, str] | None:
    """(mas, protocol) when ``path`` (percent-decoded, as in an ASGI scope) is
    this endpoint's; the one test both lanes make."""
    match = _PATH.fullmatch(path)
    return None if match is None else (match.group(1), match.group(2))


def encode(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()


def authorize(server: SyncServer, mas: str, header: str) -> AgentConfig:
    """The agent an ``Authorization`` header names."""
    scheme, _, token = header.partition(" ")
    if header and scheme.lower() != "bearer":
        raise ServiceError(401, "unauthorized", "use 'Authorization: Bearer <token>'")
    return server.authenticate(mas, token.strip() or None)


def check_content_type(kind: str | None) -> None:
    """A body labelled as something else is refused rather than guessed at."""
    if kind is None:
        return
    media = kind.partition(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise ServiceError(
            415,
            "unsupported-media-type",
            f"the body must be JSON, sent as 'Content-Type: application/json', not {kind!r}",
        )


async def answer(
    server: SyncServer, mas: str, protocol: str, agent: AgentConfig, body: bytes
) -> dict[str, Any]:
    """Finalize the attempt ``body`` holds; the answer's JSON."""
    try:
        parsed = AttemptIn.model_validate_json(body)
    except ValidationError as exc:
        code, message = describe(exc)
        raise ServiceError(400, code, message) from None
    return await finalize(server, mas, protocol, agent, parsed)


async def finalize(
    server: SyncServer,
    mas: str,
    protocol: str,
    agent: AgentConfig,
    parsed: AttemptIn,
    others: bool = False,
) -> dict[str, Any]:
    """Finalize a parsed attempt (from a POST or, with ``others``, a channel);
    the answer's JSON."""
    # NaN, Infinity, 1e400 (not JSON, not re-sendable): SyncServer.attempt
    # refuses them, as for an in-process attempt.
    figures = counted(server)  # the dashboard's counters and refusals (syncserver._figures)
    started = time.monotonic()
    try:
        receipt = await server.attempt(
            mas,
            protocol,
            agent,
            [{"action": i.action, "bindings": i.bindings} for i in parsed.instances],
            attempt_id=parsed.attempt_id,
        )
    except Rejected as exc:
        if figures is not None:
            figures.attempted(mas, started, True)
            figures.refused(mas, protocol, agent.name, exc)
        raise
    if figures is not None:
        figures.attempted(mas, started, False)
    # The caller knows its own instances: send their positions in the batch and
    # its size. The other entries of a batched window reach every agent on its
    # stream: sent in each answer too, a burst of N would cost N² entries.
    # A channel's answer takes the place of the batch's event: it has them all.
    batch, own = receipt.batch, set(receipt.positions)
    data: dict[str, Any] = {"seq": batch.seq, "attempt": list(receipt.positions)}
    if others:
        data["others"] = [
            {"index": i, **e.to_json()} for i, e in enumerate(batch.entries) if i not in own
        ]
    else:
        data["size"] = len(batch.entries)
    return data


class ClientLeft(Exception):
    """The client disconnected before sending the whole body."""


async def receive_body(receive: Receive, limit: int) -> bytes:
    """The request body, refused with 413 past ``limit`` bytes (a declared
    length over it is refused earlier, by :meth:`AttemptsEndpoint.admit`)."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientLeft
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise ServiceError(413, "too-large", f"the body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class Answer(NamedTuple):
    """The endpoint's answer, whichever lane carries it: the ASGI one (through
    uvicorn) or the guard's fast lane (syncserver/_fastlane.py), which writes
    the same status, headers and body straight to the socket."""

    status: int
    body: bytes

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The response's headers (uvicorn adds its Date and Server before them)."""
        headers = [
            (b"content-length", str(len(self.body)).encode()),
            (b"content-type", b"application/json"),
        ]
        if self.status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        return headers


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


class AttemptsEndpoint:
    """The endpoint as an ASGI app: a Starlette route (which sets the path
    parameters) or :class:`Shortcut` (which finds them itself) calls it. The
    guard's fast lane calls :meth:`admit` and :meth:`finish` instead, the same
    two steps :meth:`respond` takes, and writes the :class:`Answer` itself."""

    def __init__(
        self,
        server: SyncServer,
        max_body: int,
        on_attempt: Callable[[str, str], None] | None = None,
    ) -> None:
        self.server = server
        self.max_body = max_body
        self.on_attempt = on_attempt  # (mas, agent) of each authorized attempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        params = scope["path_params"]
        await self.respond(params["mas"], params["protocol"], scope, receive, send)

    async def respond(
        self, mas: str, protocol: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        try:
            headers = dict(scope["headers"])  # names are lower-case in ASGI
            agent, ledger = self.admit(
                mas,
                protocol,
                _text(headers.get(b"authorization")) or "",
                _text(headers.get(b"content-type")),
                _text(headers.get(b"content-length")),
            )
            body = await receive_body(receive, self.max_body)
        except ClientLeft:
            client = scope.get("client")
            where = f"{client[0]}:{client[1]}" if client else "a client"
            log.info("%s left before sending the whole body of %s", where, scope["path"])
            result = Answer(400, error_bytes("client-disconnected", "the client left mid-body"))
        except Exception as exc:
            result = self.failure(exc, scope["path"])
        else:
            result = await self.finish(mas, protocol, agent, ledger, body, scope["path"])
        start: Message = {
            "type": "http.response.start",
            "status": result.status,
            "headers": result.headers(),
        }
        await send(start)
        await send({"type": "http.response.body", "body": result.body})

    def admit(
        self,
        mas: str,
        protocol: str,
        authorization: str,
        content_type: str | None,
        declared: str | None,
    ) -> tuple[AgentConfig, Ledger]:
        """What the request's head decides, before its body is read: who the
        agent is (401), whether it plays in the protocol (404, 403), whether the
        body is JSON (415) and not too large (413)."""
        agent = authorize(self.server, mas, authorization)
        ledger = self.server.ledger(mas, protocol, agent)  # 404/403 before reading
        if self.on_attempt is not None:
            self.on_attempt(mas, agent.name)
        check_content_type(content_type)
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise ServiceError(413, "too-large", f"the body exceeds {self.max_body} bytes")
        return agent, ledger

    async def finish(
        self,
        mas: str,
        protocol: str,
        agent: AgentConfig,
        ledger: Ledger,
        body: bytes,
        path: str,
    ) -> Answer:
        """The attempt in ``body`` finalized, as the answer to send; never raises."""
        try:
            data = await answer(self.server, mas, protocol, agent, body)
            result = Answer(200, encode(data))
            if ledger.woken >= data["seq"]:
                # Let the event streams that the commit woke write the batch first:
                # the other agents, who act on it, hear of it before the attempter's
                # answer (one loop step; measured in docs/performance.md). Streams
                # written during the commit, and none at all, need no step.
                await asyncio.sleep(0)
            return result
        except Exception as exc:
            return self.failure(exc, path)

    def failure(self, exc: Exception, path: str) -> Answer:
        """The answer to an attempt that failed with ``exc``."""
        if isinstance(exc, ServiceError):
            return Answer(exc.status, encode(exc.to_json()))
        log.exception("unexpected error on POST %s", path, exc_info=exc)
        return Answer(500, encode(internal(exc)))


#: What RFC 9110 (5.5) refuses in a field value and h11 lets through: control
#: characters but HTAB (CR, LF and NUL h11 refuses itself).
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


class Shortcut:
    """ASGI middleware: sends ``POST .../attempts`` straight to the endpoint,
    past Starlette's routing; any other request goes on to ``app``. A request
    with a control character in a header value is refused first (RFC 9110
    says to refuse it or blank the character; blanked, a token or an id would
    silently be another): logs and errors quoting it stay plain text."""

    def __init__(self, app: ASGIApp, endpoint: AttemptsEndpoint) -> None:
        self.app = app
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if _CONTROL.search(value):
                    return await _bad_header(name, send)
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            root = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            names = route(path)
            if names is not None:
                return await self.endpoint.respond(*names, scope, receive, send)
        await self.app(scope, receive, send)


async def _bad_header(name: bytes, send: Send) -> None:
    body = error_bytes(
        "bad-header",
        f"header {name.decode('latin-1')!r} holds a control character: a header "
        "value may hold visible characters, spaces and tabs only (RFC 9110, 5.5)",
    )
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})
