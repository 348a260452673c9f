"""Deprecated: moved to :mod:`syncserver.bundled`; this alias re-exports it for
one release."""

import warnings

from syncserver.bundled import *  # noqa: F403
from syncserver.bundled import __all__  # noqa: F401

warnings.warn(
    "strabo.bundled is deprecated: import from syncserver.bundled",
    DeprecationWarning,
    stacklevel=2,
)
