"""A hostile review of the verifier (commit 16d5403, "Verifier soundness", and
what followed it): protocols built to break the rules the reduction and the
trace searches rely on, each checked against the naive explorer
(``tests/langshaw/naive.py``), plus robustness (odd bounds, odd protocols, the
CLI) and determinism.

Each finding is a regression test now that it is fixed (findings 1 and 2 are
moot since a conflict ends the enactment); the rest pins down what held up.
Every protocol here is small: the whole file runs in
about ten seconds.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from langshaw import LangshawError, LangshawProtocol, SocialState
from langshaw.instances import ActionInstance
from langshaw.verify import Report, _abstract, verify
from tests.conftest import FIXTURES, PROTOCOLS, ROOT
from tests.langshaw.naive import explore
from tests.langshaw.randproto import generate, random_protocol
from tests.langshaw.test_differential import compare, from_naive, from_report
from tests.langshaw.test_verify import strabo

FAULTY = FIXTURES / "lsh" / "faulty"


def parse(text: str) -> LangshawProtocol:
    return LangshawProtocol.parse(text)


# Finding 1: one role binding an attribute again in a sub-scope --------------------
#
# B binds y in the root (Start) and again in (id, k) (Pay); A's Go inherits the
# root's y into (id, k). When Go and Pay race, C receives both and keeps the
# first: holding Go's value, C's W (in (id, k, j)) inherits one value from
# (id, k) and (id, j) alike; holding Pay's, the two enclosing scopes disagree
# and W is never enabled. With Fin excluded (A did Go), the enactment is stuck.
#
# The verifier treats the two deliveries to C as commuting and does not record
# which value C kept: ``Classes.carried`` (and so ``PeerModel.lost`` and the
# get/get interference) counts only attributes two roles may bind or that are
# optional and named by completion, not the third way an attribute holds two
# values in one scope, which ``Classes._rebound`` does know (a role binding it
# afresh below a scope where it bound it already). The two orders merge into
# one state, and whichever the search meets first decides: here, "live".

REBIND_RACE = """\
RebindRace
who A, B, C
what id key, k key, j key, W or Fin
do
  B: Start(id, y)
  A: Open(id, k, Start)
  A: Go(id, k, Open, y)
  B: Pay(id, k, Open, y)
  A: Fin(id, k, Pay)
  A: Side(id, j, Start, y)
  C: W(id, k, j, Go, Side, y)
sayso
  B: y
nono
  Fin Go
nogo
  Pay -/> Go
  Go -/> Pay
"""


def test_the_rebind_race_replays_to_a_stuck_state() -> None:
    """By hand, through SocialState: C holds Pay's value in (id, k1), and W
    is not enabled there; A did Go, so Fin is excluded. No continuation
    completes (nothing else is left for anyone to do)."""
    p = _abstract(parse(REBIND_RACE))
    act = p.actions
    start = ActionInstance(act["Start"], {"id": "r", "y": "yB"})
    open_ = ActionInstance(act["Open"], {"id": "r", "k": "k1", "Start": True})
    go = ActionInstance(act["Go"], {"id": "r", "k": "k1", "Open": True, "y": "yB"})
    pay = ActionInstance(act["Pay"], {"id": "r", "k": "k1", "Open": True, "y": "yBk1"})
    side = ActionInstance(act["Side"], {"id": "r", "j": "j1", "Start": True, "y": "yB"})
    c = SocialState(p)
    for instance in (start, open_, side, pay, go):  # Pay before Go
        c.apply([instance])
    outcome = c.evaluate("W", {"id": "r", "k": "k1", "j": "j1"})
    assert getattr(outcome, "rule", None) == "bound"  # the enclosing scopes disagree
    other = SocialState(p)
    for instance in (start, open_, side, go, pay):  # Go before Pay
        other.apply([instance])
    assert other.evaluate("W", {"id": "r", "k": "k1", "j": "j1"}).to_bind == ()  # type: ignore[union-attr]


def _agrees(protocol: LangshawProtocol, report: Report, sub_keys: int) -> list[str]:
    naive = explore(protocol, report.semantics, sub_keys=sub_keys)
    assert naive is not None
    return from_report(protocol, report).differences(from_naive(naive))


# Findings 1 and 2 needed a state after a conflict to count as stuck (16d5403,
# 00be8af): the order in which a role received two clashing values decided
# what it held. Since a conflict ends the enactment, nothing after one is
# claimed; these stay as regression tests against the naive explorer.


@pytest.mark.parametrize("reduce", [True, False], ids=["reduced", "full"])
def test_a_value_rebound_in_a_sub_scope_is_held_in_delivery_order(reduce: bool) -> None:
    protocol = parse(REBIND_RACE)
    report = verify(protocol, semantics="decentralized", sub_keys=1, reduce=reduce)
    assert report.complete
    assert _agrees(protocol, report, 1) == []


# Finding 2: the stuck trace, when the order of deliveries decides -----------------
#
# Two roles may bind x (A > B), so the exploration tells the orders apart, and
# finds the stuck deadlock: C received Put before Go. The stuck-trace search
# added after 16d5403 (``Search.stuck_trace``) only delivers, at the end of a
# path, every pending instance in the order they were performed (and then
# subsets), on the argument that "a state that stays able to complete with all
# of them delivered stays able with fewer". With first-value-kept that is false:
# delivering Put alone to C is stuck, delivering Go then Put is not. Put always
# comes after Go here (it needs Mid, which needs Go), so the search never
# delivers Put first, finds no stuck state and raises AssertionError("a stuck
# deadlock was reachable"), through verify() and `strabo check --verify`.

PENDING_ORDER = """\
Pend
who A, B, C, D
what id key, k key, j key, W or Alt
do
  A: Start(id, x)
  D: Go(id, k, Start, x)
  A: Mid(id, Go)
  B: Put(id, k, Start, Mid, x)
  D: Alt(id, k, Put)
  C: Side(id, j, Start, x)
  C: W(id, k, j, Go, Side, x)
