"""An action schema: the unit of a Langshaw protocol that agents perform.

Kept apart from :mod:`langshaw.model` so that validation, which builds actions,
sits below the protocol class that calls it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class Action:
    """An action schema: who performs it and which attributes an instance binds.

    ``keys`` are the protocol keys among the attributes (they make up an
    instance's scope) and ``dependencies`` the attributes that name other actions
    (each must have occurred first).
    """

    name: str
    actor: str
    attributes: tuple[str, ...]
    doc: str = ""
    keys: tuple[str, ...] = ()
    dependencies: tuple[str, ...] = ()
    line: int = 0

    def __repr__(self) -> str:
        return f"Action({self.actor}: {self.name}({', '.join(self.attributes)}))"
