"""The SyncServer: shared social state for every enactment of a MAS.

The engine comes first: :class:`SyncServer` authorizes attempts, checks them
with ``langshaw.semantics``, finalizes them into numbered batches, stores them
(:class:`SQLiteStore`, :class:`MemoryStore`, :class:`PostgresStore`) and feeds
them to readers; :func:`load_config` reads the TOML that says which MASes,
protocols and agents it hosts. It imports neither Starlette nor uvicorn, so an
agent that runs a ``peach.LocalExecutor`` (an in-process SyncServer) never
loads a web server. :func:`create_app` serves the engine over HTTP
(``syncserver.app``); it and :func:`uvicorn_options` are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from syncserver._pgstore import PostgresStore
from syncserver.batch import Batch, Entry
from syncserver.config import (
    AgentConfig,
    Config,
    ConfigError,
    MASConfig,
    build_config,
    load_config,
)
from syncserver.errors import Rejected, ServiceError
from syncserver.ledger import Receipt
from syncserver.limits import Limits
from syncserver.mandate import Mandate, MandateError, read_mandate
from syncserver.server import SyncServer, open_store
from syncserver.sqlite import SQLiteStore
from syncserver.store import MemoryStore, SharedStore, Store, StoreError

if TYPE_CHECKING:
    from syncserver._guard import uvicorn_options
    from syncserver.app import create_app

__all__ = [
    "AgentConfig",
    "Batch",
    "Config",
    "ConfigError",
    "Entry",
    "Limits",
    "MASConfig",
    "Mandate",
    "MandateError",
    "MemoryStore",
    "PostgresStore",
    "Receipt",
    "Rejected",
    "SQLiteStore",
    "ServiceError",
    "SharedStore",
    "Store",
    "StoreError",
    "SyncServer",
    "build_config",
    "create_app",
    "load_config",
    "open_store",
    "read_mandate",
    "uvicorn_options",
]


def __getattr__(name: str) -> Any:
    # The HTTP side loads Starlette (and the guard, uvicorn): only when asked for.
    if name == "create_app":
        from syncserver.app import create_app

        return create_app
    if name == "uvicorn_options":
        from syncserver._guard import uvicorn_options

        return uvicorn_options
    raise AttributeError(f"module 'syncserver' has no attribute {name!r}")
