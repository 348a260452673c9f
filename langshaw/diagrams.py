"""Diagrams of protocols and of runs, as SVG or Mermaid text.

* :func:`protocol_diagram`: roles as lanes, actions with their parameters
  (keys, dependencies, what the performer binds or carries), dependencies as
  arrows, sub-scopes, nono and nogo, a legend (``strabo check --diagram``);
* :func:`sequence_diagram` of a :class:`SequenceChart`: roles as lifelines,
  actions as arrows with their bindings, the step that breaks a rule marked.
  :func:`counterexamples` makes one per trace a verification report holds
  (``strabo check --diagram --verify``); :func:`chart` one from any steps
  (``strabo simulate``'s report, one per enactment).

The SVG is drawn by this package (no graphviz, no script, no network), the
same bytes for the same input, and every name and value in it is escaped:
bindings come from agents.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langshaw._diagram import SequenceChart, chart, protocol_graph
from langshaw._mermaid import protocol_mermaid, sequence_mermaid
from langshaw._svg import protocol_svg, sequence_svg
from langshaw.model import LangshawProtocol

if TYPE_CHECKING:
    from langshaw.verify import Report

__all__ = [
    "FORMATS",
    "SequenceChart",
    "chart",
    "counterexample_path",
    "counterexamples",
    "format_of",
    "protocol_diagram",
    "sequence_diagram",
]

FORMATS = ("svg", "mermaid")


def format_of(path: str | Path, fmt: str | None = None) -> str:
    """The format to write ``path`` in: ``fmt`` if given, else mermaid for a
    ``.mmd`` file and SVG otherwise. ValueError for an unknown ``fmt``."""
    if fmt is None:
        return "mermaid" if str(path).lower().endswith(".mmd") else "svg"
    if fmt not in FORMATS:
        raise ValueError(f"unknown diagram format {fmt!r} (choose from {', '.join(FORMATS)})")
    return fmt


def protocol_diagram(protocol: LangshawProtocol, fmt: str = "svg") -> str:
    """The protocol's diagram, as an SVG document or Mermaid flowchart text."""
    graph = protocol_graph(protocol)
    return protocol_svg(graph) if format_of("", fmt) == "svg" else protocol_mermaid(graph)


def sequence_diagram(sequence: SequenceChart, fmt: str = "svg") -> str:
    """A chart as an SVG document or Mermaid sequenceDiagram text."""
    return sequence_svg(sequence) if format_of("", fmt) == "svg" else sequence_mermaid(sequence)


def counterexample_path(path: str | Path, n: int) -> Path:
    """Where the ``n``-th counterexample of the diagram at ``path`` goes:
    ``out/p.svg`` -> ``out/p-counterexample-1.svg``."""
    path = Path(path)
    return path.with_name(f"{path.stem}-counterexample-{n}{path.suffix}")


def counterexamples(protocol: LangshawProtocol, reports: list[Report]) -> list[SequenceChart]:
    """One chart per trace the reports hold, in the order ``strabo check``
    prints them: per semantics, the stuck trace, then each conflict's (whose
    last step, the one that breaks the rule, is marked)."""
    from langshaw.verify import Step

    Steps = list[tuple[str, str, Iterable[tuple[str, Any]], str]]

    found: list[SequenceChart] = []
    goal = " and ".join(" or ".join(c) for c in protocol.completion)

    def steps(trace: list[Step] | tuple[Step, ...]) -> Steps:
        return [(s.role, s.action, s.bindings, _heard(s)) for s in trace]

    for report in reports:
        if report.complete and report.live is False:
            n = len(found) + 1
            title = (f"{protocol.name}: counterexample {n} ({report.semantics}): not live")
            ending = ("stuck: from here the enactment can never complete" if report.stuck
                      else "no enactment can ever complete") + f" ({goal})"
            found.append(chart(protocol, title, steps(report.stuck), ending=ending))
        for conflict in report.conflicts if report.complete else []:
            n = len(found) + 1
            title = (f"{protocol.name}: counterexample {n} ({report.semantics}): "
                     f"unsafe ({conflict.rule}): {conflict.message}")
            if conflict.rule == "nogo":
                note = f"breaks nogo {conflict.actions[0]} -/> {conflict.actions[-1]}"
            elif conflict.rule == "nono":
                note = f"breaks nono {' '.join(conflict.actions)}: they exclude each other"
            elif conflict.attribute is not None:
                note = f"breaks {conflict.rule}: binds '{conflict.attribute}' a second time"
            else:
                note = f"breaks {conflict.rule}"
            trace = list(conflict.trace)
            found.append(chart(protocol, title, steps(trace), broken=len(trace) - 1,
                               broken_note=note))
    return found


def _heard(step: object) -> str:
    received = getattr(step, "received", None)
    if received is None:
        return ""
    return "received " + (", ".join(map(str, received)) if received else "nothing")
