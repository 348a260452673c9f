"""A hostile review of commit d2ccc02 ("the reduction knows carrying is not
binding", ``langshaw/_vclasses.py`` ``_interfere``): decentralized, a binding
above an inheriting action's scope was made to interfere only when the upper
action's role may bind the attribute.

That misses one case. An action carries the value its performer holds in the
*nearest* enclosing scope that binds the attribute, and two enclosing scopes of
one size (``{k}`` and ``{j}`` above ``{k, j}``) that hold different values
leave it ambiguous (rule ``bound``: not enabled). A carrier in ``{j}`` copies
the root's value into ``{j}``: for its own role, that makes an action in
``{k, j}`` (which read the ``{k}`` value alone) ambiguous. So a carrier that
binds nothing new still disables another action of the same role, and the
reduction, taking the carrier first, reported that action dead.

Each test compares the reduced exploration with every interleaving (and the
naive explorer of tests/langshaw/naive.py), so each fails on the reduction
that misses the order.
"""

from __future__ import annotations

import pytest

from langshaw import LangshawProtocol
from langshaw._vclasses import Classes
from langshaw._vpeer import PeerModel
from langshaw._vsearch import Search
from langshaw.verify import _abstract, verify
from tests.langshaw.naive import explore

# B binds y at the root (X0) and again in {k} (X1, its own value there); A may
# not bind y: X3 in {j} carries the root's value, X2 in {k, j} the {k} one.
# Once A performed X3, its own state holds two values of y one level above
# {k, j}, and X2 is never enabled; before it, X2 is.
SAME_ROLE = """P
who A, B
what id key, k key, j key, X4
do
  B : X0(id, y)
  B : X1(id, k, X0, x, y)
  A : X2(id, k, j, X0, X1, x, y)
  A : X3(id, j, X0, y)
  A : X4(id, j, X0, y)
sayso
  B : x
  B : y
"""


def outcomes(text: str, reduce: bool, collisions: bool) -> set[str]:
    """The deadlocks (as sets of instances per role), the actions and clauses
    any deadlock holds, and the kinds of conflict: what the verdicts are read
    from (tests/langshaw/test_verify.py's ``outcomes``, with ``collisions``)."""
    model = PeerModel(_abstract(LangshawProtocol.parse(text)), 1, collisions)
    search = Search(model, reduce=reduce, max_states=20_000)
    assert search.explore()
    found = {repr(sorted(model.unsafe, key=repr))}
    found.add(repr(sorted(set().union(*(e.names for e in search.ends.values())))))
    found.add(repr(sorted(set().union(*(e.clauses for e in search.ends.values())))))
    for masks, bad in search.ends:
        if not bad:
            found.add(repr([
                sorted(
                    model.instances[i].name + repr(sorted(model.instances[i].bindings.items()))
                    for i in range(m.bit_length())
                    if m >> i & 1
                )
                for m in masks
            ]))
    return found


@pytest.mark.parametrize("collisions", [True, False], ids=["collisions", "fresh"])
def test_a_carrier_that_makes_its_own_roles_inheritance_ambiguous_is_not_skipped(
    collisions: bool,
) -> None:
    assert outcomes(SAME_ROLE, True, collisions) == outcomes(SAME_ROLE, False, collisions)


@pytest.mark.parametrize("sub_keys", [1, 2])
def test_the_verdicts_agree_with_and_without_the_reduction(sub_keys: int) -> None:
    protocol = LangshawProtocol.parse(SAME_ROLE)
    full = verify(protocol, semantics="decentralized", reduce=False, sub_keys=sub_keys)
    reduced = verify(protocol, semantics="decentralized", reduce=True, sub_keys=sub_keys)
    assert full.verdict == "ok" and full.dead == {}
    assert (reduced.verdict, reduced.dead) == (full.verdict, full.dead)


def test_the_naive_explorer_finds_x2_enabled() -> None:
    naive = explore(LangshawProtocol.parse(SAME_ROLE), "decentralized", sub_keys=1)
    assert naive is not None and naive.dead == set()


def test_the_carrier_and_the_action_below_it_are_dependent() -> None:
    c = Classes(_abstract(LangshawProtocol.parse(SAME_ROLE)), 1, peers=True)
    carrier = c.do[("X3", (("id", "r"), ("j", "j1")))]
    below = c.do[("X2", (("id", "r"), ("k", "k1"), ("j", "j1")))]
    assert below in c.dependents[carrier]



def test_the_fix_keeps_incremental_ucp_reduced() -> None:
    """The change that let carriers commute was for IncrementalUCP (one
    sub-key, no two scopes of a size above another): it keeps its 61 states
    decentralized (not 17,714), where the fix asks for the order only when
    a scope beside the carrier's can hold the attribute."""
    from tests.conftest import load

    report = verify(load("incremental-ucp.lsh"), semantics="decentralized")
    assert report.ok and report.states < 1_000, report.states
