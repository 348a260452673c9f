"""What an agent is and does now, for people and tools to look at.

A role played through an adapter is otherwise visible only in its code and its
logs. :func:`describe_adapter` gathers what the role is (its spec: goal,
responsibilities, constraints, action kinds), what it may do now, what it is in
the middle of, the state it exposes, its handlers and its counters, as JSON-able
data. :func:`inspection_app` serves that over HTTP (``GET /inspect``) so that
``strabo inspect URL`` or a dashboard can read a running agent.
"""

from __future__ import annotations

import datetime
import enum
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import ASGIApp

log = logging.getLogger("strabo.peach")

# A PeachAdapter (which imports this module for its inspect method).
PeachAdapter = Any

#: Enabled actions and pending handler tasks listed per adapter at most (an
#: agent in thousands of enactments has thousands; the count is given in full).
MAX_LISTED = 50
#: Enactments looked at for what is enabled, the latest first: finding what is
#: enabled costs about as much per enactment as an attempt's checks, and an
#: inspection runs in the agent's event loop. ``enabled.scanned`` says how many
#: were looked at when there are more.
MAX_SCANNED = 1000
#: Bounds on the state an agent exposes, as it is shown: nesting depth, and
#: entries per container (the rest is counted, not shown).
MAX_DEPTH = 12
MAX_ITEMS = 200
#: And in all, in characters of text (a text is cut at MAX_TEXT): containers that
#: share their entries would otherwise be shown MAX_ITEMS ** MAX_DEPTH times over.
MAX_SHOWN = 500_000
MAX_TEXT = 4096
KIND = "strabo.agent"


def describe_adapter(adapter: PeachAdapter) -> dict[str, Any]:
    """One adapter as :func:`describe` shows it; JSON-able, and bounded in size
    and time whatever the number of enactments and whatever the exposed state
    holds (a value JSON cannot hold is shown as text)."""
    spec = adapter.spec
    state: Any = {}
    if spec is not None and spec.state is not None:
        try:
            exposed = spec.state()
            if not isinstance(exposed, Mapping):
                raise TypeError(f"state() returned a {type(exposed).__name__}, not a mapping")
            state = jsonable(exposed)
        except Exception as exc:  # an inspection must not fail on a faulty accessor
            state = {"error": f"{type(exc).__name__}: {exc}"}
    roots = adapter.enactments()
    activity = adapter.activity()
    pending = activity["pending"]
    observers, on_enabled, on_completion = activity["handlers"]
    return {
        "agent": adapter.name,
        "protocol": adapter.protocol.name,
        "role": adapter.role,
        "mas": adapter.mas_id,
        "running": activity["running"],
        "spec": spec.describe(adapter) if spec is not None else None,
        "enabled": _enabled_now(adapter, roots),
        "enactments": {
            "count": len(roots),
            "complete": sum(1 for r in roots if adapter.is_complete(r)),
        },
        "pending": pending[:MAX_LISTED],
        **({"pending_count": len(pending)} if len(pending) > MAX_LISTED else {}),
        "state": state,
        "handlers": {
            "observation": _names(observers),
            "on_enabled": _names(on_enabled),
            "on_completion": [_qualname(h) for h in on_completion],
        },
        "counters": dict(sorted(adapter.counters.items())),
        "breaches": list(adapter.breaches)[-10:],
    }


def _enabled_now(adapter: PeachAdapter, roots: Sequence[tuple[Any, ...]]) -> dict[str, Any]:
    """What the role may do now: in the latest MAX_SCANNED enactments, and the
    initiating actions (the first MAX_LISTED listed, all of them counted)."""
    scanned = roots[-MAX_SCANNED:] if len(roots) > MAX_SCANNED else roots
    enabled: list[Any] = []
    for root in scanned:
        enabled.extend(adapter.enabled(root))
    enabled.extend(adapter.initiating())
    found: dict[str, Any] = {
        "count": len(enabled),
        "actions": [_enabled(adapter, fa) for fa in enabled[:MAX_LISTED]],
    }
    if len(scanned) < len(roots):
        found["scanned"] = len(scanned)  # of enactments.count: the latest ones
    return found


