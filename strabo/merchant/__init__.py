"""A bundled UCP merchant: the UCP checkout REST contract (version 2026-01-11).

Written from recorded wire traces of the UCP reference merchant, so that agents and
bridges can be developed and tested against a real HTTP merchant without the
reference's dependencies. State lives in memory, one merchant per app::

    from strabo.merchant import create_app, merchant_of
    app = create_app()              # the bundled flower shop
    merchant = merchant_of(app)     # its sessions, orders and stock, for tests

Run it with ``strabo merchant --port 8182``; docs/merchant.md has the details.

Names are imported on first use, so that ``strabo --help`` (which imports the
command-line module of this package) does not pay for Starlette and pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._ap2 import Ap2Settings
    from ._app import create_app, merchant_of
    from ._csvdata import load_data_dir
    from ._errors import UcpError
    from ._payment import FAIL_TOKEN, FRAUD_TOKEN, MOCK_HANDLER, SUCCESS_TOKEN
    from .catalog import DEFAULT_CATALOG, Catalog, CatalogError, load_catalog
    from .merchant import Merchant
    from .wire import UCP_VERSION

_EXPORTS = {
    "Ap2Settings": "._ap2",
    "create_app": "._app",
    "merchant_of": "._app",
    "load_data_dir": "._csvdata",
    "UcpError": "._errors",
    "FAIL_TOKEN": "._payment",
    "FRAUD_TOKEN": "._payment",
    "MOCK_HANDLER": "._payment",
    "SUCCESS_TOKEN": "._payment",
    "DEFAULT_CATALOG": ".catalog",
    "Catalog": ".catalog",
    "CatalogError": ".catalog",
    "load_catalog": ".catalog",
    "Merchant": ".merchant",
    "UCP_VERSION": ".wire",
}

__all__ = [
    "DEFAULT_CATALOG",
    "FAIL_TOKEN",
    "FRAUD_TOKEN",
    "MOCK_HANDLER",
    "SUCCESS_TOKEN",
    "UCP_VERSION",
    "Ap2Settings",
    "Catalog",
    "CatalogError",
    "Merchant",
    "UcpError",
    "create_app",
    "load_catalog",
    "load_data_dir",
    "merchant_of",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
