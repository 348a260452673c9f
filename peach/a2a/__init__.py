"""A2A (the Agent2Agent protocol): a protocol role served as an A2A agent, and a
remote A2A agent delegated to as the Agent of A2ATask.

``RoleAgent`` and ``RemoteAgent`` need the A2A SDK (``pip install
'strabo[a2a]'``), and ``RoleAgent`` Starlette, loaded on first use: ``strabo a2a
--help`` (and ``strabo --help``, which reads every verb's options) works without
them, and ``peach`` never imports them.
docs/a2a.md explains the mapping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peach.a2a.remote import RemoteAgent
    from peach.a2a.server import Refused, RoleAgent

__all__ = ["Refused", "RemoteAgent", "RoleAgent"]


def __getattr__(name: str) -> Any:
    if name == "RemoteAgent":
        from peach.a2a import remote

        return getattr(remote, name)
    if name in __all__:
        from peach.a2a import server

        return getattr(server, name)
    raise AttributeError(f"module 'peach.a2a' has no attribute {name!r}")
