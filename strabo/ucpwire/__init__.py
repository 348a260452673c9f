"""UCP wire shapes shared by the two sides of the wire.

The Business proxies (``strabo.ucp``) and the bundled merchant
(``strabo.merchant``) both translate between UCP 2026-01-11 and 2026-04-08
bodies. The merchant must stay free of the agent packages and the agents of the
merchant, so what both need sits here, below both, importing nothing of the
project: the version names and the pure reshaping helpers (``shapes``).
"""

from __future__ import annotations

from strabo.ucpwire.shapes import JSON, NEW, OLD

__all__ = ["JSON", "NEW", "OLD"]
