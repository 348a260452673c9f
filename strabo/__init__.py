"""strabo: declarative interaction protocols, agents that enact them, and HTTP bridges.

This package holds what the other packages share but none of them owns: the
finalization core (``strabo.core``), the ``strabo`` command line, and a helper to
serve an ASGI app in-process (``strabo.serving``, loaded on first use: importing
``strabo`` must not load a web server).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.2.0"
__all__ = ["__version__", "serve"]


def __getattr__(name: str) -> Any:
    if name == "serve":
        from strabo.serving import serve

        return serve
    raise AttributeError(f"module 'strabo' has no attribute {name!r}")