sayso
  A > B: x
nono
  Alt Go
nogo
  Put -/> Go
  Go -/> Put
"""


def test_the_stuck_trace_search_survives_delivery_order_after_a_clash() -> None:
    protocol = parse(PENDING_ORDER)
    report = verify(protocol, semantics="decentralized", sub_keys=1)
    assert report.complete
    assert _agrees(protocol, report, 1) == []


def test_the_cli_prints_no_traceback_for_the_pending_order_protocol(tmp_path: Path) -> None:
    path = tmp_path / "pend.lsh"
    path.write_text(PENDING_ORDER)
    result = strabo(
        "check", "--verify", "--semantics", "decentralized", "--sub-keys", "1", str(path)
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1  # unsafe, whatever else


# Finding 3: one ambiguous attribute hides another mismatch --------------------------
#
# SocialState.violations (new in 16d5403) is meant to list every rule a step
# breaks ("two attributes: each is its own kind of conflict"). But it asks
# _bindings for the values the instance must carry, and _bindings returns one
# Violation at the first attribute whose enclosing scopes disagree: the other
# attributes are not compared. Here Z's x is ambiguous on the union (A bound it
# in (id, k1) and in (id, j1)) and Z's y differs from C's Y in the same scope.
# Y needs Q, so whenever Z's y clashes x does too, and the kind ('bound', Z, y)
# is never reported, though the naive explorer finds it (5 actions, 2 deliveries).

MULTI = """\
Multi
who A, B, C
what id key, k key, j key, Z
do
  A: Start(id)
  A: P(id, k, Start, x)
  A: Q(id, j, Start, x)
  B: Z(id, k, j, P, x, y)
  C: Y(id, k, j, Q, y)
sayso
  A: x
  B > C: y
