"""The finalization core that the SyncServer and the in-process executor share.

Below both: it authorizes attempts, checks them with ``langshaw.semantics``,
finalizes them into numbered batches, stores them and feeds them to readers.
It imports neither Starlette nor uvicorn, so an agent that runs a
``peach.LocalExecutor`` (or only talks HTTP) never loads a web server; only
``strabo.core.serving``, imported by whoever serves an app, loads uvicorn.
"""

from strabo.core._pgstore import PostgresStore
from strabo.core.batch import Batch, Entry
from strabo.core.config import (
    AgentConfig,
    Config,
    ConfigError,
    MASConfig,
    build_config,
    load_config,
)
from strabo.core.errors import Rejected, ServiceError
from strabo.core.ledger import Receipt
from strabo.core.limits import Limits
from strabo.core.server import SyncServer, open_store
from strabo.core.store import (
    MemoryStore,
    SharedStore,
    SQLiteStore,
    Store,
    StoreError,
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
