"""The SyncServer: shared social state for every enactment of a MAS.

The engine comes first: :class:`SyncServer` authorizes attempts, checks them
with ``langshaw.semantics``, finalizes them into numbered batches, stores them
(:class:`SQLiteStore`, :class:`MemoryStore`, :class:`PostgresStore`) and feeds
them to readers; :func:`load_config` reads the TOML that says which MASes,
protocols and agents it hosts. It imports neither Starlette nor uvicorn, so an
agent that runs a ``peach.LocalExecutor`` (an in-process SyncServer) never
loads a web server. :func:`create_app` serves the engine over HTTP
(``syncserver.app``).

Every name is loaded on first use: a command that needs only a corner of the
package (``strabo check`` reads its exit statuses from ``syncserver.options``)
does not pay for all of it, 0.4 s of CPU at every start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from syncserver._guard import uvicorn_options
    from syncserver._pgstore import PostgresStore
    from syncserver.app import create_app
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

#: Where each public name lives, imported when first asked for.
_EXPORTS = {
    "PostgresStore": "syncserver._pgstore",
    "Batch": "syncserver.batch",
    "Entry": "syncserver.batch",
    "AgentConfig": "syncserver.config",
    "Config": "syncserver.config",
    "ConfigError": "syncserver.config",
    "MASConfig": "syncserver.config",
    "build_config": "syncserver.config",
    "load_config": "syncserver.config",
    "Rejected": "syncserver.errors",
    "ServiceError": "syncserver.errors",
    "Receipt": "syncserver.ledger",
    "Limits": "syncserver.limits",
    "Mandate": "syncserver.mandate",
    "MandateError": "syncserver.mandate",
    "read_mandate": "syncserver.mandate",
    "SyncServer": "syncserver.server",
    "open_store": "syncserver.server",
    "SQLiteStore": "syncserver.sqlite",
    "MemoryStore": "syncserver.store",
    "SharedStore": "syncserver.store",
    "Store": "syncserver.store",
    "StoreError": "syncserver.store",
    "uvicorn_options": "syncserver._guard",
    "create_app": "syncserver.app",
}

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
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'syncserver' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