"""


def _multi_union() -> tuple[SocialState, ActionInstance]:
    p = _abstract(parse(MULTI))
    act = p.actions
    union = SocialState(p)
    for name, bindings in (
        ("Start", {"id": "r"}),
        ("P", {"id": "r", "k": "k1", "Start": True, "x": "xk"}),
        ("Q", {"id": "r", "j": "j1", "Start": True, "x": "xj"}),
        ("Y", {"id": "r", "k": "k1", "j": "j1", "Q": True, "y": "yC"}),
    ):
        assert union.attempt([ActionInstance(act[name], bindings)]) is None
    z = ActionInstance(act["Z"], {"id": "r", "k": "k1", "j": "j1", "P": True, "x": "xk", "y": "yB"})
    return union, z


def test_the_oracle_finds_both_attributes_of_z() -> None:
    result = explore(parse(MULTI), "decentralized", sub_keys=1)
    assert result is not None
    assert result.kinds.get(("bound", "Z", "y")) == (5, 2)
    assert result.kinds.get(("bound", "Z", "x")) == (4, 1)


def test_violations_lists_a_mismatch_beside_an_ambiguous_attribute() -> None:
    union, z = _multi_union()
    broken = union.violations(z, {"B"})
    assert sorted((v.rule, v.attribute) for v in broken) == [("bound", "x"), ("bound", "y")]


def test_violations_still_lists_the_ambiguous_attribute() -> None:
    union, z = _multi_union()
    broken = union.violations(z, {"B"})
    assert ("bound", "x") in {(v.rule, v.attribute) for v in broken}
    assert union.check([z], {"B"}) is not None


def test_every_attribute_z_breaks_is_a_kind_of_conflict() -> None:
    protocol = parse(MULTI)
    report = verify(protocol, semantics="decentralized", sub_keys=1)
    kinds = dict(from_report(protocol, report).kinds)
    assert kinds.get("bound Z y") == (5, 2)


# Finding 4 (minor): max_states is not a cap on a deep, narrow exploration -----------
#
# Search._visit checks len(self.good) >= max_states on entering a state, but a
# state joins self.good only once all below it are done: a path is never
# counted while it is being walked. A three-state protocol explored with
# max_states=1 reports explored_all and a verdict, 3 states; on Purchase,
# max_states=1 gives up at 6 and the CLI says "more than 6 states".

ONE_ROLE = """\
P
who A
what id key, Done
do
  A: Go(id)
  A: Done(id, Go)
"""


@pytest.mark.parametrize("semantics", ["shared", "decentralized"])
def test_a_report_never_claims_more_states_than_its_cap(semantics: str) -> None:
    report = verify(parse(ONE_ROLE), semantics=semantics, max_states=1)
    assert not report.complete or report.states <= 1, (report.complete, report.states)


# Finding 5: a deep enactment is a RecursionError, whatever max_states says -------------
#
# Search._visit (and good_here) recurse once per step of a path, and finding 4
# means max_states does not bound a path's length: with enough key values one
# enactment is longer than Python's recursion limit. Here each value of k takes
# three actions and six deliveries, so sub_keys=110 makes a path of about a
# thousand steps: verify() raises RecursionError even with max_states=10, and
# `strabo check --verify --sub-keys 110` prints a traceback (IncrementalUCP
# does the same with --sub-keys 100). On a shared state the same protocol
# "verifies" with max_states=10 and reports 332 states.

DEEP = """\
Deep
who A, B, C
what id key, k key, Go
do
  A: Go(id)
  A: N1(id, k, Go)
  B: N2(id, k, N1)
  C: N3(id, k, N2)
