"""The SyncServer: shared social state for every enactment of a MAS.

:class:`SyncServer` is the core (usable in-process); :func:`create_app` serves
it over HTTP; :func:`load_config` reads the TOML that says which MASes, protocols
and agents it hosts.
"""

from syncserver._guard import uvicorn_options
from syncserver.app import create_app
from syncserver.batch import Batch, Entry
from syncserver.config import AgentConfig, Config, ConfigError, MASConfig, build_config, load_config
from syncserver.errors import Rejected, ServiceError
from syncserver.ledger import Receipt
from syncserver.limits import Limits
from syncserver.server import SyncServer
from syncserver.store import MemoryStore, SQLiteStore, Store, StoreError, open_store

__all__ = [
    "AgentConfig",
    "Batch",
    "Config",
    "ConfigError",
    "Entry",
    "Limits",
    "MASConfig",
    "MemoryStore",
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
