"""What RoleAgent puts between a careless or hostile A2A client and the SDK.

The SDK answers some malformed requests as its own failure (an internal error,
a traceback in the log): a body that is not UTF-8, holds NaN or Infinity (which
Python's JSON reader takes and protobuf cannot write back), or is nested past
the reader's recursion limit; and it reads a body of any size. :class:`JsonBodies`
answers those first, with JSON-RPC's parse error (or "payload too large"), and
:class:`ClientMistakes` logs the client mistakes the SDK answers well as warnings,
without a traceback (tests/peach/a2a/test_role_agent_hostile.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.types import TaskNotFoundError, UnsupportedOperationError
from starlette.responses import JSONResponse

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]

MAX_BODY = 8 * 1024 * 1024
"""Bytes a JSON-RPC request may hold (the SDK reads any); a larger one is
answered "payload too large" (-32600) unread."""


class JsonBodies:
    """ASGI middleware: a POST body must be JSON (UTF-8, no NaN or Infinity,
    nested within reason) before the SDK reads it, which answers those with an
    internal error and a traceback; here they are JSON-RPC's parse error. And
    it holds MAX_BODY bytes at most."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks, more, size = [], True, 0
        while more and size <= MAX_BODY:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            more, size = message.get("more_body", False), size + len(chunks[-1])
        body = b"".join(chunks)
        error = ({"code": -32600, "message": f"Payload too large: over {MAX_BODY} bytes"}
                 if size > MAX_BODY else None)
        why = None if error else not_json(body)
        if why is not None:
            error = {"code": -32700, "message": f"Parse error: {why}"}
        if error is not None:
            response = JSONResponse({"jsonrpc": "2.0", "id": None, "error": error})
            await response(scope, receive, send)
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()  # a disconnect, for a stream
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def not_json(body: bytes) -> str | None:
    """Why ``body`` is not JSON the SDK can take, or None."""
    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        json.loads(body.decode("utf-8"), parse_constant=constant)
    except UnicodeDecodeError as exc:
        return f"the body is not UTF-8 ({exc.reason} at byte {exc.start})"
    except RecursionError:
        return "the body is nested too deeply"
    except ValueError as exc:
        return str(exc)
    return None


class ClientMistakes(logging.Filter):
    """The SDK logs a client's malformed request, and an A2A error the executor
    raises for the client, with a traceback: a warning without one is enough.
    And it warns when the live state of a task RoleAgent forgot is closed at
    once (its queue's dispatcher is gone): that is the point, not a fault."""

    CLOSED = "Dispatcher task is not running. Cannot wait for event dispatch."

    MESSAGES = frozenset({
        "Failed to validate base JSON-RPC request", "Failed to parse request params",
        "Failed to validate base JSON-RPC request for v0.3",
        "Producer[%s]: Execution failed", "Consumer[%s]: Failed",
    })

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == self.CLOSED:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not isinstance(record.msg, str) or record.msg not in self.MESSAGES:
            return True
        if record.msg.startswith(("Producer", "Consumer")) and not isinstance(
                exc, TaskNotFoundError | UnsupportedOperationError):
            return True  # the agent's own failure: keep its traceback
        record.msg, record.args = f"{record.getMessage()}: {exc}", ()
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_client_mistakes() -> None:
    """Install :class:`ClientMistakes` on the SDK's loggers (once)."""
    for name in ("a2a.server.routes.jsonrpc_dispatcher", "a2a.compat.v0_3.jsonrpc_adapter",
                 "a2a.server.agent_execution.active_task", "a2a.server.events.event_queue_v2"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, ClientMistakes) for f in logger.filters):
            logger.addFilter(ClientMistakes())
