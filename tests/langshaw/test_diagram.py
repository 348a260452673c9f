"""Diagrams: every shipped protocol drawn as SVG and Mermaid, what they show,
escaping of untrusted names and bindings, determinism, `strabo check
--diagram` (with --verify: counterexamples as sequence charts), and the
committed docs/diagrams/ kept up to date."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from langshaw import LangshawProtocol
from langshaw.diagrams import (
    chart,
    counterexample_path,
    counterexamples,
    format_of,
    protocol_diagram,
    sequence_diagram,
)
from langshaw.verify import verify
from tests.conftest import FIXTURES, PROTOCOLS, ROOT

SVG = "{http://www.w3.org/2000/svg}"
SHIPPED = sorted([*PROTOCOLS.glob("*.lsh"), *PROTOCOLS.glob("patterns/*.lsh")])
EVIL = "<script>alert('x')</script> & \"co\" ]]> %%{init}%% #59;"


def texts(svg: str) -> list[str]:
    """Every text the SVG shows (each <text> element's whole content)."""
    root = ET.fromstring(svg)  # valid XML, or this raises
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def group_titles(svg: str, cls: str) -> list[str]:
    root = ET.fromstring(svg)
    return [g.findtext(f"{SVG}title") or "" for g in root.iter(f"{SVG}g")
            if g.get("class") == cls]


# A small grammar of the Mermaid this code emits: each line must be one of these
# forms, labels must hold no raw mark Mermaid would read as syntax.
LABEL = r'(?:[A-Za-z0-9 _\-.,=()/?!+*\']|#\d+;)*'
FLOWCHART = [
    r"%% [^\n]*",
    r"flowchart TB",
    rf'  +subgraph R\d+(?:S\d+)?\["{LABEL}"\]',
    r"    direction TB",
    rf'  +A\d+\["{LABEL}(?:<br>{LABEL})?"\]',
    r"  +end",
    r"  A\d+ --> A\d+",
    r"  A\d+ x-\.-x\|nono\| A\d+",
    r"  A\d+ -\.-x\|nogo\| A\d+",
    r"  linkStyle \d+(?:,\d+)* stroke:#[0-9a-f]{6},stroke-width:2px",
    r"  classDef completes stroke-width:3px",
    r"  class A\d+(?:,A\d+)* completes",
]
SEQUENCE = [
    r"%% [^\n]*",
    r"sequenceDiagram",
    rf"  participant R\d+ as {LABEL}",
    rf"  Note over R\d+(?:,R\d+)?: {LABEL}",
    rf"  Note right of R\d+: {LABEL}",
    rf"  R\d+(?:->>|-x)R\d+: \d+\. {LABEL}",
]


def check_mermaid(text: str, forms: list[str]) -> list[str]:
    """The lines of ``text`` that fit no form, and structural faults: subgraphs
    closed, nodes and participants declared before use, no directive."""
    lines = text.rstrip("\n").split("\n")
    bad = [line for line in lines if not any(re.fullmatch(f, line) for f in forms)]
    assert lines[1] in ("flowchart TB", "sequenceDiagram") or lines[2] == "flowchart TB"
    assert not any(line.lstrip().startswith("%%{") for line in lines)  # no directive
    depth = 0
    for line in lines:
        depth += line.lstrip().startswith("subgraph ") - (line.strip() == "end")
        assert depth >= 0, line
    assert depth == 0
    declared = set(re.findall(r"\b(A\d+)\[", text)) | set(re.findall(r"participant (R\d+)", text))
    for line in lines:
        if line.startswith(("  A", "  R", "  class ", "  Note")) and "[" not in line:
            used = set(re.findall(r"\b([AR]\d+)\b", line.split(":")[0]))
            assert used <= declared | set(re.findall(r"subgraph (R\d+)", text)), line
    return bad


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(PROTOCOLS)))
def test_every_shipped_protocol_draws_as_svg_and_mermaid(path: Path) -> None:
    protocol = LangshawProtocol.load(path)
    svg = protocol_diagram(protocol)
    shown = texts(svg)
    assert protocol.name in shown and "Legend" in shown
    for role in protocol.roles:
        assert role in shown
    for name in protocol.actions:
        assert name in shown
    nono = group_titles(svg, "nono")
    for group in protocol.nono:
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                assert f"nono: {a} and {b} exclude each other" in nono
    assert sorted(group_titles(svg, "nogo")) == sorted(f"nogo: {a} -/> {b}"
                                                       for a, b in protocol.nogo)
    mermaid = protocol_diagram(protocol, "mermaid")
    assert check_mermaid(mermaid, FLOWCHART) == []
    assert mermaid.count(" --> ") == sum(len(a.dependencies) for a in protocol.actions.values())
    assert mermaid.count("|nogo|") == len(protocol.nogo)
    for role in protocol.roles:
        assert f'["{role}"]' in mermaid


