"""Seeded random Langshaw protocols, small enough to explore every interleaving.

They are written as text, not built as models, so that they also pass through
the parser and the validation a real file meets. The generator aims at the
corners of the rules: sub-scopes (one or two sub-keys) with dependencies both
into and out of them (a root action depending on a sub-scope action included),
optional attributes that completion names, priority chains two roles share,
nono groups and nogo pairs across roles. Some texts are invalid (an attribute
nobody can bind, say); :func:`protocols` skips those.
"""

from __future__ import annotations

import random

from langshaw import LangshawError, LangshawProtocol

ROLES = ("A", "B", "C")
ATTRIBUTES = ("x", "y", "z")
SUB_KEYS = ("k", "j")


def _subset(rng: random.Random, items: list[str], most: int) -> list[str]:
    return rng.sample(items, rng.randint(0, min(most, len(items))))


def random_protocol(rng: random.Random, actions: tuple[int, int] = (2, 6)) -> str:
    """One protocol's text: 2-3 roles, ``actions`` (least, most) actions, root
    key ``id``."""
    roles = list(ROLES[: rng.randint(2, 3)])
    sub = list(SUB_KEYS[: rng.choice((0, 0, 1, 1, 1, 2))])
    count = rng.randint(*actions)
    names = [f"X{i}" for i in range(count)]
    optional = {a for a in ATTRIBUTES if rng.random() < 0.3}
    actors = {name: rng.choice(roles) for name in names}
    # The first action opens the root scope; others may open sub-scopes.
    keys = {name: ["id"] + ([] if i == 0 else _subset(rng, sub, 2)) for i, name in enumerate(names)}
    deps: dict[str, list[str]] = {}
    attrs: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        # Mostly on actions whose scopes nest with this one's (a dependency
        # between sibling sub-scopes can never be met).
        mine = set(keys[name])
        earlier = [
            n
            for n in names[:i]
            if set(keys[n]) <= mine or mine <= set(keys[n]) or rng.random() < 0.1
        ]
        deps[name] = _subset(rng, earlier, 2)
        if earlier and not deps[name] and rng.random() < 0.7:
            deps[name] = [rng.choice(earlier)]
        if 0 < i < count - 1 and rng.random() < 0.05:
            deps[name].append(rng.choice(names[i + 1 :]))  # on a later action
        if len(keys[name]) == 1 and rng.random() < (0.05 if i == 0 else 0.3):
            # A root action depending on a sub-scope action.
            # (mostly an earlier one: a later one may well depend on this one)
            pool = names[:i] if rng.random() < 0.8 else names
            inner = [n for n in pool if n != name and len(keys[n]) > 1 and n not in deps[name]]
            if inner:
                deps[name].append(rng.choice(inner))
        attrs[name] = _subset(rng, list(ATTRIBUTES), 2)
    sayso = []
    for attr in ATTRIBUTES:
        users = [n for n in names if attr in attrs[n]]
        if not users:
            continue
        # Mostly the first user may bind it (else it would often be dead), and
        # sometimes a second role too, before or after it in the chain.
        chain = [actors[users[0]] if rng.random() < 0.8 else rng.choice(roles)]
        if rng.random() < 0.35:
            chain.append(rng.choice([r for r in roles if r != chain[0]]))
            rng.shuffle(chain)
        sayso.append(f"  {' > '.join(chain)}: {attr}")
    lines = [
        f"  {actors[n]}: {n}({', '.join(keys[n] + deps[n] + written)})"
        for n in names
        for written in [[f"{a}?" if a in optional else a for a in attrs[n]]]
    ]
    nono = []
    if rng.random() < 0.4:
        nono.append("  " + " ".join(rng.sample(names, 2)))
    nogo = []
    if rng.random() < 0.4:
        before, after = rng.sample(names, 2)
        nogo.append(f"  {before} -/> {after}")
    used = sorted({a for n in names for a in attrs[n]})
    clauses = []
    for _ in range(rng.randint(1, 2)):
        pool = names[1:] + used
        picked = rng.sample(pool, min(len(pool), rng.choice((1, 1, 2))))
        clauses.append(" or ".join(picked))
    declared = [k for k in sub if any(k in ks for ks in keys.values())]
    what = ", ".join(["id key", *(f"{k} key" for k in declared), *clauses])
    parts = [f"R{rng.randrange(10**6)}", f"who {', '.join(roles)}", f"what {what}", "do", *lines]
    for title, body in (("sayso", sayso), ("nono", nono), ("nogo", nogo)):
        if body:
            parts += [title, *body]
    return "\n".join(parts) + "\n"


def generate(
    seed: int, count: int, actions: tuple[int, int] = (2, 6)
) -> list[tuple[str, LangshawProtocol]]:
    """``count`` (text, protocol) pairs that parse, the same for the same seed."""
    rng = random.Random(seed)
    found: list[tuple[str, LangshawProtocol]] = []
    while len(found) < count:
        text = random_protocol(rng, actions)
        try:
            found.append((text, LangshawProtocol.parse(text)))
        except LangshawError:
            continue
    return found


def protocols(seed: int, count: int) -> list[LangshawProtocol]:
    """``count`` protocols that parse, the same ones for the same seed."""
    return [protocol for _, protocol in generate(seed, count)]


def chain(n: int) -> str:
    """A's n steps, each needing the last; B's Y needs them all, and A's Cancel
    after the last must not come before Y: B's steps may take any of 2^n sets
    of deliveries."""
    steps = ["  A: D0(id)"] + [f"  A: D{i}(id, D{i - 1})" for i in range(1, n)]
    needs = ", ".join(f"D{i}" for i in range(n))
    return (
        "ChainN\nwho A, B\nwhat id key, Y or Cancel\ndo\n" + "\n".join(steps)
        + f"\n  A: Cancel(id, D{n - 1})\n  B: Y(id, {needs})\nnogo\n  Cancel -/> Y\n"
    )
