"""strabo: declarative interaction protocols, agents that enact them, and HTTP bridges.

This package holds what the other packages share but none of them owns: the
``strabo`` command line and a helper to serve an ASGI app in-process.
"""

from strabo.serve import serve

__all__ = ["serve"]
__version__ = "0.1.0"
