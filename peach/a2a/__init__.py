"""A2A (the Agent2Agent protocol): a protocol role served as an A2A agent.

``RoleAgent`` needs the A2A SDK (``pip install 'strabo[a2a]'``) and Starlette,
loaded on first use: ``strabo a2a --help`` (and ``strabo --help``, which reads
every verb's options) works without them, and ``peach`` never imports them.
docs/a2a.md explains the mapping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peach.a2a.server import Refused, RoleAgent

__all__ = ["Refused", "RoleAgent"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from peach.a2a import server

        return getattr(server, name)
    raise AttributeError(f"module 'peach.a2a' has no attribute {name!r}")
