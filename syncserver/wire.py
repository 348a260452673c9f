"""Request bodies of the SyncServer HTTP API, as pydantic models.

Validation failures become 400 responses that say which field is wrong and why,
instead of reaching the protocol checks with a malformed attempt.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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