"""


def test_a_deep_enactment_gives_a_report_not_a_recursion_error() -> None:
    report = verify(parse(DEEP), semantics="decentralized", sub_keys=110, max_states=10)
    assert report.verdict in ("unknown", "ok")


def test_the_cli_prints_no_traceback_for_a_deep_enactment(tmp_path: Path) -> None:
    path = tmp_path / "deep.lsh"
    path.write_text(DEEP)
    result = strabo(
        "check", "--verify", "--semantics", "decentralized", "--sub-keys", "110", str(path)
    )
    assert "Traceback" not in result.stderr, result.stderr[-2000:]


def test_a_deep_shared_exploration_respects_its_cap() -> None:
    report = verify(parse(DEEP), semantics="shared", sub_keys=110, max_states=10)
    assert not report.complete or report.states <= 10, (report.complete, report.states)


def test_a_deep_enactment_within_the_recursion_limit_is_verified() -> None:
    report = verify(parse(DEEP), semantics="decentralized", sub_keys=40)
    assert report.complete and report.ok and report.bound_reached


# What held up --------------------------------------------------------------------------

ODD = {
    "one role": ONE_ROLE,
    "one role, a sub-key": (
        "P\nwho A\nwhat id key, k key, Done\ndo\n  A: Go(id)\n  A: Note(id, k, Go)\n"
        "  A: Done(id, Go)\n"
    ),
    "stuck from the start": "P\nwho A, B\nwhat id key, Done\ndo\n  A: Go(id, Done)\n"
    "  B: Done(id, Go)\n",
    "a key as the clause": "P\nwho A, B\nwhat id key, id\ndo\n  A: Go(id)\n",
    "a sub-key as the clause": (
        "P\nwho A, B\nwhat id key, k key, k\ndo\n  A: Go(id)\n  B: Note(id, k, Go)\n"
    ),
    "an optional clause": "P\nwho A, B\nwhat id key, x\ndo\n  A: Go(id, x?)\nsayso\n  A: x\n",
    "two root keys": (
        "P\nwho A, B\nwhat id key, t key, Go\ndo\n  A: Go(id, t)\n  B: Back(id, t, Go)\n"
    ),
    "three sub-keys deep": (
        "P\nwho A, B\nwhat id key, a key, b key, c key, Go\ndo\n  A: Go(id)\n"
        "  B: X(id, a, b, c, Go, v)\nsayso\n  B: v\n"
    ),
    "never completes": (FAULTY / "never-completes.lsh").read_text(),
    "rebind": (FAULTY / "rebind.lsh").read_text(),
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_odd_protocols_agree_with_the_oracle_and_never_raise(name: str) -> None:
    protocol = parse(ODD[name])
    for semantics in ("shared", "decentralized"):
        for collisions in (True, False):
            naive = explore(protocol, semantics, sub_keys=2, collisions=collisions)
            assert naive is not None
            full = verify(protocol, semantics=semantics, collisions=collisions)
            for reduce in (True, False):
                for cap in (1, 2, 3, 5, 8, 13):
                    report = verify(
                        protocol,
                        semantics=semantics,
                        max_states=cap,
                        reduce=reduce,
                        collisions=collisions,
                    )
                    json.dumps(report.to_json())
                    if report.complete:
                        assert report.verdict == full.verdict
                    else:
                        assert report.verdict == "unknown" and report.live is None
                        assert report.dead is None and report.conflicts == []
            assert full.complete and full.live == naive.live
            assert set(full.dead or {}) == naive.dead
            assert full.bound_reached == naive.bound_reached
            if not full.live:
                assert len(full.stuck) == naive.stuck_length


def test_a_protocol_stuck_from_the_start_says_so() -> None:
    protocol = parse(ODD["stuck from the start"])
    for semantics in ("shared", "decentralized"):
        report = verify(protocol, semantics=semantics)
        assert report.live is False and report.stuck == []
        assert set(report.dead or {}) == {"Go", "Done"} and report.never_hold == [("Done",)]
        assert report.states == 1


def test_the_cli_says_no_enactment_can_complete(tmp_path: Path) -> None:
    path = tmp_path / "stuck.lsh"
    path.write_text(ODD["stuck from the start"])
    result = strabo("check", "--verify", "--semantics", "shared", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "shared: not live: no enactment can ever complete (Done)" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--max-states", "1"],
        ["--max-states", "1", "--json"],
        ["--no-collisions", "--semantics", "decentralized", "--json"],
        ["--sub-keys", "1", "-q"],
        ["--sub-keys", "3", "--max-states", "50"],
    ],
    ids=lambda a: " ".join(a),
)
def test_the_cli_never_prints_a_traceback(args: list[str]) -> None:
    files = [str(FAULTY / n) for n in ("unsafe-nogo.lsh", "never-completes.lsh", "rebind.lsh")]
    result = strabo("check", "--verify", *args, *files)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1  # every one of them is faulty
    if "--json" in args:
        documents = json.loads(result.stdout)
        assert [d["file"] for d in documents] == files


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "x"])
def test_the_cli_refuses_a_bad_bound_without_a_traceback(value: str) -> None:
    for flag in ("--sub-keys", "--max-states"):
        result = strabo("check", "--verify", flag, value, str(FAULTY / "rebind.lsh"))
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert f"argument {flag}" in result.stderr


def test_no_collisions_without_verify_changes_nothing() -> None:
    result = strabo("check", "--no-collisions", str(FAULTY / "rebind.lsh"))
    assert result.returncode == 0 and "Traceback" not in result.stderr


_DETERMINISM = """
import json, sys
from langshaw import LangshawProtocol
from langshaw.verify import verify
out = []
for path in sys.argv[1:]:
    p = LangshawProtocol.load(path)
    for semantics in ("shared", "decentralized"):
        for collisions in (True, False):
            r = verify(p, semantics=semantics, sub_keys=1, collisions=collisions).to_json()
            r.pop("seconds"); r.pop("trace_seconds")
            out.append(r)