def jsonable(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON can hold it: sets as sorted lists, dates as ISO text,
    bytes and other objects as text, non-finite floats as text, keys as text;
    nested at most MAX_DEPTH deep, MAX_ITEMS entries per container, and about
    MAX_SHOWN characters in all (past it, what is left is ``"..."``)."""
    return _shown(value, depth, [MAX_SHOWN])


def _shown(value: Any, depth: int, budget: list[int]) -> Any:
    if budget[0] <= 0:
        return "..."
    if value is None or isinstance(value, bool):
        budget[0] -= 5
        return value
    if isinstance(value, int):
        if value.bit_length() > 14_000:  # past the 4,300 digits JSON encoders write
            value = f"<an integer of {value.bit_length()} bits>"
        else:
            budget[0] -= 20
            return value
    if isinstance(value, str):
        budget[0] -= len(value) + 2
        return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 3] + "..."
    if isinstance(value, float):
        budget[0] -= 24
        return value if math.isfinite(value) else str(value)
    if depth >= MAX_DEPTH:
        budget[0] -= 5
        return "..."
    budget[0] -= 2
    if isinstance(value, Mapping):
        shown = {}
        for k, v in islice(value.items(), MAX_ITEMS):
            key = _text(k)
            budget[0] -= len(key) + 3
            shown[key] = _shown(v, depth + 1, budget)
        if len(value) > MAX_ITEMS:
            shown["..."] = f"{len(value) - MAX_ITEMS} more"
        return shown
    if isinstance(value, list | tuple | set | frozenset):
        items = list(islice(value, MAX_ITEMS))
        if isinstance(value, set | frozenset):
            items.sort(key=repr)
        shown_items = [_shown(v, depth + 1, budget) for v in items]
        if len(value) > MAX_ITEMS:
            shown_items.append(f"... {len(value) - MAX_ITEMS} more")
        return shown_items
    if isinstance(value, bytes | bytearray | memoryview):
        return _shown(bytes(value[:MAX_TEXT]).decode("utf-8", "backslashreplace"), depth, budget)
    if isinstance(value, datetime.date | datetime.time):
        return _shown(value.isoformat(), depth, budget)
    if isinstance(value, enum.Enum):
        return _shown(value.value, depth + 1, budget)
    return _shown(_text(value), depth, budget)


def _leaf(value: Any) -> Any:
    """``json.dumps``'s default: one value JSON has no type for, as jsonable shows it."""
    return jsonable(value)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        text = str(value)
    except Exception:  # an object whose __str__ fails still has a type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 4096 else text[:4093] + "..."


def _enabled(adapter: PeachAdapter, feasible: Any) -> dict[str, Any]:
    root = tuple(feasible.enablement.fixed.get(k) for k in adapter.protocol.root_keys)
    known = all(v is not None for v in root)
    return {
        "action": feasible.name,
        "enactment": adapter.keys_of(root) if known else None,  # None: opens a new one
    }


def _names(table: Mapping[str, Sequence[Any]]) -> dict[str, list[str]]:
    return {action: [_qualname(h) for h in handlers] for action, handlers in table.items()}


def _qualname(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", fn))


def describe(
    name: str, adapters: Sequence[PeachAdapter], extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """An agent as a whole: its roles (one entry per adapter) and what else its
    program adds (an LLM agent's budget and pending decisions, say)."""
    described = {"kind": KIND, "agent": name, "roles": [describe_adapter(a) for a in adapters]}
    for key, value in (extra or {}).items():
        described.setdefault(key, value)  # what the program adds cannot hide what it is
    return described


def inspection_app(source: Callable[[], Mapping[str, Any]]) -> ASGIApp:
    """A small ASGI app answering ``GET /inspect`` with ``source()`` as JSON.

    ``source`` is typically ``lambda: describe("buyer", [adapter])`` or an LLM
    agent's ``inspect``; it runs on every request, in the agent's event loop, so
    what it shows is consistent with what the agent is doing. Serve it with
    uvicorn on a loopback port: it has no authentication, and the state it
    shows is whatever the agent chose to expose.
    """
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def inspect(request: Request) -> Response:
        try:
            data = dict(source())
            try:  # what an agent's program adds (sets, dates, ...) as jsonable shows it
                body = json.dumps(data, separators=(",", ":"), allow_nan=False, default=_leaf)
            except (TypeError, ValueError):  # NaN, keys JSON cannot have: the slow way
                body = json.dumps(jsonable(data), separators=(",", ":"))
        except Exception as exc:  # the agent keeps running; the reader learns why
            log.error("the inspection failed: %s: %s", type(exc).__name__, exc)
            error = {"code": "inspection-failed", "message": f"{type(exc).__name__}: {exc}"}
            return Response(json.dumps({"error": error}), 500, media_type="application/json")
        return Response(body, media_type="application/json")

    return Starlette(routes=[Route("/inspect", inspect)])
