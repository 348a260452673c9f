"""Request bodies of the SyncServer HTTP API, as pydantic models.

Validation failures become 400 responses that say which field is wrong and why,
instead of reaching the protocol checks with a malformed attempt.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class InstanceIn(BaseModel):
    """One action instance: the action's name and its bindings (an optional
    attribute left absent is simply not there)."""

    model_config = ConfigDict(extra="forbid")

    action: str
    bindings: dict[str, Any]


class AttemptIn(BaseModel):
    """An atomic list of instances; ``attempt_id`` makes retrying it safe."""

    model_config = ConfigDict(extra="forbid")

    instances: list[InstanceIn] = Field(min_length=1)
    attempt_id: str | None = Field(default=None, min_length=1, max_length=200)


def describe(error: ValidationError) -> tuple[str, str]:
    """A (code, message) pair for a body that failed validation."""
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
