"""The agent's side of a mandate (syncserver.mandate): its counts, its human.

The adapter checks each attempt against its agent's mandate before it leaves
the agent, with the counts it can see: the agent's own actions in the
adapter's view of the log, and its attempts still in flight (so that a burst of
concurrent attempts cannot each see the count before the others land). Where a
clause needs a human's approval, the adapter asks its approver and refuses
without one, or when the approver does not answer in time (an approver that
hangs must not hold the attempt, and the count, for ever). The SyncServer
checks the same clauses again with its own counts (all but approval), so an
agent that skips its adapter gains nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from langshaw import ActionInstance, SocialState, Violation
from peach.errors import ActionRejected
from syncserver.mandate import RULE, Mandate

__all__ = ["APPROVE_TIMEOUT", "Approver", "MandateRefused"]

#: Asked before an attempt the mandate reserves for a human: ``approve(agent,
#: instances)`` is True to let it go. The CLI's asks at the terminal.
Approver = Callable[[str, Sequence[ActionInstance]], Awaitable[bool]]

APPROVE_TIMEOUT = 300.0
"""Seconds an approver is given to answer (``PeachAdapter(approve_timeout=)``):
long enough for a human at a terminal, short enough that an approver that
hangs does not hold the attempt, and its place in the mandate's counts, for
ever. Past it the approver is cancelled and the attempt refused."""


class MandateRefused(ActionRejected):
    """An attempt refused by the agent's mandate before it left the agent
    (rule ``mandate``; the message names the clause)."""


class PeachAdapter(Protocol):
    """What the guard reads of its adapter (peach.adapter imports this module)."""

    name: str
    approve: Approver | None
    approve_timeout: float
    executor: Any
    protocol: Any

    @property
    def state(self) -> SocialState: ...

    def enactments(self) -> list[tuple[Any, ...]]: ...

    def history(self, root: tuple[Any, ...]) -> list[tuple[int, ActionInstance, str]]: ...


class _Counts:
    """:class:`syncserver.mandate.Counts` as one adapter sees them.

    What the agent did is counted once from the adapter's view (when first
    asked, and again if the adapter gets another view), then batch by batch as
    the view applies them (:meth:`applied`): a check costs the same however
    long the agent's history, which it read whole at every attempt before."""

    def __init__(self, adapter: PeachAdapter, flying: list[Sequence[ActionInstance]]) -> None:
        self.adapter = adapter
        self.flying = flying
        self._view: Any = None  # the view counted (None: not counted yet)
        self._per_root: Counter[tuple[str, tuple[Any, ...]]] = Counter()
        self._per_run: Counter[str] = Counter()
        self._started = 0

    def root(self, instance: ActionInstance) -> tuple[Any, ...]:
        # .get: an unbound root key is the protocol's to refuse, not a KeyError.
        keys = self.adapter.state.protocol.root_keys
        return tuple(instance.bindings.get(k) for k in keys)

    def exists(self, root: tuple[Any, ...]) -> bool:
        return self.adapter.state.enactment(root) is not None or any(
            self.root(i) == root for items in self.flying for i in items
        )

    def performed(self, action: str, root: tuple[Any, ...] | None) -> int:
        self._sync()
        done = self._per_run[action] if root is None else self._per_root[(action, root)]
        return done + sum(
            1
            for items in self.flying
            for i in items
            if i.action.name == action and (root is None or self.root(i) == root)
        )

    def started(self) -> int:
        """The enactments the agent started in every protocol of the MAS: this
        adapter's, and those of its adapters in the executor's other protocols
        (one each), with their attempts in flight."""
        adapter = self.adapter
        total = self.started_here()
        seen = {getattr(adapter.protocol, "name", "")}
        for other in getattr(adapter.executor, "_adapters", ()):
            protocol = getattr(other.protocol, "name", "")
            if other.name == adapter.name and protocol not in seen:
                seen.add(protocol)
                guard = getattr(other, "_guard", None)
                counts = guard.counts if guard is not None else _Counts(other, _flying(other))
                total += counts.started_here()
        return total

    def started_here(self) -> int:
        """The enactments the agent started in this adapter's protocol, and
        those its attempts in flight would start."""
        self._sync()
        fresh = {
            root
            for items in self.flying
            for i in items
            if self.adapter.state.enactment(root := self.root(i)) is None
        }
        return self._started + len(fresh)

    def applied(self, batch: Any) -> None:
        """A batch the adapter's view applied: count the agent's entries in it."""
        view = getattr(self.adapter, "_view", None)
        if view is None or view is not self._view:
            return  # not counted yet: counted from the view when asked
        me, history = self.adapter.name, view.history
        for entry in batch.entries:
            if entry.performer != me:
                continue
            instance = entry.instance
            root = self.root(instance)
            self._per_root[(instance.action.name, root)] += 1
            self._per_run[instance.action.name] += 1
            first = history.get(root)
            if first and first[0][1] is instance:  # this entry started the enactment
                self._started += 1

    def _sync(self) -> None:
        """Count from the view, if it is not the one counted."""
        adapter = self.adapter
        view = getattr(adapter, "_view", None)
        if view is self._view and view is not None:
            return
        self._view = view
        self._per_root.clear()
        self._per_run.clear()
        self._started = 0
        me = adapter.name
        for root in adapter.enactments():
            history = adapter.history(root)
            if history and history[0][2] == me:
                self._started += 1
            for _, instance, who in history:
                if who == me:
                    self._per_root[(instance.action.name, root)] += 1
                    self._per_run[instance.action.name] += 1


