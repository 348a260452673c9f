"""Deprecated: the engine moved to :mod:`syncserver` (``from syncserver import
SyncServer, load_config``). This alias re-exports its names for one release."""

import warnings

from syncserver import (
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
    SharedStore,
    SQLiteStore,
    Store,
    StoreError,
    SyncServer,
    build_config,
    load_config,
    open_store,
)

warnings.warn(
    "strabo.core is deprecated: import from syncserver (e.g. from syncserver import SyncServer)",
    DeprecationWarning,
    stacklevel=2,
)

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
    "SharedStore",
    "Store",
    "StoreError",
    "SyncServer",
    "build_config",
    "load_config",
    "open_store",
]
