"""Peach: program agents that enact Langshaw protocols.

A :class:`PeachAdapter` plays one role of one protocol. It computes the actions
the role may perform now (:meth:`PeachAdapter.enabled`); the agent binds values
(:meth:`FeasibleAction.bind`) and attempts them (:meth:`PeachAdapter.attempt`),
and reacts to what happens with :meth:`~PeachAdapter.observation`,
:meth:`~PeachAdapter.on_enabled` and :meth:`~PeachAdapter.on_completion` handlers.
Executors connect adapters to a SyncServer: :class:`LocalExecutor` in-process,
:class:`SyncExecutor` over HTTP.
"""

from langshaw import ActionInstance
from peach._mandate import Approver, MandateRefused
from peach.adapter import PeachAdapter
from peach.errors import ActionRejected, BindError, ExecutorError, HandlerError, LogGapError
from peach.executor import Executor
from peach.feasible import FeasibleAction
from peach.http import SyncExecutor
from peach.keys import new_key
from peach.local import LocalExecutor
from syncserver.mandate import Mandate, read_mandate

__all__ = [
    "ActionInstance",
    "ActionRejected",
    "Approver",
    "BindError",
    "Executor",
    "ExecutorError",
    "FeasibleAction",
    "HandlerError",
    "LocalExecutor",
    "LogGapError",
    "Mandate",
    "MandateRefused",
    "PeachAdapter",
    "SyncExecutor",
    "new_key",
    "read_mandate",
]
