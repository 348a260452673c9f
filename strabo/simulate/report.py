"""The report of a run: its trace, the per-round outcomes as a table, a chart.

Files written to the output folder:

* ``trace.jsonl``: every finalized action in log order, one JSON object a line
  (``seq``, ``action``, ``performer``, ``bindings``);
* ``outcomes.csv`` and ``outcomes.md``: one row per instance of ``report.rows``
  (the market's ``Settle``: one per seller per round) with ``report.columns``;
* ``chart.png``: ``report.chart``'s ``y`` columns against ``x``, a line per
  ``series`` value, one panel per ``y`` (matplotlib, Agg: no display needed);
  not drawn when the table is empty;
* ``report.md``: how the run ended, who played, the table, the chart, and a
  sequence chart (inline SVG) of each enactment's actions: the first
  CHART_ENACTMENTS enactments, CHART_STEPS steps of each at most.
"""

from __future__ import annotations

import csv
import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langshaw.diagrams import chart, sequence_diagram
from strabo.simulate.move import Occurrence
from strabo.simulate.runner import SimulationResult
from strabo.simulate.scenario import ChartSpec

__all__ = ["CHART_DPI", "chart_size", "enactments", "outcome_rows", "sequence_charts",
           "write_report"]

#: The enactments the report draws a sequence chart of, and the steps of each
#: at most: a long run must not make a report too big to open.
CHART_ENACTMENTS = 5
CHART_STEPS = 80

CHART_DPI = 100
_WIDTH = 8.0  # inches
_PANEL = 3.0  # inches per y column
_MARGIN = 1.0  # inches for the title and the x axis


def chart_size(panels: int) -> tuple[int, int]:
    """The chart's size in pixels (width, height) for ``panels`` y columns."""
    return round(_WIDTH * CHART_DPI), round((_PANEL * panels + _MARGIN) * CHART_DPI)


def outcome_rows(result: SimulationResult) -> list[dict[str, Any]]:
    """One dict per instance of the scenario's ``report.rows`` action, in log
    order, holding its ``report.columns``."""
    spec = result.scenario.report
    if spec.rows is None:
        return []
    rows = []
    for o in result.trace:
        if o.action != spec.rows:
            continue
        extra = {"performer": o.performer, "seq": o.seq}
        rows.append({c: extra[c] if c in extra else o.bindings.get(c) for c in spec.columns})
    return rows


def enactments(result: SimulationResult) -> dict[str, list[Occurrence]]:
    """The trace by enactment, in the order they started: each named by its
    root keys' values (``market="m1"``)."""
    found: dict[str, list[Occurrence]] = {}
    for o in result.trace:
        root = ", ".join(f"{k}={json.dumps(o.bindings.get(k), default=str)}"
                         for k in result.scenario.protocol.root_keys)
        found.setdefault(root, []).append(o)
    return found


def sequence_charts(result: SimulationResult) -> list[tuple[str, str]]:
    """For each of the first CHART_ENACTMENTS enactments of the trace (told
    apart by their root keys): its name and its actions as an SVG sequence
    chart (roles as lifelines; each step with its bindings and who did it)."""
    protocol = result.scenario.protocol
    charts = []
    for root, occurrences in list(enactments(result).items())[:CHART_ENACTMENTS]:
        steps = [
            (protocol.actions[o.action].actor if o.action in protocol.actions else o.performer,
             o.action, o.bindings, f"#{o.seq} by {o.performer}")
            for o in occurrences
        ]
        title = f"{protocol.name}: enactment {root} ({len(occurrences)} actions)"
        charts.append((root, sequence_diagram(chart(protocol, title, steps, limit=CHART_STEPS))))
    return charts


def write_report(result: SimulationResult, directory: str | Path) -> dict[str, Path]:
    """Write the report's files into ``directory`` (created if need be); returns
    them by kind: trace, csv, table, chart (when the scenario has one), report."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {"trace": out / "trace.jsonl"}
    with written["trace"].open("w", encoding="utf-8") as trace:
        for o in result.trace:
            record = {"seq": o.seq, "action": o.action, "performer": o.performer,
                      "bindings": dict(o.bindings)}
            trace.write(json.dumps(record, sort_keys=False) + "\n")
    spec = result.scenario.report
    rows = outcome_rows(result)
    if spec.rows is not None:
        written["csv"] = out / "outcomes.csv"
        with written["csv"].open("w", encoding="utf-8", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(spec.columns))
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _cell(v, plain=True) for k, v in row.items()})
        written["table"] = out / "outcomes.md"
        written["table"].write_text(markdown_table(spec.columns, rows), encoding="utf-8")
    chart_problem = None
    if spec.chart is not None and rows:
        try:
            draw_chart(spec.chart, rows, out / "chart.png", title=result.scenario.name)
            written["chart"] = out / "chart.png"
        except Exception as exc:  # the rest of the report is worth more than its chart
            chart_problem = f"{type(exc).__name__}: {exc}"
    written["report"] = out / "report.md"
    written["report"].write_text(_summary(result, rows, written, chart_problem),
                                 encoding="utf-8")
    return written


#: The widest a column is padded to; a longer cell (an LLM's words) runs over.
MAX_WIDTH = 40


def markdown_table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table that reads as a table in a terminal too: each column
    padded to its widest cell (up to MAX_WIDTH), numbers aligned right."""
    header = [_cell(c) for c in columns]
    body = [[_cell(row.get(c)) for c in columns] for row in rows]
    numeric = [
        bool(rows) and all(isinstance(row.get(c), int | float | type(None))
                           and not isinstance(row.get(c), bool) for row in rows)
        for c in columns
    ]
    widths = [
        min(MAX_WIDTH, max([3, len(header[i]), *(len(cells[i]) for cells in body)]))
        for i in range(len(columns))
    ]

    def line(cells: list[str]) -> str:
        padded = (c.rjust(w) if right else c.ljust(w)
                  for c, w, right in zip(cells, widths, numeric, strict=True))
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if right else "-" * (w + 2)
                          for w, right in zip(widths, numeric, strict=True)) + "|"
    return "\n".join([line(header), rule, *(line(cells) for cells in body)]) + "\n"


