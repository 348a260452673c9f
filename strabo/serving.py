"""Serve an ASGI app with uvicorn inside the running event loop.

The helper lives in ``syncserver.serving``, below the agents (a peer-to-peer
agent serves its own endpoint with it); this name is kept for callers.
"""

from syncserver.serving import free_port, serve

__all__ = ["free_port", "serve"]
