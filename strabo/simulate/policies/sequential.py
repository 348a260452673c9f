"""Policies for the Sequential pattern (``protocols/patterns/sequential.lsh``).

:func:`chair` opens each round with the next of its ``topics`` once Third has
spoken in the last one, and closes the session after the round limit;
:func:`speaker` plays First, Second or Third: it says something on the
round's topic that acknowledges the earlier speakers of the round, which its
action carries (``said1``, ``said2``).
"""

from __future__ import annotations

from typing import Any

from strabo.simulate.move import Move
from strabo.simulate.policies._common import latest_round, may_close, open_round

__all__ = ["chair", "speaker"]

_SAID = ("said1", "said2", "said3")


def chair(move: Move) -> dict[str, Any] | None:
    if move.name == "Open":
        topics = list(move.params.get("topics", ["the agenda"]))
        topic = topics[latest_round(move) % len(topics)] if move.history else topics[0]
        return open_round(move, "Say3", {"topic": topic})
    if move.name == "Closed" and may_close(move, "Say3"):
        return {"summary": f"{latest_round(move)} rounds, "
                           f"{len(move.occurred('Say3'))} full turns"}
    return None


def speaker(move: Move) -> dict[str, Any] | None:
    to_bind = [a for a in move.action.to_bind if a in _SAID]
    if len(to_bind) != 1:
        return None
    earlier = [move.fixed[a] for a in _SAID if a in move.fixed]
    stance = move.params.get("stance", "speaks")
    text = f"{move.agent} {stance} on {move.fixed['topic']!r} (round {move.keys['round']})"
    if earlier:
        text += f", after {len(earlier)} earlier turn{'s' if len(earlier) > 1 else ''}"
    return {to_bind[0]: text}
