"""What an agent is and does now, for people and tools to look at.

A role played through an adapter is otherwise visible only in its code and its
logs. :func:`describe_adapter` gathers what the role is (its spec: goal,
responsibilities, constraints, action kinds), what it may do now, what it is in
the middle of, the state it exposes, its handlers and its counters, as JSON-able
data. :func:`inspection_app` serves that over HTTP (``GET /inspect``) so that
``strabo inspect URL`` or a dashboard can read a running agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import ASGIApp

# A PeachAdapter (which imports this module for its inspect method).
PeachAdapter = Any

#: Enabled actions listed per adapter at most (an agent in thousands of
#: enactments has thousands; the count is given in full).
MAX_LISTED = 50
KIND = "strabo.agent"


def describe_adapter(adapter: PeachAdapter) -> dict[str, Any]:
    enabled = adapter.enabled()
    roots = adapter.enactments()
    spec = adapter.spec
    state: Any = {}
    if spec is not None and spec.state is not None:
        try:
            state = dict(spec.state())
        except Exception as exc:  # an inspection must not fail on a faulty accessor
            state = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "agent": adapter.name,
        "protocol": adapter.protocol.name,
        "role": adapter.role,
        "mas": adapter.mas_id,
        "running": adapter._running,
        "spec": spec.describe(adapter) if spec is not None else None,
        "enabled": {
            "count": len(enabled),
            "actions": [_enabled(adapter, fa) for fa in enabled[:MAX_LISTED]],
        },
        "enactments": {
            "count": len(roots),
            "complete": sum(1 for r in roots if adapter.is_complete(r)),
        },
        "pending": sorted(t.get_name() for t in adapter._tasks if not t.done()),
        "state": state,
        "handlers": {
            "observation": _names(adapter._observers),
            "on_enabled": _names(adapter._enabled_handlers),
            "on_completion": [_qualname(h) for h in adapter._completion_handlers],
        },
        "counters": dict(sorted(adapter.counters.items())),
        "breaches": list(adapter.breaches)[-10:],
    }


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
    return {
        "kind": KIND,
        "agent": name,
        "roles": [describe_adapter(a) for a in adapters],
        **(dict(extra) if extra else {}),
    }


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
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def inspect(request: Request) -> JSONResponse:
        return JSONResponse(dict(source()))

    return Starlette(routes=[Route("/inspect", inspect)])
