"""Policies for the Broadcast pattern (``protocols/patterns/broadcast.lsh``).

:func:`chair` opens rounds, wraps one up once every member has posted in it,
and closes the session after the round limit; :func:`member` posts once a
round (``author`` its name; ``post`` a fresh key): members post in any order,
and every post is visible to all.
"""

from __future__ import annotations

from typing import Any

from strabo.simulate.move import Move
from strabo.simulate.policies._common import latest_round, may_close, open_round

__all__ = ["chair", "member"]


def chair(move: Move) -> dict[str, Any] | None:
    if move.name == "Open":
        topics = list(move.params.get("topics", ["the agenda"]))
        topic = topics[latest_round(move) % len(topics)] if move.history else topics[0]
        return open_round(move, "Wrap", {"topic": topic})
    if move.name == "Closed" and may_close(move, "Wrap"):
        return {"summary": f"{latest_round(move)} rounds, {len(move.occurred('Post'))} posts"}
    r = move.keys.get("round")
    if move.name == "Wrap" and r is not None:
        members = set(move.population.get("Member", ()))
        authors = [o["author"] for o in move.occurred("Post", round=r)]
        if not members <= set(authors):
            return None
        return {"digest": f"{len(authors)} posts by {', '.join(sorted(set(authors)))}"}
    return None


def member(move: Move) -> dict[str, Any] | None:
    if move.name != "Post" or "post" not in move.action.new_keys:
        return None
    r = move.keys.get("round")
    if r is None or move.occurred("Wrap", round=r):
        return None
    seen = move.occurred("Post", round=r)
    if any(o["author"] == move.agent for o in seen):
        return None  # one post a round
    stance = move.params.get("stance", "speaks")
    return {"author": move.agent, "text": f"{move.agent} {stance} on {move.fixed['topic']!r}"}
