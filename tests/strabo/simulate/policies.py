"""Policies that misbehave on purpose, for the runner's stop conditions."""

from __future__ import annotations

from typing import Any

from strabo.simulate import Move
from strabo.simulate.policies._common import latest_round


def endless_chair(move: Move) -> dict[str, Any] | None:
    """A chair that ignores the round limit and never closes."""
    if move.name != "Open":
        return None
    if move.initiating:
        if move.memory.get("opened"):
            return None
        move.memory["opened"] = True
        return {"round": 1, "topic": "again"}
    last = latest_round(move)
    if not move.occurred("Say3", round=last):
        return None
    return move.at(round=last + 1) and {"round": last + 1, "topic": "again"}


def mute(move: Move) -> dict[str, Any] | None:
    """Never says anything."""
    return None


def broken(move: Move) -> dict[str, Any] | None:
    raise ValueError("no idea what to say")


def overreaching(move: Move) -> dict[str, Any] | None:
    """Binds what its role has no say so over."""
    return {"topic": "mine now", "said1": "hello"}
