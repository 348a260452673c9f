"""The server's counts for mandates (syncserver.mandate): one book per ledger,
the books of a MAS counting its enactments together.

A mandate's counts (how many times an agent performed an action, in an
enactment and in all; how many enactments it started) must be checked in the
ledger's turn, against the state the attempt is checked against, so that a
burst of attempts (or a batched window holding several) cannot each pass
before the others count. The book keeps them for the agents that have a
mandate only, in memory, updated as the ledger accepts, follows or reloads
batches, so it is as true as the state after a rebuild.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from langshaw import ActionInstance, LangshawProtocol, SocialState, Violation
from syncserver.mandate import Mandate, _is_root

__all__ = ["MandateBook"]


class MandateBook:
    """What each watched agent did in one protocol of one MAS. ``siblings`` is
    the list of the MAS's books (this one joins it): an agent's ``enactments``
    bound counts the enactments it started in every protocol of the MAS."""

    def __init__(
        self,
        protocol: LangshawProtocol,
        watched: Collection[str] = (),
        siblings: list[MandateBook] | None = None,
    ) -> None:
        self.root_keys = protocol.root_keys
        self.watched = frozenset(watched)
        self.siblings = siblings if siblings is not None else []
        self.siblings.append(self)
        self._per_root: Counter[tuple[str, str, tuple[Any, ...]]] = Counter()
        self._per_run: Counter[tuple[str, str]] = Counter()
        self._started: Counter[str] = Counter()

    def clear(self) -> None:
        self._per_root.clear()
        self._per_run.clear()
        self._started.clear()

    def root(self, instance: ActionInstance) -> tuple[Any, ...]:
        # .get: the counts are checked before the protocol's rules, which refuse
        # an unbound root key (Mandate.check_counts leaves such roots to them).
        return tuple(instance.bindings.get(k) for k in self.root_keys)

    def fresh(
        self, instances: Sequence[ActionInstance], state: SocialState
    ) -> set[tuple[Any, ...]]:
        """The roots ``instances`` would start: call it before the state applies them."""
        # Called before the protocol's check (ledger.accept): a root that is no
        # key (unhashable) is skipped here, and the attempt then refused there.
        return {
            r for r in map(self.root, instances) if _is_root(r) and state.enactment(r) is None
        }

    def add(
        self,
        performer: str,
        instances: Sequence[ActionInstance],
        fresh: set[tuple[Any, ...]],
        journal: list[Any] | None = None,
    ) -> None:
        """Count ``performer``'s accepted ``instances`` (``fresh``: the roots they
        started); with ``journal``, note the count so that :meth:`undo` can take it back."""
        if performer not in self.watched:
            return
        for instance in instances:
            name = instance.action.name
            self._per_root[(performer, name, self.root(instance))] += 1
            self._per_run[(performer, name)] += 1
        self._started[performer] += len(fresh)
        if journal is not None:
            journal.append((performer, list(instances), len(fresh)))

    def undo(self, journal: list[Any]) -> None:
        """Take back the counts noted in ``journal`` (and empty it): for a check
        that is undone with the state's (a clash over a shared log, then checked
        again), which would otherwise count its attempts twice."""
        for performer, instances, started in reversed(journal):
            for instance in instances:
                name = instance.action.name
                self._per_root[(performer, name, self.root(instance))] -= 1
                self._per_run[(performer, name)] -= 1
            self._started[performer] -= started
        journal.clear()

    def add_batch(self, entries: Sequence[Any], state: SocialState) -> None:
        """Count a batch's entries (``Entry``: instance and performer) the state
        is about to apply: one committed elsewhere, or one read from the log."""
        if not self.watched:
            return
        started: set[tuple[Any, ...]] = set()
        for entry in entries:
            root = self.root(entry.instance)
            fresh = state.enactment(root) is None and root not in started
            if fresh:
                started.add(root)
            self.add(entry.performer, [entry.instance], {root} if fresh else set())

    def check(
        self,
        mandate: Mandate,
        performer: str,
        instances: Sequence[ActionInstance],
        state: SocialState,
    ) -> Violation | None:
        """The first count ``instances`` would take past ``mandate``'s limits."""
        return mandate.check_counts(performer, instances, _Counts(self, performer, state))


class _Counts:
    """:class:`syncserver.mandate.Counts` of one agent, from the book and the state."""

    def __init__(self, book: MandateBook, agent: str, state: SocialState) -> None:
        self.book, self.agent, self.state = book, agent, state

    def performed(self, action: str, root: tuple[Any, ...] | None) -> int:
        if root is None:
            return self.book._per_run[(self.agent, action)]
        return self.book._per_root[(self.agent, action, root)]

    def started(self) -> int:
        return sum(book._started[self.agent] for book in self.book.siblings)

    def root(self, instance: ActionInstance) -> tuple[Any, ...]:
        return self.book.root(instance)

    def exists(self, root: tuple[Any, ...]) -> bool:
        return self.state.enactment(root) is not None
