"""The decentralized model the verifier explores (:mod:`langshaw._vmodel` has
the shared one and what both share): each role has a social state of its own,
holding the instances it performed or received. A move either performs an
action enabled in the performer's own state, or delivers an instance to a role
that has not received it yet. Each performed instance is also checked against
the union of all states: where that check fails, agents acting on what they
knew did what a shared state would have refused (a conflict), and the
enactment ends there.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Any

from langshaw._vclasses import Scope
from langshaw._vmodel import _PERMANENT, End, Move, _Model, kind
from langshaw.instances import Enablement, Violation
from langshaw.model import LangshawProtocol
from langshaw.semantics import SocialState


class PeerModel(_Model):
    """Decentralized: each role acts on what it has performed or received."""

    peers = True

    def __init__(
        self,
        protocol: LangshawProtocol,
        sub_keys: int,
        collisions: bool = True,
        symmetry: bool = False,
    ) -> None:
        super().__init__(protocol, sub_keys, collisions, symmetry)
        self.role_index = {r: i for i, r in enumerate(protocol.roles)}
        # Every kind of conflict a first unsafe step taken so far broke. The
        # state keeps only whether one was taken: what follows a conflict does
        # not depend on its kind. Before it, the stubborn sets keep apart the
        # orders of unsafe steps (``_unsafe_order``), so an exploration takes a
        # first unsafe step of every kind that has one.
        self.unsafe: set[tuple[str, ...]] = set()
        self._opened: tuple[int, tuple[int, ...]] = (-1, ())
        self._known: dict[tuple[int, int, Hashable], dict[int, Any]] = {}
        self._now: list[dict[int, Any] | None] = [None] * len(protocol.roles)
        self._judged: dict[tuple[int, int], tuple[Violation, ...]] = {}
        self._delivering: dict[int, dict[int, tuple[int, list[Move]]]] = {}
        self.reset()

    def _unsafe_order(self, cls: int, moves: list[Move]) -> tuple[int, ...]:
        """Decentralized, before any unsafe step: what else a stubborn set needs
        with the enabled class ``cls``, since what the first unsafe step breaks
        is part of the state. The classes whose instances the union could judge
        differently for having seen this one (or this one for having seen
        theirs); and, where one of its instances is unsafe now, every class that
        could ever be unsafe: which of two unsafe steps comes first decides what
        is reported, so they do not commute."""
        found = self._order.get(cls)
        if found is None:
            found = self.c.clashes[cls]
            if any(self._judge(m) for m in moves):
                found = (*found, *self._open())
            self._order[cls] = found
        return found

    def _open(self) -> tuple[int, ...]:
        """The classes that could still be unsafe in a way not seen yet."""
        unsafe = self.unsafe
        if self._opened[0] != len(unsafe):
            potential = self.c.potential
            self._opened = (
                len(unsafe),
                tuple(u for u in self.c.clashes if not potential[u] <= unsafe),
            )
        return self._opened[1]

    def _token(self, cls: int) -> str:
        # A role binding an attribute afresh binds its own value, and a value of
        # its own per scope: binding it again in a sub-scope (its sayso allows
        # that) may give a value other than the one an ancestor holds.
        root = set(self.protocol.root_keys)
        below = [v for k, v in self.c.scopes[cls] if k not in root]
        where = f" in {','.join(below)}" if below else ""
        return "<{} by " + self.c.roles[cls] + where + ">"

    def reset(self) -> None:
        roles = self.protocol.roles
        self.local = {r: SocialState(self.protocol) for r in roles}
        self.union = SocialState(self.protocol)
        self.masks = [0] * len(roles)
        self.occurred: dict[tuple[str, Scope], Move] = {}
        self.performed = 0  # the instances in the union, as a mask
        # The rules the first unsafe step broke (empty while every step is safe).
        self.first: tuple[Violation, ...] = ()
        self.kinds: frozenset[tuple[str, ...]] = frozenset()  # what those rules are
        self._undo: list[tuple[Any, ...]] = []

    def key(self) -> tuple[tuple[int, ...], bool]:
        """The masks, and whether a conflict occurred (which ends the
        enactment: nothing follows it)."""
        masks = tuple(self.masks)
        if self.symmetry:
            masks = self.symmetry.canon(masks)
        return masks, bool(self.first)

    def images(self, key: Any) -> list[Any]:
        return [(masks, key[1]) for masks in self.symmetry.images(key[0])]

    def do(self, move: Move) -> None:
        role = self.role_index[move.role]
        journal: list[Any] = []
        self.local[move.role].apply([move.instance], journal)
        entry: tuple[Any, ...]
        if move.kind == "do":
            before = self.first
            if not before:
                self.first = self._judge(move)
                if self.first:
                    self.kinds = frozenset(kind(v) for v in self.first)
                    self.unsafe |= self.kinds
            shared: list[Any] = []
            self.union.apply([move.instance], shared)
            place = (self.c.actions[move.cls], self.c.scopes[move.cls])
            self.occurred[place] = move
            self._deliveries(move)
            entry = (role, journal, self.masks[role], shared, before, place, self.performed)
            self.performed |= 1 << move.ident
        else:
            entry = (role, journal, self.masks[role])
        self.masks[role] |= 1 << move.ident
        self._undo.append(entry)

    def _judge(self, move: Move) -> tuple[Violation, ...]:
        """What the union says of performing ``move`` now. The union holds
        exactly the performed instances, so the answer is kept per set of them:
        the searches ask again and again."""
        asked = (self.performed, move.ident)
        found = self._judged.get(asked)
        if found is None:
            found = self._judged[asked] = tuple(
                self.union.violations(move.instance, {move.role})
            )
        return found

    def after(
        self, gets: Sequence[Move], move: Move
    ) -> tuple[tuple[tuple[int, ...], bool], frozenset[tuple[str, ...]]]:
        """The key of the state some deliveries and then a perform lead to, and
        the kinds of conflict that perform is, without taking the steps (before
        any conflict: the searches that ask take no step past one)."""
        masks = list(self.masks)
        for get in gets:
            masks[self.role_index[get.role]] |= 1 << get.ident
        masks[self.role_index[move.role]] |= 1 << move.ident
        broken = self._judge(move)
        key = tuple(masks)
        if self.symmetry:
            key = self.symmetry.canon(key)
        return (key, bool(broken)), frozenset(kind(v) for v in broken)

    def undo(self) -> None:
        entry = self._undo.pop()
        role, journal, self.masks[role] = entry[0], entry[1], entry[2]
        self.local[self.protocol.roles[role]].undo(journal)
        if len(entry) > 3:
            self.union.undo(entry[3])
            self.first = entry[4]
            if not self.first:
                self.kinds = frozenset()
            del self.occurred[entry[5]]
            self.performed = entry[6]

    def status(self, cls: int) -> Any:
        found = self._status.get(cls)
        if found is not None:
            return found
        c = self.c
        role = c.roles[cls]
        if c.kinds[cls] == "get":
            move = self.occurred.get((c.actions[cls], c.scopes[cls]))
            if move is None:
                found = Violation("dependency", "not performed yet", attribute=c.actions[cls])
            elif self.masks[self.role_index[role]] >> move.ident & 1:
                found = Violation("duplicate", "received already")
            else:
                found = [Move(cls, "get", role, move.instance, move.ident)]
        else:
            # What a role may perform depends on its own state alone: the
            # instances it holds (and, without collisions, which key values
            # anyone used; before a conflict no role holds two values of one
            # attribute, and nothing follows a conflict). Many states share one
            # role's state, so the answers are kept per such state.
            index = self.role_index[role]
            table = self._now[index] or self._table(index)
            found = table.get(cls)
            if found is None:
                taken = None if c.collisions else self._taken(role, cls)
                outcome = taken or self.local[role].evaluate(
                    c.actions[cls], dict(c.scopes[cls])
                )
                if isinstance(outcome, Enablement) and cls < c.real:
                    found = self._instances(outcome, cls)
                else:
                    found = outcome
                table[cls] = found
        self._status[cls] = found
        return found

    def _fresh(self) -> None:
        self._now = [None] * len(self.protocol.roles)

    def _enabled(self) -> list[int]:
        # Each role's enabled perform classes are kept with the rest of what
        # its own state decides; deliveries are enabled for what occurred and
        # has not reached its receiver.
        c = self.c
        found: list[int] = []
        for index, role in enumerate(self.protocol.roles):
            if role not in c.by_role:
                continue
            table = self._table(index)
            mine = table.get(-1)
            if mine is None:
                mine = table[-1] = [
                    cls for cls in c.by_role[role] if type(self.status(cls)) is list
                ]
            found.extend(mine)
        status = self._status
        performed = self.performed
        delivering = self._delivering
        for index, mask in enumerate(self.masks):
            pending = performed & ~mask  # performed, not held: on its way here
            while pending:
                low = pending & -pending
                pending ^= low
                cls, get = delivering[low.bit_length() - 1][index]
                status[cls] = get
                found.append(cls)
        found.sort(key=c.rank.__getitem__)
        return found

    def _deliveries(self, move: Move) -> None:
        """Note, for a performed instance, per other role the class that
        delivers it there and that class's one move (kept: never changed)."""
        if move.ident in self._delivering:
            return
        name, scope = self.c.actions[move.cls], self.c.scopes[move.cls]
        self._delivering[move.ident] = {
            index: (cls, [Move(cls, "get", role, move.instance, move.ident)])
            for index, role in enumerate(self.protocol.roles)
            if role != move.role
            for cls in (self.c.get[(name, scope, role)],)
        }

    def _table(self, index: int) -> dict[int, Any]:
        """What is known of the state of the role ``index`` has now: each class's
        status, and under -1 its enabled classes."""
        table = self._now[index]
        if table is None:
            key = (index, self.masks[index], self.used())
            table = self._known.get(key)
            if table is None:
                table = self._known[key] = {}
            self._now[index] = table
        return table

    def _taken(self, role: str, cls: int) -> Violation | None:
        """Without collisions: a sub-key value of the class's scope that
        another role made and ``role`` has not received."""
        mine = self.local[role].enactment(self.root)
        everyone = self.union.enactment(self.root)
        if everyone is None:
            return None
        for key, value in self.c.scopes[cls]:
            if key in self.c.root_keys:
                continue
            if mine is not None and value in mine.values_of(key):
                continue
            if value in everyone.values_of(key):
                return Violation(
                    "collision",
                    f"{key}={value} was made by another role, and {role} has not received it",
                    action=self.c.actions[cls],
                    attribute=key,
                    path=value,
                )
        return None

    def used(self) -> Hashable:
        """What, beyond its own holdings, decides what a role may perform: the
        sub-key values anyone used, when values are fresh (no collisions)."""
        if self.c.collisions:
            return None
        everyone = self.union.enactment(self.root)
        if everyone is None:
            return ()
        return tuple(
            (key, tuple(sorted(everyone.values_of(key))))
            for key in self.protocol.keys
            if key not in self.c.root_keys
        )

    def enablers(self, cls: int, why: Violation) -> Iterator[int]:
        c = self.c
        if why.rule in _PERMANENT:
            return
        if why.rule == "collision":
            assert why.attribute is not None and why.path is not None
            yield from c.holders(why.attribute, why.path, c.roles[cls])
            return
        if c.kinds[cls] == "get":
            yield c.do[(c.actions[cls], c.scopes[cls])]
            return
        role, scope = c.roles[cls], c.scopes[cls]
        assert why.attribute is not None
        if why.rule == "dependency":
            yield from self._dependency_enablers(role, scope, why.attribute)
            return
        for index in c.binding_enablers(scope, why.attribute):
            if c.roles[index] == role:
                yield index
            else:
                yield c.get[(c.actions[index], c.scopes[index], role)]

    def _dependency_enablers(self, role: str, scope: Scope, needed: str) -> Iterator[int]:
        """What could give ``role`` the dependency ``needed`` for an action in
        ``scope``: its occurrence in a scope that could meet it, received (or
        performed, by its own role). Received out of order, an instance that
        carries it meets it too; such a carrier exists only once the dependency
        occurred in its scope, so until then that occurrence is what it takes."""
        c = self.c
        for index in c.dependency_enablers(scope, needed):
            if c.roles[index] == role or (needed, c.scopes[index]) not in self.occurred:
                yield index  # performed by the role, or to be performed first
            else:
                there = c.scopes[index]
                yield c.get[(needed, there, role)]
                for name in c.bearers[(needed, role)]:
                    yield c.get[(name, there, role)]

    def relevant(self, name: str, role: str) -> bool:
        """Can receiving an instance of ``name`` change what ``role`` may do?"""
        return name in self.c.relevant[role]

    def inflight(self, role: str) -> list[Move]:
        """Deliveries to ``role`` of every instance it has not received yet."""
        mask = self.masks[self.role_index[role]]
        return [
            Move(self.c.get[(name, scope, role)], "get", role, move.instance, move.ident)
            for (name, scope), move in self.occurred.items()
            if move.role != role and not mask >> move.ident & 1
        ]

    def performs(self, role: str) -> list[Move]:
        """What ``role`` may perform now, on what it knows."""
        self._status = {}
        self._order = {}
        self._edges = {}
        self._fresh()
        found: list[Move] = []
        for cls in self.c.by_role.get(role, ()):
            outcome = self.status(cls)
            if type(outcome) is list:
                found.extend(outcome)
        return found

    def complete(self) -> bool:
        return self.union.is_complete(self.root)

    def end(self) -> End:
        return End(
            complete=self.complete(),
            bad=bool(self.first),
            names=frozenset(name for name, _ in self.occurred),
            clauses=self._holding(self.union),
        )

    def violations(self) -> tuple[Violation, ...]:
        """The rules the first unsafe step broke, if one was taken."""
        return self.first
