"""The transition systems the verifier explores: one root enactment, over the
enactment semantics itself (every "is this enabled" is asked of a SocialState).

* :class:`SharedModel`: one shared social state, as on a SyncServer. A move
  performs an action; the state is the set of instances that occurred.
* :class:`~langshaw._vpeer.PeerModel` (decentralized): each role has a social state of its own,
  holding the instances it performed or received. A move either performs an
  action enabled in the performer's own state, or delivers an instance to a role
  that has not received it yet. Each performed instance is also checked against
  the union of all states: where that check fails, agents acting on what they
  knew did what a shared state would have refused (a safety violation, or
  conflict). A conflict ends the enactment: no move follows it.

Moves fall into classes: perform action A in scope S; deliver A's instance in S
to role R. Scopes take key values from a fixed pool: ``r`` for the root keys,
``k1 .. kN`` for each other key. A class knows statically which classes it may
interfere with (``dependents``), and at a state what could enable it (from the
rule that disables it): what a stubborn-set reduction needs. Why these
relations are sound is argued in docs/semantics.md ("How the verifier explores").

Values are abstract tokens: on a shared state ``<a>`` for every binding of
``a`` (equal values, as every binding of an attribute in a scope must be); in
the decentralized model ``<a by R>`` (``<a by R in k1>`` in a sub-scope), so
that two roles binding one attribute independently, or one role binding it
again in a sub-scope, disagree, as they may.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from langshaw._vclasses import ROOT, Classes
from langshaw._vsymmetry import Symmetry
from langshaw.instances import ABSENT, ActionInstance, Enablement, Violation
from langshaw.model import LangshawProtocol
from langshaw.semantics import SocialState

_PERMANENT = frozenset({"duplicate", "nono", "nogo"})  # occurrences are never undone


def kind(v: Violation) -> tuple[str, ...]:
    """What a conflict is reported as: a nono pair either way round, a nogo, or
    an action carrying an attribute that clashes."""
    if v.rule == "nono":
        return (v.rule, *sorted((v.action or "", v.attribute or "")))
    return (v.rule, v.action or "", v.attribute or "")

@dataclass(frozen=True, slots=True)
class Move:
    """One transition: ``kind`` "do" (``role`` performs) or "get" (``role``
    receives ``instance``); ``ident`` is the interned instance."""

    cls: int
    kind: str
    role: str
    instance: ActionInstance
    ident: int


@dataclass(frozen=True, slots=True)
class End:
    """What holds at a state where nothing more can happen."""

    complete: bool
    bad: bool
    names: frozenset[str]  # actions that occurred
    clauses: frozenset[int]  # completion clauses that hold


class _Model:
    """What both models share: classes, interning, the stubborn-set closure."""

    peers = False
    kinds: frozenset[tuple[str, ...]] = frozenset()  # of the first unsafe step, if any

    def __init__(
        self,
        protocol: LangshawProtocol,
        sub_keys: int,
        collisions: bool = True,
        symmetry: bool = False,
    ) -> None:
        self.protocol = protocol
        self.c = Classes(protocol, sub_keys, self.peers, collisions)
        self.root = tuple(ROOT for _ in protocol.root_keys)
        self.idents: dict[tuple[str, tuple[tuple[str, Any], ...]], int] = {}
        self.instances: list[ActionInstance] = []
        # With ``symmetry``, a state's key is the least in its orbit under swaps
        # of key values (langshaw._vsymmetry): one state per orbit is explored.
        sub_pools = {k: v for k, v in self.c.pool.items() if k not in self.c.root_keys}
        self.symmetry = Symmetry(sub_pools if symmetry else {}, self.instances, self.intern)
        self._status: dict[int, Any] = {}
        self._order: dict[int, tuple[int, ...]] = {}
        self._edges: dict[int, tuple[int, ...]] = {}
        self.tokens = [self._token(cls) for cls in range(self.c.real)]
        # Some reachable state enables an action in a scope beyond the key pool.
        # Until one is seen, every stubborn set holds the sentinel classes
        # (disabled, with what could enable them), so that the reduction cannot
        # skip the states where one is enabled.
        self.bound_reached = False

    def _token(self, cls: int) -> str:
        """The abstract value a class binds fresh (``{}``: the attribute)."""
        return "<{}>"

    def intern(self, instance: ActionInstance) -> int:
        ident = (instance.name, tuple(sorted(instance.bindings.items())))
        found = self.idents.get(ident)
        if found is None:
            found = self.idents[ident] = len(self.instances)
            self.instances.append(instance)
        return found

    # The model's own state ------------------------------------------------------

    def reset(self) -> None:
        raise NotImplementedError

    def key(self) -> Hashable:
        """The state, as the search remembers it (up to symmetry, if on)."""
        raise NotImplementedError

    def images(self, key: Any) -> list[Any]:
        """Every key of the states ``key`` stands for (itself first)."""
        raise NotImplementedError

    def do(self, move: Move) -> None:
        raise NotImplementedError

    def undo(self) -> None:
        raise NotImplementedError

    def violations(self) -> tuple[Violation, ...]:
        """The rules the first unsafe step broke, if one was taken."""
        raise NotImplementedError

    def status(self, cls: int) -> Any:
        """The moves of an enabled class (a non-empty list), or why it is disabled
        (a Violation), at the current state."""
        raise NotImplementedError

    def end(self) -> End:
        raise NotImplementedError

    def enablers(self, cls: int, why: Violation) -> Iterator[int]:
        raise NotImplementedError

    # Moves ------------------------------------------------------------------------

    def moves(self) -> list[Move]:
        """Every move enabled now (none after a conflict: it ends the enactment)."""
        if self.violations():
            return []
        self._status = {}
        self._order = {}
        self._edges = {}
        self._fresh()
        self._watch()
        found: list[Move] = []
        for cls in range(self.c.real):
            outcome = self.status(cls)
            if type(outcome) is list:
                found.extend(outcome)
        return found

    def _fresh(self) -> None:
        """A new state: forget what was worked out for the last one."""

    def _enabled(self) -> list[int]:
        """The enabled classes, in the order seeds are tried."""
        return [cls for cls in self.c.seeds if type(self.status(cls)) is list]

    def _watch(self) -> tuple[int, ...]:
        """The sentinels a stubborn set must hold here (none once one was seen
        enabled: then the bound is known to be reached)."""
        if self.bound_reached or not self.c.beyond:
            return ()
        for cls in self.c.beyond:
            if isinstance(self.status(cls), Enablement):
                self.bound_reached = True
                return ()
        return tuple(self.c.beyond)

    def reduced(self) -> list[Move]:
        """The enabled moves of a stubborn set: enough to reach every deadlock,
        and a state beyond the bound if any is reachable."""
        if self.violations():
            return []  # a conflict ends the enactment
        self._status = {}
        self._order = {}
        self._edges = {}
        self._fresh()
        watched = self._watch()
        best: list[Move] | None = None
        tried: set[int] = set()
        for seed in self._enabled():
            chosen = self._closure(
                seed, len(best) if best is not None else None, watched, tried
            )
            tried.add(seed)
            if chosen is not None and (best is None or len(chosen) < len(best)):
                best = chosen
                if len(best) == 1:
                    break
        return best or []

    def _closure(
        self,
        seed: int,
        limit: int | None,
        watched: tuple[int, ...] = (),
        tried: set[int] | frozenset[int] = frozenset(),
    ) -> list[Move] | None:
        """The moves of the stubborn set ``seed`` brings in, or None when it
        cannot beat ``limit`` moves: it holds too many, or it holds a seed
        already ``tried`` (whose set, inside this one, did not beat it)."""
        members = {seed, *watched}
        stack = [seed, *watched]
        moves: list[Move] = []
        status = self._status
        while stack:
            cls = stack.pop()
            outcome = status.get(cls)
            if outcome is None:
                outcome = self.status(cls)
            if type(outcome) is list:
                moves.extend(outcome)
                if limit is not None and len(moves) >= limit:
                    return None  # no better than the best so far
            following = self._edges.get(cls)
            if following is None:
                following = self._following(cls)
            for other in following:
                if other not in members:
                    if other in tried:
                        return None
                    members.add(other)
                    stack.append(other)
        return moves

    def _following(self, cls: int) -> tuple[int, ...]:
        """What a stubborn set holding ``cls`` must also hold: for an enabled
        class, what it may interfere with; for a disabled one, what could
        enable it."""
        found = self._edges.get(cls)
        if found is None:
            outcome = self.status(cls)
            if type(outcome) is list:
                found = self.c.dependents[cls]
                if cls in self.c.clashes and not self.violations():
                    found = (*found, *self._unsafe_order(cls, outcome))
            else:
                found = tuple(self.enablers(cls, outcome))
            self._edges[cls] = found
        return found

    def _unsafe_order(self, cls: int, moves: list[Move]) -> tuple[int, ...]:
        """What else a stubborn set needs with the enabled class ``cls``
        before any unsafe step (decentralized only: a shared state has none)."""
        return ()

    def _instances(self, enablement: Enablement, cls: int) -> list[Move]:
        """The instances of an enabled perform class: each choice of binding or
        leaving absent the optional attributes a completion clause names."""
        base = {k: v for k, v in enablement.fixed.items() if v is not ABSENT}
        free = [a for a in enablement.to_bind if a in self.c.choices]
        token = self.tokens[cls]
        for attribute in enablement.to_bind:
            base[attribute] = token.format(attribute)
        moves = []
        role = self.c.roles[cls]
        for mask in range(2 ** len(free)):
            bindings = dict(base)
            for i, attribute in enumerate(free):
                if mask & (1 << i):
                    del bindings[attribute]
            instance = ActionInstance(enablement.action, bindings)
            moves.append(Move(cls, "do", role, instance, self.intern(instance)))
        return moves

    def _holding(self, state: SocialState) -> frozenset[int]:
        enactment = state.enactment(self.root)
        if enactment is None:
            return frozenset()
        scopes = enactment.scopes.values()
        return frozenset(
            i
            for i, clause in enumerate(self.protocol.completion)
            if any(s.bindings.get(n, ABSENT) is not ABSENT for s in scopes for n in clause)
        )


class SharedModel(_Model):
    """One shared social state: attempts serialized, each checked as it comes."""

    def __init__(
        self,
        protocol: LangshawProtocol,
        sub_keys: int,
        collisions: bool = True,
        symmetry: bool = False,
    ) -> None:
        super().__init__(protocol, sub_keys, collisions, symmetry)  # one state: no collisions
        self.reset()

    def reset(self) -> None:
        self.state = SocialState(self.protocol)
        self.mask = 0
        self._undo: list[tuple[list[Any], int]] = []

    def key(self) -> int:
        if self.symmetry:
            return self.symmetry.canon((self.mask,))[0]
        return self.mask

    def images(self, key: Any) -> list[Any]:
        return [masks[0] for masks in self.symmetry.images((key,))]

    def do(self, move: Move) -> None:
        journal: list[Any] = []
        self.state.apply([move.instance], journal)
        self._undo.append((journal, self.mask))
        self.mask |= 1 << move.ident

    def undo(self) -> None:
        journal, self.mask = self._undo.pop()
        self.state.undo(journal)

    def status(self, cls: int) -> Any:
        found = self._status.get(cls)
        if found is None:
            outcome = self.state.evaluate(self.c.actions[cls], dict(self.c.scopes[cls]))
            if isinstance(outcome, Enablement) and cls < self.c.real:
                found = self._instances(outcome, cls)
            else:
                found = outcome
            self._status[cls] = found
        return found

    def enablers(self, cls: int, why: Violation) -> Iterator[int]:
        if why.rule in _PERMANENT:
            return iter(())
        scope = self.c.scopes[cls]
        assert why.attribute is not None
        if why.rule == "dependency":
            return self.c.dependency_enablers(scope, why.attribute)
        return self.c.binding_enablers(scope, why.attribute)  # sayso, or ambiguous

    def complete(self) -> bool:
        return self.state.is_complete(self.root)

    def end(self) -> End:
        names = frozenset(
            self.instances[i].name for i in range(self.mask.bit_length()) if self.mask >> i & 1
        )
        return End(
            complete=self.complete(),
            bad=False,
            names=names,
            clauses=self._holding(self.state),
        )

    def violations(self) -> tuple[Violation, ...]:
        return ()
