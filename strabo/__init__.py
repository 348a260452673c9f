"""strabo: declarative interaction protocols, agents that enact them, and HTTP bridges.

This package is the top layer, the applications: the ``strabo`` command line,
the demo, the bundled UCP merchant, the UCP agents and proxies, simulations.
Below it: ``proxy`` (installed as ``strabo.proxy``), then ``peach`` (agents),
then ``syncserver`` (the engine that keeps social state, and its HTTP server),
then ``langshaw`` (the language); docs/architecture.md draws them. ``serve``
(an ASGI app in-process, from ``syncserver.serving``) is loaded on first use:
importing ``strabo`` must not load a web server.
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
