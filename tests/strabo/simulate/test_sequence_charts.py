"""The report's sequence charts: one inline SVG per enactment (bounded), every
action with its bindings and who did it, what agents say shown as text."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from strabo.simulate import Occurrence, SimulationResult, load_scenario, simulate, write_report
from strabo.simulate.report import CHART_ENACTMENTS, CHART_STEPS
from tests.conftest import PROTOCOLS

SVG = "{http://www.w3.org/2000/svg}"
PATTERNS = PROTOCOLS / "patterns"


def inline_svgs(report: str) -> list[ET.Element]:
    """Every SVG the Markdown report holds, parsed (each must be valid XML)."""
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", report, re.S)]


def shown(svg: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG}text")]


async def test_the_report_charts_the_enactment_step_by_step(tmp_path: Path) -> None:
    result = await simulate(load_scenario(PATTERNS / "sequential.toml"))
    assert result.reason == "complete", result.detail
    report = write_report(result, tmp_path / "r")["report"].read_text()
    assert "## Sequence charts" in report
    [svg] = inline_svgs(report)  # one enactment: one chart
    assert "\n\n" not in re.search(r"<svg .*?</svg>", report, re.S)[0]  # one HTML block
    texts = shown(svg)
    assert texts[0].startswith("Sequential: enactment session=")
    assert texts[0].endswith(f"({len(result.trace)} actions)")
    assert {"Chair", "First", "Second", "Third"} <= set(texts)
    steps = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "step"]
    assert len(steps) == len(result.trace) == 13
    for o, g in zip(result.trace, steps, strict=True):
        lines = ["".join(t.itertext()) for t in g]
        assert any(line.startswith(f"{o.action}(") for line in lines)
        assert f"#{o.seq} by {o.performer}" in lines
    first = result.trace[0]
    assert f"Open(session={first['session']}, round=1, topic={first['topic']})" in texts


def fake_run(enactments: int, steps: int, **bindings: object) -> SimulationResult:
    """A result as a run would give it, with as many enactments and steps as wanted."""
    scenario = load_scenario(PATTERNS / "sequential.toml")
    trace = [
        Occurrence(e * steps + i, "Open", "chair",
                   {"session": f"s{e}", "round": i + 1, "topic": "t", **bindings})
        for e in range(enactments) for i in range(steps)
    ]
    return SimulationResult(scenario, "budget", "test", trace)


def test_what_agents_bind_shows_as_text_in_the_chart(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script> & <b>"
    result = fake_run(1, 2, topic=evil)
    result.trace.append(Occurrence(9, "Open", "<img src=x onerror=alert(1)>",
                                   {"session": "s0", "round": 3, "topic": "\x00&amp;"}))
    report = write_report(result, tmp_path / "r")["report"].read_text()
    assert "<script" not in report and "<b>" not in report and "<img" not in report
    [svg] = inline_svgs(report)
    texts = shown(svg)
    assert f"Open(session=s0, round=1, topic={evil})" in texts
    assert "#9 by <img src=x onerror=alert(1)>" in texts
    assert "Open(session=s0, round=3, topic=\ufffd&amp;)" in texts
    assert not [e for e in svg.iter() if e.tag.endswith("script") or e.tag.endswith("img")]


def test_charts_are_bounded(tmp_path: Path) -> None:
    result = fake_run(CHART_ENACTMENTS + 2, CHART_STEPS + 5)
    report = write_report(result, tmp_path / "r")["report"].read_text()
    svgs = inline_svgs(report)
    assert len(svgs) == CHART_ENACTMENTS
    assert (f"the first {CHART_ENACTMENTS} of {CHART_ENACTMENTS + 2} enactments, "
            f"at most {CHART_STEPS} steps each") in report
    for svg in svgs:
        steps = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "step"]
        assert len(steps) == CHART_STEPS
        assert "5 more step(s) not shown" in shown(svg)
    assert '### Enactment session="s0"' in report