print(json.dumps(out, sort_keys=True))
"""


def test_reports_do_not_depend_on_the_hash_seed() -> None:
    files = [str(p) for p in sorted(FAULTY.glob("*.lsh"))] + [
        str(PROTOCOLS / n) for n in ("purchase.lsh", "contract-net.lsh", "logistics.lsh")
    ]
    outputs = set()
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run(
            [sys.executable, "-c", _DETERMINISM, *files],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        outputs.add(result.stdout)
    assert len(outputs) == 1


# The differential test, on settings it does not use ----------------------------------


def _problems(cases: list[tuple[str, LangshawProtocol]], sub_keys: int, cap: int) -> list[Any]:
    outcomes = [
        compare(protocol, text, semantics, sub_keys=sub_keys, cap=cap)
        for text, protocol in cases
        for semantics in ("shared", "decentralized")
    ]
    skipped = sum(o.skipped for o in outcomes)
    assert skipped <= len(outcomes) // 10, f"{skipped} of {len(outcomes)} skipped"
    return [o.problem for o in outcomes if o.problem]


def test_one_value_per_sub_key_on_larger_protocols() -> None:
    """sub_keys=1 (every sub-scope action reaches the bound at once) on
    protocols of five to seven actions."""
    problems = _problems(generate(20261126, 80, (5, 7)), sub_keys=1, cap=20_000)
    assert not problems, problems[0]


def test_three_values_per_sub_key() -> None:
    problems = _problems(generate(7, 30, (2, 4)), sub_keys=3, cap=20_000)
    assert not problems, problems[0]


def _three_roles_two_sub_keys(rng: random.Random) -> str:
    """Three roles, both sub-keys on most actions (so scopes nest and sit side
    by side), single binders, a race: the corners the generator reaches rarely."""
    names = [f"X{i}" for i in range(rng.randint(4, 6))]
    actors = {n: rng.choice("ABC") for n in names}
    keys = {
        n: ["id"] + ([] if i == 0 else rng.choice([[], ["k"], ["j"], ["k", "j"]]))
        for i, n in enumerate(names)
    }
    lines, attrs = [], {}
    for i, n in enumerate(names):
        earlier = [
            m for m in names[:i] if set(keys[m]) <= set(keys[n]) or set(keys[n]) <= set(keys[m])
        ]
        deps = rng.sample(earlier, min(len(earlier), rng.randint(1, 2))) if earlier else []
        attrs[n] = rng.sample(["x", "y"], rng.choice((0, 1, 1, 2)))
        lines.append(f"  {actors[n]}: {n}({', '.join(keys[n] + deps + attrs[n])})")
    sayso = [
        f"  {actors[next(n for n in names if a in attrs[n])]}: {a}"
        for a in ("x", "y")
        if any(a in attrs[n] for n in names)
    ]
    a, b = rng.sample(names[1:], 2)
    race = ["nono", f"  {a} {b}"] if rng.random() < 0.5 else ["nogo", f"  {a} -/> {b}"]
    clause = " or ".join(rng.sample(names[1:], 2))
    used = [k for k in ("k", "j") if any(k in keys[n] for n in names)]
    what = ", ".join(["id key", *(f"{k} key" for k in used), clause])
    body = ["H", "who A, B, C", f"what {what}", "do", *lines]
    return "\n".join(body + (["sayso", *sayso] if sayso else []) + race) + "\n"


def test_three_roles_with_two_sub_keys() -> None:
    rng = random.Random(51)
    cases: list[tuple[str, LangshawProtocol]] = []
    while len(cases) < 60:
        text = _three_roles_two_sub_keys(rng)
        try:
            cases.append((text, parse(text)))
        except LangshawError:
            continue
    problems = _problems(cases, sub_keys=1, cap=20_000)
    assert not problems, problems[0]


def test_a_random_protocol_of_seven_actions_with_three_roles_is_handled() -> None:
    """random_protocol's widest setting: no exception from either side, and
    the verifier's own traces replay (a verdict the oracle could not check)."""
    from tests.langshaw.test_verify import replay_conflict

    rng = random.Random(3)
    seen = 0
    while seen < 15:
        text = random_protocol(rng, (7, 7))
        try:
            protocol = parse(text)
        except LangshawError:
            continue
        if len(protocol.roles) < 3:
            continue
        seen += 1
        report: Report = verify(protocol, semantics="decentralized", sub_keys=1, max_states=20_000)
        for conflict in report.conflicts:
            replay_conflict(protocol, conflict)
