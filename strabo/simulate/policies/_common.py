"""What the coordinators of every pattern share: rounds opened one after the
other, each once the previous one has ended, up to the round limit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strabo.simulate.move import Move


def latest_round(move: Move) -> int:
    """The highest round opened so far (0 before the first)."""
    return max((int(o["round"]) for o in move.occurred("Open")), default=0)


def round_limit(move: Move, default: int = 3) -> int:
    """The scenario's round limit, else the policy's ``rounds`` param."""
    return int(move.rounds or move.params.get("rounds", default))


def open_round(
    move: Move, ended: str, fields: Mapping[str, Any], done: int = 1
) -> dict[str, Any] | None:
    """Open the first round of a new enactment, or the next round once the
    last one has ended (``ended`` occurred ``done`` times in it) and the limit
    allows it."""
    if move.initiating:
        if move.memory.get("opened"):
            return None  # one enactment per run
        move.memory["opened"] = True
        return {"round": 1, **fields}
    last = latest_round(move)
    if last >= round_limit(move) or len(move.occurred(ended, round=last)) < done:
        return None
    placed = move.at(round=last + 1)
    return None if placed is None else {**placed, **fields}


def may_close(move: Move, ended: str, done: int = 1) -> bool:
    """True once the last round (the limit) has ended: ``ended`` occurred
    ``done`` times in it."""
    last = round_limit(move)
    return latest_round(move) == last and len(move.occurred(ended, round=last)) >= done