#: The attempts in flight of each agent in each protocol, by executor: shared by
#: every guard of that agent there, so that neither a mandate set anew while
#: attempts fly (a new guard) nor a second adapter of the agent on the same
#: executor starts from an empty list and lets a burst past the count.
_FLYING: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], list[Any]]] = (
    weakref.WeakKeyDictionary()
)


def _flying(adapter: PeachAdapter) -> list[Sequence[ActionInstance]]:
    key = (adapter.name, getattr(adapter.protocol, "name", ""))
    try:
        return _FLYING.setdefault(adapter.executor, {}).setdefault(key, [])
    except TypeError:  # an executor that cannot be weakly referenced: the guard's own
        return []


class MandateGuard:
    """One adapter's mandate: checked, and approved, around each attempt."""

    def __init__(self, adapter: PeachAdapter, mandate: Mandate) -> None:
        self.adapter = adapter
        self.mandate = mandate
        self._flying = _flying(adapter)
        self.counts = _Counts(adapter, self._flying)

    @contextlib.asynccontextmanager
    async def admit(self, items: Sequence[ActionInstance]) -> AsyncIterator[None]:
        """Raise MandateRefused, or hold ``items`` as in flight while the block
        attempts them (the check and the hold happen with no await between)."""
        adapter = self.adapter
        violation = self.mandate.check(adapter.name, items, self.counts, adapter.state)
        if violation is not None:
            raise MandateRefused(violation, list(items))
        self._flying.append(items)
        try:
            needed = self.mandate.needs_approval(items)
            if needed:
                await self._approved(items, needed)
            yield
        finally:
            self._flying.remove(items)

    async def _approved(self, items: Sequence[ActionInstance], needed: list[str]) -> None:
        what = ", ".join(needed)
        approve = self.adapter.approve  # read now: it may be set after the mandate
        if approve is None:
            reason = (
                f"{what} needs a human's approval and no one is asked here "
                "(give the adapter an approver; strabo agent asks at the terminal, "
                "or --yes grants it)"
            )
        else:
            # Read now too; the wait is bounded (the approver is cancelled past
            # it), and ``admit`` releases the count once this refuses.
            timeout = getattr(self.adapter, "approve_timeout", APPROVE_TIMEOUT)
            bound = asyncio.timeout(timeout)
            try:
                async with bound:
                    answer = await approve(self.adapter.name, list(items))
                if bound.expired():  # it answered, but after it was given up on
                    raise TimeoutError
                # True only: an approver that returns "no", or any other truthy
                # non-answer, has not said yes.
                if answer is True:
                    return
                reason = f"{what} was not approved by the principal"
            except TimeoutError as exc:
                reason = (
                    f"{what} was not approved within {timeout:g} s (the approver did "
                    "not answer; PeachAdapter(approve_timeout=) sets the wait)"
                    if bound.expired()
                    else f"{what} could not be approved: TimeoutError: {exc}"
                )
            except Exception as exc:  # an approver that fails approves nothing
                reason = f"{what} could not be approved: {type(exc).__name__}: {exc}"
        raise MandateRefused(
            Violation(
                RULE,
                f"mandate approval = {sorted(self.mandate.approval)}: {reason}",
                action=needed[0],
            ),
            list(items),
        )
