"""Errors the SyncServer reports, each with an HTTP status, a code and a message.

The same exceptions reach in-process callers (``LocalExecutor``) and HTTP clients
(as ``{"error": {"code": ..., "message": ...}}`` bodies), so both see the same
reasons for the same mistakes.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from langshaw import Violation


def error_json(code: str, message: str, **details: Any) -> dict[str, Any]:
    """The body of every error the SyncServer gives: an HTTP answer, a channel's
    answer, a stream's last event, a connection the guard closes."""
    return {"error": {"code": code, "message": message, **details}}


def error_bytes(code: str, message: str, **details: Any) -> bytes:
    """:func:`error_json`, encoded (compact JSON)."""
    return json.dumps(
        error_json(code, message, **details), separators=(",", ":"), allow_nan=False
    ).encode()


def internal(exc: BaseException) -> dict[str, Any]:
    """What a client is told of an unexpected failure (the log has the rest)."""
    return error_json("internal", f"internal error: {type(exc).__name__}")

# Which HTTP status each rule of langshaw.semantics maps to.
RULE_STATUS = {
    "unknown-action": 422,
    "unknown-attribute": 422,
    "missing-attribute": 422,
    "key": 422,
    "role": 403,
    "acts-for": 403,
    "mandate": 403,
    "duplicate": 409,
    "dependency": 409,
    "nono": 409,
    "nogo": 409,
    "sayso": 409,
    "bound": 409,
    "type": 422,
}


class ServiceError(Exception):
    """A request the server refuses (or cannot serve), with its HTTP status."""

    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    def to_json(self) -> dict[str, Any]:
        return error_json(self.code, self.message, **self.details)


class IdReused(ServiceError):
    """An attempt id sent again with other instances than the attempt it names.

    An attempt id is an idempotency key: bound to the instances it was first
    finalized (or is being finalized) with, so that a resend gets the original
    answer. Other instances under it are refused rather than finalized or told
    the first attempt's outcome. Not a protocol rule (no ``rule``): the agent's
    ids are at fault, and resending changes nothing."""

    def __init__(self, attempt_id: str, agent: str) -> None:
        super().__init__(
            409,
            "id-reused",
            f"attempt id {attempt_id!r} of agent {agent!r} already names an attempt with "
            "other instances: an attempt id may be resent only with the same instances; "
            "use a new id for a new attempt",
            attempt_id=attempt_id,
        )


class Rejected(ServiceError):
    """An attempt that breaks a protocol rule."""

    def __init__(self, violation: Violation) -> None:
        details: dict[str, Any] = {"rule": violation.rule, "index": violation.index}
        if violation.action is not None:
            details["action"] = violation.action
        if violation.attribute is not None:
            details["attribute"] = violation.attribute
        if violation.path is not None:
            details["path"] = violation.path
        super().__init__(
            RULE_STATUS.get(violation.rule, 409), violation.rule, violation.message, **details
        )
        self.violation = violation


def describe(error: ValidationError) -> tuple[str, str]:
    """A (code, message) pair for a body that failed validation: ``bad-json``
    when it is not JSON at all, ``bad-request`` else. Here, not in ``wire``, so
    that agents answering their peers (peach.peer) say it as the server does."""
    problems = error.errors(include_url=False)
    if any(p["type"] == "json_invalid" for p in problems):
        detail = next(p for p in problems if p["type"] == "json_invalid")
        reason = (detail.get("ctx") or {}).get("error", "invalid JSON")
        return "bad-json", f"the body is not valid JSON: {reason}"
    parts = []
    for p in problems[:5]:
        where = ".".join(str(x) for x in p["loc"]) or "body"
        parts.append(f"{where}: {p['msg']}")
    return "bad-request", "; ".join(parts)
