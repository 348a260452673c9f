"""Symmetry of key values, for the verifier's reduced search.

The values of a sub-key (``k1``, ``k2``, ...) are names and nothing more: a
state and the state with ``k1`` and ``k2`` swapped everywhere (in every scope,
and in every abstract value bound in one, ``<x by A in k1>``) have isomorphic
futures, and every verdict the verifier reads (complete, a conflict and its
kind, which actions occurred, which clauses hold, whether a key value beyond
the pool was wanted) names no key value. So the search keeps one state per
*orbit*: its key is the least of the keys of every state the swaps turn it
into. With two values per sub-key and two sub-keys that is up to four times
fewer states.

The group is the product of the permutations of each sub-key's pool; it is cut
to at most ``LIMIT`` elements (a subgroup's orbits are still orbits: sound,
only less of a saving), since each element costs time at every state.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable

from langshaw.instances import ActionInstance

LIMIT = 24

_SCOPED = re.compile(r"^(<[^<>]* in )([^<>]*)>$")  # a value bound in a sub-scope


class Symmetry:
    """Maps interned instances (and masks of them) under each swap of key values."""

    def __init__(
        self,
        pools: dict[str, list[str]],
        instances: list[ActionInstance],
        intern: Callable[[ActionInstance], int],
    ) -> None:
        self._instances = instances
        self._intern = intern
        groups: list[list[dict[str, str]]] = []
        size = 1
        for values in pools.values():
            count = math.factorial(len(values))
            if count < 2 or size * count > LIMIT:
                continue
            size *= count
            orders = itertools.permutations(values)
            groups.append([dict(zip(values, order, strict=True)) for order in orders])
        self.swaps: list[dict[str, str]] = []
        for combo in itertools.product(*groups):
            swap = {k: v for part in combo for k, v in part.items() if k != v}
            if swap:
                self.swaps.append(swap)
        self._images: list[list[int]] = [[] for _ in self.swaps]
        self._bytes: list[dict[tuple[int, int], int]] = [{} for _ in self.swaps]
        self._canon: dict[tuple[int, ...], tuple[int, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self.swaps)

    def canon(self, masks: tuple[int, ...]) -> tuple[int, ...]:
        """The least key in the orbit of ``masks`` (one mask per role)."""
        best = self._canon.get(masks)
        if best is not None:
            return best
        best = masks
        for p in range(len(self.swaps)):
            image = tuple([self._remap(mask, p) for mask in masks])
            if image < best:
                best = image
        self._canon[masks] = best
        return best

    def images(self, masks: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Every key in the orbit of ``masks``, itself first."""
        return [masks, *(tuple(self._remap(m, p) for m in masks) for p in range(len(self.swaps)))]

    def _remap(self, mask: int, p: int) -> int:
        # Byte by byte, each byte's image kept: an instance's image never changes.
        table = self._bytes[p]
        out = 0
        at = 0
        while mask:
            byte = mask & 255
            if byte:
                found = table.get((at, byte))
                if found is None:
                    found = 0
                    for bit in range(8):
                        if byte >> bit & 1:
                            found |= 1 << self._image(p, at * 8 + bit)
                    table[(at, byte)] = found
                out |= found
            mask >>= 8
            at += 1
        return out

    def _image(self, p: int, ident: int) -> int:
        images = self._images[p]
        while len(images) <= ident:
            images.append(self._intern(self._swap(self._instances[len(images)], p)))
        return images[ident]

    def _swap(self, instance: ActionInstance, p: int) -> ActionInstance:
        swap = self.swaps[p]
        bindings = {}
        for attribute, value in instance.bindings.items():
            if isinstance(value, str):
                if value in swap:
                    value = swap[value]
                else:
                    scoped = _SCOPED.match(value)
                    if scoped:
                        values = (swap.get(v, v) for v in scoped.group(2).split(","))
                        value = f"{scoped.group(1)}{','.join(values)}>"
            bindings[attribute] = value
        return ActionInstance(instance.action, bindings)

