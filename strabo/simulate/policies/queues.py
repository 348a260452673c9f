"""Policies for the Queues pattern (``protocols/patterns/queue.lsh``).

:func:`member` puts ``messages`` messages (default 1) on every other member's
queue, and takes the messages of its own queue first in, first out: it
answers a message only when every message put on its queue before it (by the
SyncServer's log order) is answered. :func:`host` starts the session and
closes it once every message sent has been taken.
"""

from __future__ import annotations

from typing import Any

from strabo.simulate.move import Move

__all__ = ["host", "member"]


def host(move: Move) -> dict[str, Any] | None:
    if move.name == "Start":
        if move.memory.get("started"):
            return None
        move.memory["started"] = True
        return {"subject": str(move.params.get("subject", "a relay"))}
    if move.name == "Closed":
        members = list(move.population.get("Member", ()))
        per = int(move.params.get("messages", 1))
        sent = move.occurred("Send")
        if len(sent) < per * len(members) * (len(members) - 1):
            return None
        if len(move.occurred("Take")) < len(sent):
            return None
        return {"summary": f"{len(sent)} messages through {len(members)} queues"}
    return None


def member(move: Move) -> dict[str, Any] | None:
    if move.name == "Send":
        if "msg" not in move.action.new_keys:
            return None
        per = int(move.params.get("messages", 1))
        mine = move.occurred("Send", sender=move.agent)
        for k in range(per):
            for other in move.population.get("Member", ()):
                if other == move.agent:
                    continue
                if sum(1 for o in mine if o["queue"] == other) > k:
                    continue
                placed = move.at(queue=other)
                if placed is None:
                    return None  # offered on another queue: wait for that offer
                return {**placed, "sender": move.agent,
                        "body": f"{move.agent} to {other}, message {k + 1}"}
        return None
    if move.name == "Take" and move.keys.get("queue") == move.agent:
        taken = {o["msg"] for o in move.occurred("Take", queue=move.agent)}
        waiting = [o for o in move.occurred("Send", queue=move.agent) if o["msg"] not in taken]
        if not waiting or waiting[0]["msg"] != move.keys.get("msg"):
            return None  # first in, first out
        return {"answer": f"{move.agent} read {waiting[0]['sender']}'s message"}
    return None
