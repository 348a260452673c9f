"""The Platform of UCPOrder: what happens to its orders, as protocol actions.

UCPOrder gives the Platform nothing to perform (it acknowledges each webhook on
the wire); this agent watches. It records every action of every order in the
order it saw them (:attr:`OrderWatcher.seen`) and lets a caller wait for one
(:meth:`OrderWatcher.wait_for`), so that an application reacts to Shipped,
Delivered or Refunded without reading a webhook, a signature or an order
snapshot.
"""

from __future__ import annotations

import asyncio

from langshaw import LangshawProtocol
from peach import ActionInstance, Executor, PeachAdapter
from strabo.ucp.order_proxy import PROTOCOL

__all__ = ["OrderWatcher"]


class OrderWatcher:
    """A :class:`PeachAdapter` playing UCPOrder's Platform that records each
    action: ``seen`` holds ``(order id, action name, instance)`` in order."""

    def __init__(self, executor: Executor, name: str = "platform-orders") -> None:
        protocol = LangshawProtocol.load(PROTOCOL)
        self.adapter = PeachAdapter(name, protocol, "Platform", executor)
        self.seen: list[tuple[str, str, ActionInstance]] = []
        self._changed = asyncio.Event()

        @self.adapter.observation(*protocol.actions)
        async def observe(action: ActionInstance, performer: str) -> None:
            self.seen.append((str(action.keys.get("oid")), action.name, action))
            self._changed.set()

    async def __aenter__(self) -> OrderWatcher:
        await self.adapter.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.adapter.stop()

    def actions(self, oid: str) -> list[str]:
        """The names of the actions of order ``oid``, in the order seen."""
        return [name for order, name, _ in self.seen if order == oid]

    def instance(self, oid: str | None, name: str) -> ActionInstance | None:
        """The instance of ``name`` in order ``oid`` (any order: None), if seen."""
        return next((i for order, n, i in self.seen
                     if oid in (None, order) and n == name), None)

    async def wait_for(self, oid: str | None, name: str, seconds: float) -> ActionInstance:
        """The instance of ``name`` in order ``oid`` (the first of any order:
        None) once seen; TimeoutError after ``seconds``."""

        async def wait() -> ActionInstance:
            while True:
                self._changed.clear()
                found = self.instance(oid, name)
                if found is not None:
                    return found
                await self._changed.wait()

        return await asyncio.wait_for(wait(), seconds)

    def describe(self, instance: ActionInstance) -> str:
        """One line on an action, for a trace: its name and what it carries."""
        entry = next((instance[a] for a in ("shipment", "delivery", "cancellation", "refund",
                                            "return_entry", "adjustment") if a in instance), None)
        detail = f" ({entry.get('type')} {entry.get('id')})" if isinstance(entry, dict) else ""
        return f"{instance.name}{detail}"
