"""LocalExecutor: a SyncServer in the same process, without HTTP.

For single-process systems and fast tests. Attempts go through the very code the
HTTP server runs (authorization, checks, finalization, store), so an adapter
behaves the same on either executor.

An attempt's values reach the server as a copy, as they would over HTTP: an
agent that changed a list after attempting it would otherwise change the
server's log, and every other in-process agent's view, behind the checks. What
agents observe is not copied (a copy for each agent of each batch cost the
in-process path half again, `bench/syncserver.py` item 4): an observed
instance's values are the server's, read-only as ``ActionInstance`` says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from langshaw import ActionInstance
from langshaw.values import json_copy
from peach.errors import ActionRejected, ExecutorError
from peach.executor import Executor, Member
from syncserver.acts_for import ActsFor
from syncserver.batch import Batch
from syncserver.errors import Rejected, ServiceError
from syncserver.mandate import Mandate
from syncserver.server import SyncServer


class LocalExecutor(Executor):
    """Runs adapters against ``server`` in-process. Agents are trusted to be who
    their adapter's name says (they share the process); roles are still checked.
    The server is started on first use if it is not running, and then stopped
    when the last adapter leaves."""

    def __init__(self, server: SyncServer, mas: str = "default", *, retries: int = 3) -> None:
        super().__init__(mas, retries=retries)
        self.server = server
        self._owns_server = False

    async def _connect(self) -> None:
        if not self.server._started:
            await self.server.start()
            self._owns_server = True

    async def _disconnect(self) -> None:
        if self._owns_server:
            self._owns_server = False
            await self.server.stop()

    async def _admit(self, adapter: Member) -> None:
        try:
            agent = self.server.agent(self.mas, adapter.name)
            self.server.ledger(self.mas, adapter.protocol.name, agent)
        except ServiceError as exc:
            raise ExecutorError(exc.message, status=exc.status, code=exc.code) from None
        if adapter.role not in agent.roles[adapter.protocol.name]:
            raise ExecutorError(
                f"agent {adapter.name!r} does not play {adapter.role} in "
                f"{adapter.protocol.name} (it plays "
                f"{', '.join(sorted(agent.roles[adapter.protocol.name]))})",
                status=403,
                code="forbidden",
            )

    def acts_for(self, adapter: Member) -> ActsFor:
        return self.server.agent(self.mas, adapter.name).acts_for

    def mandate(self, adapter: Member) -> Mandate | None:
        return self.server.agent(self.mas, adapter.name).mandate or None

    async def _send(
        self, adapter: Member, instances: Sequence[ActionInstance], attempt_id: str
    ) -> tuple[Batch, list[int]]:
        agent = self.server.agent(self.mas, adapter.name)
        try:
            sent = [ActionInstance(i.action, json_copy(i.bindings)) for i in instances]
        except RecursionError:  # the copy meets it first; no log could hold it either
            raise ExecutorError(
                "the attempt is not valid JSON: a value is nested too deeply",
                status=400,
                code="bad-json",
            ) from None
        try:
            receipt = await self.server.attempt(
                self.mas, adapter.protocol.name, agent, sent, attempt_id
            )
        except Rejected as exc:
            raise ActionRejected(exc.violation, list(instances)) from None
        except ServiceError as exc:
            raise ExecutorError(
                exc.message, status=exc.status, code=exc.code, retryable=exc.status == 503
            ) from None
        return receipt.batch, list(receipt.positions)

    async def _read(self, adapter: Member, after: int, limit: int) -> list[Batch]:
        agent = self.server.agent(self.mas, adapter.name)
        return await self.server.read(self.mas, adapter.protocol.name, agent, after, limit)

    def _stream(self, adapter: Member, after: int) -> AsyncIterator[Batch]:
        agent = self.server.agent(self.mas, adapter.name)
        return self.server.subscribe(self.mas, adapter.protocol.name, agent, after)
