"""Hostile protocols drawn: names that are markup in SVG, HTML or Mermaid, and
protocols whose diagram must stay bounded (a long nono line, a long chain of
dependencies written upwards)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from langshaw import LangshawProtocol
from langshaw.diagrams import chart, protocol_diagram, sequence_diagram
from tests.langshaw.test_diagram import FLOWCHART, SVG

NAMES = [
    "<script>alert(1)</script>",
    "A & B \"q\" 'x' ]]> <!-- -->",
    "x --> y ;; %%{init: {}}%% `code` end",
    "right to left \u05e9\u05dc\u05d5\u05dd\u200f",
    "emoji 🎉👨\u200d👩\u200d👧 ok",
    'subgraph R0["end"]',
]


def protocol_named(name: str, body: str = "") -> LangshawProtocol:
    return LangshawProtocol.parse(
        f"{name}\nwho A, B\nwhat id key, Go\ndo\n  A : Start(id, x)\n  B : Go(id, Start)\n"
        f"sayso\n  A : x\n{body}"
    )


def mermaid_lines_fit(text: str, forms: list[str]) -> None:
    for line in text.splitlines():
        assert any(re.fullmatch(form, line) for form in forms), line


@pytest.mark.parametrize("name", NAMES)
def test_a_protocol_name_never_becomes_markup(name: str) -> None:
    protocol = protocol_named(name)
    svg = protocol_diagram(protocol, "svg")
    root = ET.fromstring(svg)  # well-formed, or this raises
    assert {e.tag for e in root.iter()} <= {
        f"{SVG}{t}" for t in ("svg", "title", "defs", "marker", "path", "rect", "g", "text",
                             "tspan", "circle", "line")
    }
    assert root.findtext(f"{SVG}title") == f"{name}: protocol diagram"
    mermaid = protocol_diagram(protocol, "mermaid")
    head = mermaid.split("flowchart TB\n")[0]
    assert head.count("\n") == 2  # the name and the subtitle, each a comment of one line
    for mark in "<>\"`;&\u200f":
        assert mark not in re.sub(r"#\d+;", "", head)  # entity codes aside
    mermaid_lines_fit(mermaid, FLOWCHART)


def test_a_large_nono_group_draws_a_chain_not_every_pair() -> None:
    n = 400  # every pair: 79,800 curves, 31 MB of SVG
    lines = "\n".join(f"  {'AB'[i % 2]} : X{i}(id)" for i in range(n))
    names = " ".join(f"X{i}" for i in range(n))
    protocol = LangshawProtocol.parse(
        f"Big\nwho A, B\nwhat id key, X0\ndo\n{lines}\nnono\n  {names}\n  X0 X1\n"
    )
    svg = protocol_diagram(protocol, "svg")
    assert len(svg) < 1_000_000
    root = ET.fromstring(svg)
    nono = [g for g in root.iter(f"{SVG}g") if g.get("class") == "nono"]
    assert len(nono) == n - 1 + 1  # the chain, and the small group's pair
    titles = [g.findtext(f"{SVG}title") for g in nono]
    assert "nono 1: X0, X1 and the 398 other actions of the group exclude each other" in titles
    assert "nono: X0 and X1 exclude each other" in titles
    legend = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert any(t.startswith("nono 1: these 400 actions exclude each other, linked in a chain: "
                            "X0, X1, X2") for t in legend)
    mermaid = protocol_diagram(protocol, "mermaid")
    assert len(mermaid) < 100_000
    assert mermaid.count("|nono 1|") == n - 1 and mermaid.count("|nono|") == 1
    assert "%% nono 1: these 400 actions exclude each other, linked in a chain#58; X0, X1" in (
        mermaid
    )
    mermaid_lines_fit(mermaid, [*FLOWCHART, r"  A\d+ x-\.-x\|nono \d+\| A\d+"])


def test_a_small_nono_group_still_draws_every_pair() -> None:
    names = [f"X{i}" for i in range(6)]
    lines = "\n".join(f"  A : {x}(id)" for x in names)
    protocol = LangshawProtocol.parse(
        f"Six\nwho A\nwhat id key, X0\ndo\n{lines}\nnono\n  {' '.join(names)}\n"
    )
    assert protocol_diagram(protocol, "mermaid").count("|nono|") == 15


def test_a_long_chain_written_upwards_draws() -> None:
    n = 1500  # deeper than Python's recursion limit
    lines = "\n".join(f"  A : X{i}(id, X{i - 1})" if i else "  A : X0(id)"
                      for i in reversed(range(n)))
    protocol = LangshawProtocol.parse(f"Chain\nwho A\nwhat id key, X{n - 1}\ndo\n{lines}\n")
    svg = protocol_diagram(protocol, "svg")
    root = ET.fromstring(svg)
    boxes = {"".join(t.itertext()): float(t.get("y") or 0) for t in root.iter(f"{SVG}text")
             if t.get("font-size") == "13"}
    assert boxes["X0"] < boxes["X1"] < boxes[f"X{n - 1}"]  # a row per depth
    assert protocol_diagram(protocol, "mermaid").count(" --> ") == n - 1


def test_a_chart_of_hostile_roles_and_bindings_stays_well_formed() -> None:
    protocol = protocol_named("P")
    evil = "\u202e<b>x</b>\n-->end;\x00"
    steps = [(evil, "Start", {"id": evil, "x": {"k": evil}}, evil),
             ("A", "Go", [("id", evil)], "")]
    drawn = chart(protocol, evil, steps, broken=1, broken_note=evil, ending=evil)
    root = ET.fromstring(sequence_diagram(drawn, "svg"))
    assert not [e for e in root.iter() if e.tag.endswith("}b")]
    mermaid = sequence_diagram(drawn, "mermaid")
    for line in mermaid.splitlines():
        assert not re.search(r"[<>;\x00\u202e]", re.sub(r"#\d+;", "", line.split(":", 1)[-1]))
