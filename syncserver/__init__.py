"""The SyncServer over HTTP: shared social state for every enactment of a MAS.

:class:`SyncServer` is the server without HTTP (it lives in ``strabo.core``, below
both this package and the agents' in-process executor); :func:`create_app` serves
it over HTTP; :func:`load_config` reads the TOML that says which MASes, protocols
and agents it hosts. The core's names are re-exported here.
"""

from strabo.core import (
    AgentConfig,
    Batch,
    Config,
    ConfigError,
    Entry,
    Limits,
    MASConfig,
    MemoryStore,
    PostgresStore,
    Receipt,
    Rejected,
    ServiceError,
    SQLiteStore,
    Store,
    StoreError,
    SyncServer,
    build_config,
    load_config,
    open_store,
)
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
    "MemoryStore",
    "PostgresStore",
    "Receipt",
    "Rejected",
    "SQLiteStore",
    "ServiceError",
    "Store",
    "StoreError",
    "SyncServer",
    "build_config",
    "create_app",
    "load_config",
    "open_store",
    "uvicorn_options",
]