#: What a spreadsheet would take a cell starting with for a formula.
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any, plain: bool = False) -> str:
    """A table cell: for CSV (``plain``), text a spreadsheet will not run as a
    formula (a leading ' defuses =, +, -, @); for Markdown, one line with its
    pipes escaped. Values come from agents (an LLM's words, say): untrusted."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if plain else f"{value:.2f}".rstrip("0").rstrip(".")
    if isinstance(value, int):
        return str(value)
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if plain:
        return "'" + text if text.startswith(_FORMULA) else text
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    return " ".join(text.splitlines()) if "\n" in text or "\r" in text else text


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def draw_chart(spec: ChartSpec, rows: Sequence[Mapping[str, Any]], path: Path,
               title: str = "") -> None:
    """Plot ``spec`` from the table's rows into a PNG of :func:`chart_size`."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        _draw(spec, rows, path, title)


def _draw(spec: ChartSpec, rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """The chart, with labels taken as plain text ($ is no TeX here: names and
    titles come from the scenario and the agents)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    width, height = chart_size(len(spec.y))
    figure = Figure(figsize=(width / CHART_DPI, height / CHART_DPI), dpi=CHART_DPI,
                    layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(spec.y), 1, sharex=True, squeeze=False)[:, 0]
    series: list[Any] = []
    for row in rows:
        name = row.get(spec.series) if spec.series else None
        if name not in series:
            series.append(name)
    integral = all(isinstance(row.get(spec.x), int) for row in rows)
    for ax, y in zip(axes, spec.y, strict=True):
        for name in series:
            points = sorted(
                (x, v)
                for row in rows
                if (not spec.series or row.get(spec.series) == name)
                and (x := _number(row.get(spec.x))) is not None
                and (v := _number(row.get(y))) is not None
            )
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                        linewidth=1.8, markersize=4, label=str(name) if spec.series else y)
        ax.set_ylabel(y)
        ax.grid(True, alpha=0.3)
        if integral:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1].set_xlabel(spec.x)
    if spec.series and len(series) > 0:
        axes[0].legend(title=spec.series, loc="best", fontsize="small")
    figure.suptitle(spec.title or title)
    figure.savefig(path, dpi=CHART_DPI, format="png")


def _summary(result: SimulationResult, rows: Sequence[Mapping[str, Any]],
             written: Mapping[str, Path], chart_problem: str | None = None) -> str:
    scenario = result.scenario
    lines = [f"# {scenario.name}", ""]
    if scenario.description:
        lines += [scenario.description.strip(), ""]
    lines += [
        f"- protocol: {scenario.protocol.name} (`{scenario.protocol_path}`)",
        f"- ended: **{result.reason}**: {result.detail}",
        f"- {len(result.trace)} actions"
        + (f", {result.rounds_ended} rounds ended" if scenario.rounds else "")
        + f", {result.rejected} attempts rejected, {result.seconds:.1f} s",
        "",
        "## Agents",
        "",
    ]
    lines += [f"- {name}: {what}" for name, what in result.agents.items()]
    for name, report in result.llm_reports.items():
        lines.append(f"- {name} (LLM): {report}")
    if scenario.report.rows:
        lines += ["", f"## Outcomes: one row per {scenario.report.rows}", "",
                  markdown_table(scenario.report.columns, rows)]
    if "chart" in written:
        lines += ["", f"![{_cell(scenario.name)}]({written['chart'].name})", ""]
    elif chart_problem:
        lines += ["", f"The chart could not be drawn: {_cell(chart_problem)}", ""]
    charts = sequence_charts(result)
    if charts:
        total = len(enactments(result))
        lines += ["", "## Sequence charts", "",
                  f"Each enactment's actions, one lifeline per role (the first {len(charts)} "
                  f"of {total} enactments, at most {CHART_STEPS} steps each).", ""]
        for root, svg in charts:
            heading = html.escape(_cell(root), quote=False)
            lines += [f"### Enactment {heading}", "", svg.rstrip("\n"), ""]
    lines += ["", "## Files", ""]
    lines += [f"- `{path.name}`: {kind}" for kind, path in written.items()
              if kind != "report"]
    return "\n".join(lines) + "\n"
