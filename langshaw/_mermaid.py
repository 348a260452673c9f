"""Write a :mod:`langshaw._diagram` graph as Mermaid text: a ``flowchart`` for a
protocol, a ``sequenceDiagram`` for a chart.

Mermaid reads its own syntax inside labels (brackets, quotes, ``;``, ``#``,
``%%``, ``<...>`` as HTML), so every piece of text goes through :func:`label`:
anything but letters, digits and a few plain marks becomes a Mermaid entity
code (``#60;`` for ``<``). Nodes and participants get identifiers of our own
(``A0``, ``R1``): the names of the protocol appear only in labels.
"""

from __future__ import annotations

from langshaw._diagram import ProtocolGraph, SequenceChart

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.,=()/?!+*'")


def label(value: object) -> str:
    """``value`` as Mermaid label text: one line, every mark Mermaid could
    read as syntax written as an entity code."""
    s = " ".join(str(value).split())
    return "".join(c if c in _PLAIN else f"#{ord(c)};" for c in s)


def protocol_mermaid(graph: ProtocolGraph) -> str:
    """The protocol as a Mermaid flowchart: a subgraph (lane) per role, in it a
    subgraph per sub-scope, a node per action; dependencies as arrows, nono as
    dotted lines crossed at both ends, nogo as dotted arrows crossed at the end."""
    ids = {node.name: f"A{i}" for i, node in enumerate(graph.actions)}
    scope_ids = {scope: f"S{i}" for i, scope in enumerate(graph.scopes)}
    lines = [f"%% {label(graph.name)}: protocol diagram", f"%% {label(graph.subtitle)}",
             *(f"%% nono {n}: {_chain_text(group)}"
               for n, group in enumerate(graph.nono_chains, 1)),
             "flowchart TB"]
    for r, role in enumerate(graph.roles):
        lines.append(f'  subgraph R{r}["{label(role)}"]')
        lines.append("    direction TB")
        mine = [n for n in graph.actions if n.role == role]
        for node in (n for n in mine if not n.sub):
            lines.append(f"    {_node(ids[node.name], node.name, node.params)}")
        for scope, sid in scope_ids.items():
            inner = [n for n in mine if n.scope == scope]
            if not inner:
                continue
            lines.append(f'    subgraph R{r}{sid}["{label("sub-scope " + ", ".join(scope))}"]')
            for node in inner:
                lines.append(f"      {_node(ids[node.name], node.name, node.params)}")
            lines.append("    end")
        lines.append("  end")
    links: list[str] = []
    for dependency, dependent in graph.depends:
        if dependency in ids and dependent in ids:
            links.append(f"  {ids[dependency]} --> {ids[dependent]}")
    depends = len(links)
    for i, (a, b) in enumerate(graph.nono):
        chain = graph.chain_of(i)
        links.append(f"  {ids[a]} x-.-x|nono{'' if chain is None else f' {chain[0]}'}| {ids[b]}")
    nonos = len(links)
    for a, b in graph.nogo:
        links.append(f"  {ids[a]} -.-x|nogo| {ids[b]}")
    lines.extend(links)
    if nonos > depends:
        lines.append(f"  linkStyle {','.join(map(str, range(depends, nonos)))} "
                     "stroke:#c62828,stroke-width:2px")
    if len(links) > nonos:
        lines.append(f"  linkStyle {','.join(map(str, range(nonos, len(links))))} "
                     "stroke:#e07000,stroke-width:2px")
    completing = [ids[n.name] for n in graph.actions if n.completes]
    if completing:
        lines.append("  classDef completes stroke-width:3px")
        lines.append(f"  class {','.join(completing)} completes")
    return "\n".join(lines) + "\n"


def _chain_text(group: tuple[str, ...]) -> str:
    """What a large nono group's chain stands for (its links say only 'nono N')."""
    return label(f"these {len(group)} actions exclude each other, linked in a chain: "
                 + ", ".join(group))


def _node(ident: str, name: str, params: tuple[object, ...]) -> str:
    shown = label(name) + ("<br>" + label(", ".join(map(str, params))) if params else "")
    return f'{ident}["{shown}"]'


def sequence_mermaid(chart: SequenceChart) -> str:
    """A chart as a Mermaid sequence diagram: the breaking step is a crossed
    arrow (``-x``) with a note saying what it breaks."""
    ids = {role: f"R{i}" for i, role in enumerate(chart.roles)}
    lines = [f"%% {label(chart.title)}", "sequenceDiagram"]
    lines += [f"  participant {ident} as {label(role)}" for role, ident in ids.items()]
    every = f"{ids[chart.roles[0]]},{ids[chart.roles[-1]]}" if len(chart.roles) > 1 else (
        ids[chart.roles[0]] if chart.roles else "")
    if every:
        lines.append(f"  Note over {every}: {label(chart.title)}")
    for n, m in enumerate(chart.messages, 1):
        arrow = "-x" if m.broken else "->>"
        lines.append(f"  {ids[m.role]}{arrow}{ids[m.target]}: {n}. {label(m.label)}")
        if m.note:
            lines.append(f"  Note right of {ids[m.role]}: {label(m.note)}")
    if chart.ending and every:
        lines.append(f"  Note over {every}: {label(chart.ending)}")
    return "\n".join(lines) + "\n"