def test_the_purchase_diagram_marks_keys_dependencies_and_sub_scopes() -> None:
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    svg = protocol_diagram(protocol)
    shown = texts(svg)
    # Quote: its keys, its dependency, what the Seller binds and what it carries.
    assert "ID key, qid key, RFQ done," in shown
    assert "item in, price out" in shown
    assert "sub-scope ID, qid" in shown  # the quote's scope, in its box and the legend
    root = ET.fromstring(svg)
    depends = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "depends")
    assert len(depends) == sum(len(a.dependencies) for a in protocol.actions.values())
    mermaid = protocol_diagram(protocol, "mermaid")
    assert 'subgraph R1S0["sub-scope ID, qid"]' in mermaid
    assert 'A1["Quote<br>ID key, qid key, RFQ done, item in, price out"]' in mermaid


def test_untrusted_names_show_as_text(tmp_path: Path) -> None:
    evil = EVIL.split("#")[0].strip()  # a comment starts at #
    text = (PROTOCOLS / "purchase.lsh").read_text().replace("Purchase", f"Purchase {evil}", 1)
    protocol = LangshawProtocol.parse(text)
    assert protocol.name == f"Purchase {evil}"
    svg = protocol_diagram(protocol)
    assert protocol.name in texts(svg)
    assert "<script" not in svg and "&amp;" in svg
    assert all(e.tag != "script" and not e.tag.endswith("}script")
               for e in ET.fromstring(svg).iter())
    mermaid = protocol_diagram(protocol, "mermaid")
    assert check_mermaid(mermaid, FLOWCHART) == []
    assert "<script" not in mermaid and "%%{" not in mermaid


def test_untrusted_bindings_in_a_chart_show_as_text() -> None:
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    steps = [("Buyer", "RFQ", {"ID": "r1", "item": EVIL, "budget": 5}, "by <b>&"),
             ("Seller", "Quote", {"ID": "r1", "qid": "\x00\x1b", "RFQ": True}, "")]
    drawn = chart(protocol, f"run {EVIL}", steps, broken=1, broken_note="breaks <nono>")
    svg = sequence_diagram(drawn)
    shown = texts(svg)
    assert f"RFQ(ID=r1, item={EVIL[:37]}..., budget=5)" in shown  # cut, and as text
    assert "by <b>&" in shown and "X breaks <nono>" in shown
    assert "Quote(ID=r1, qid=\ufffd\ufffd, RFQ)" in shown  # XML cannot hold \x00
    assert "<script" not in svg and "<b>" not in svg
    mermaid = sequence_diagram(drawn, "mermaid")
    assert check_mermaid(mermaid, SEQUENCE) == []
    assert "  R1-xR0: 2. Quote(ID=r1, qid=#0;#27;, RFQ)" in mermaid


def test_the_same_protocol_draws_the_same_bytes() -> None:
    path = PROTOCOLS / "incremental-ucp.lsh"
    first = protocol_diagram(LangshawProtocol.load(path))
    assert protocol_diagram(LangshawProtocol.parse(path.read_text(), str(path),
                                                   base=path.parent)) == first
    code = ("import sys; from langshaw import LangshawProtocol; "
            "from langshaw.diagrams import protocol_diagram; "
            f"sys.stdout.write(protocol_diagram(LangshawProtocol.load({str(path)!r})))")
    for seed in ("1", "2"):  # set and hash order may not leak into the drawing
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
        assert out.stdout == first


def test_a_counterexample_marks_the_step_that_breaks_the_rule() -> None:
    protocol = LangshawProtocol.load(FIXTURES / "lsh" / "faulty" / "unsafe-nogo.lsh")
    [found] = counterexamples(protocol, [verify(protocol, semantics="decentralized")])
    assert [m.action for m in found.messages] == ["Order", "Cancel", "Ship"]
    assert [m.broken for m in found.messages] == [False, False, True]
    assert found.messages[-1].note == "received 1; breaks nogo Cancel -/> Ship"
    svg = sequence_diagram(found)
    [broken] = [g for g in ET.fromstring(svg).iter(f"{SVG}g") if g.get("class") == "step broken"]
    assert "Ship(Order, id=r, tracking=<tracking by Seller>)" in ["".join(t.itertext())
                                                                  for t in broken]


def test_a_stuck_trace_ends_with_a_note() -> None:
    protocol = LangshawProtocol.load(FIXTURES / "lsh" / "faulty" / "not-live.lsh")
    [found] = counterexamples(protocol, [verify(protocol)])
    assert not any(m.broken for m in found.messages)
    assert found.ending == "stuck: from here the enactment can never complete (Finish)"
    assert check_mermaid(sequence_diagram(found, "mermaid"), SEQUENCE) == []


def test_formats_and_paths() -> None:
    assert format_of("a.mmd") == "mermaid" and format_of("a.svg") == "svg"
    assert format_of("a.mmd", "svg") == "svg"
    with pytest.raises(ValueError, match="unknown diagram format 'png'"):
        format_of("a.png", "png")
    assert counterexample_path("out/p.svg", 2) == Path("out/p-counterexample-2.svg")


# The command --------------------------------------------------------------------------


def strabo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strabo.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)


def test_check_diagram_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "purchase.svg"
    result = strabo("check", "--diagram", str(out), "purchase")
    assert result.returncode == 0, result.stderr
    assert f"  diagram: {out}" in result.stdout
    assert out.read_text() == protocol_diagram(LangshawProtocol.load(PROTOCOLS / "purchase.lsh"))
    mmd = tmp_path / "purchase.mmd"
    assert strabo("check", "-q", "--diagram", str(mmd), "purchase").returncode == 0
    assert mmd.read_text().startswith("%% Purchase: protocol diagram\n")
    other = tmp_path / "m.txt"
    assert strabo("check", "-q", "--format", "mermaid", "--diagram", str(other),
                  "purchase").returncode == 0
    assert "flowchart TB" in other.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--diagram", "{tmp}/nowhere/p.svg"], "strabo check: cannot write the diagram "
         "'{tmp}/nowhere/p.svg': No such file or directory"),
        (["--diagram", "{tmp}"], "strabo check: cannot write the diagram '{tmp}': Is a directory"),
        (["--diagram", "{tmp}/p.svg", "--format", "png"],
         "strabo check: unknown diagram format 'png' (choose from svg, mermaid)"),
        (["--format", "svg"], "strabo check: --format applies to --diagram only"),
        (["--diagram", "{tmp}/p.svg", "market"],
         "strabo check: --diagram draws one protocol, not 2: give one FILE"),
    ],
)
def test_check_diagram_errors_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = strabo("check", "-q", *(a.format(tmp=tmp_path) for a in args), "purchase")
    assert result.returncode == 2
    assert result.stderr == message.format(tmp=tmp_path) + "\n"


def test_check_verify_writes_each_counterexample(tmp_path: Path) -> None:
    faulty = FIXTURES / "lsh" / "faulty" / "unsafe-nogo.lsh"
    out = tmp_path / "u.svg"
    result = strabo("check", "--verify", "--diagram", str(out), str(faulty))
    assert result.returncode == 1  # unsafe, as without --diagram
    assert f"  diagram: {tmp_path / 'u-counterexample-1.svg'}" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["u-counterexample-1.svg", "u.svg"]
    svg = (tmp_path / "u-counterexample-1.svg").read_text()
    assert "unsafe (nogo)" in texts(svg)[0]
    assert 'class="step broken"' in svg
    assert "X received 1; breaks nogo Cancel -/> Ship" in texts(svg)
    result = strabo("check", "-q", "--verify", "--diagram", str(tmp_path / "u.mmd"), str(faulty))
    mermaid = (tmp_path / "u-counterexample-1.mmd").read_text()
    assert check_mermaid(mermaid, SEQUENCE) == []
    assert "  R1-xR1: 3. Ship(Order, id=r, tracking=#60;tracking by Seller#62;)" in mermaid


# The committed diagrams ---------------------------------------------------------------


def test_docs_diagrams_are_up_to_date() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "diagrams.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for path in SHIPPED:
        name = path.relative_to(PROTOCOLS).with_suffix(".svg")
        assert (ROOT / "docs" / "diagrams" / name).is_file()
