"""Draw a :mod:`langshaw._diagram` graph as SVG, with no renderer but this code.

The layout is deliberately simple, so that it is deterministic (the same graph
gives the same bytes) and needs no graphviz: a protocol is a grid, one column
(lane) per role and one row per dependency depth; a chart is one lifeline per
role and one row per step. Text is monospace, so its width is known without a
font. Every piece of text goes through :func:`text`: names, and above all
bindings, come from people and agents, and must show as text, never as markup.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable

from langshaw._diagram import ActionNode, ProtocolGraph, SequenceChart

FONT = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"
CHAR = 0.6  # a monospace character's width, in ems
MARGIN = 20
LANE = 250  # a protocol lane's width
BOX = 214  # an action box's width
LINE = 14  # a line of 11px text
GAP = 26  # between boxes of one lane and cell
ROW_GAP = 44  # between rows (room for the arrows)
ACROSS = 3  # actions of one lane and row side by side, at most
BULGE = 48  # how far a nono or nogo curve between boxes of one lane swings out

COLOURS = {"key": "#8a4b00", "done": "#555555", "out": "#1a7f37", "in": "#0b5cad"}
NONO = "#c62828"
NOGO = "#e07000"
SCOPE_FILLS = ("#eef4ff", "#f3eeff", "#eefaf0", "#fff6e6", "#fdeef4", "#eef9fb")
_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def text(value: object) -> str:
    """``value`` as XML text or attribute content: escaped, and with the
    characters XML 1.0 cannot hold replaced by U+FFFD."""
    s = _INVALID.sub("\ufffd", str(value))
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#39;"))


def width_of(s: str, size: float) -> float:
    return len(s) * size * CHAR


def _num(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, s: str, size: float = 11, anchor: str = "start",
          extra: str = "") -> str:
    return (f'<text x="{_num(x)}" y="{_num(y)}" font-size="{_num(size)}" '
            f'text-anchor="{anchor}"{extra}>{text(s)}</text>')


def _open(width: float, height: float, title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_num(width)}" '
        f'height="{_num(height)}" viewBox="0 0 {_num(width)} {_num(height)}" '
        f'font-family="{FONT}" role="img">',
        f"<title>{text(title)}</title>",
        "<defs>",
        *(f'<marker id="arrow-{name}" viewBox="0 0 10 10" refX="9" refY="5" '
          f'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
          f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
          for name, colour in (("dep", "#444444"), ("nogo", NOGO), ("msg", "#333333"),
                               ("bad", NONO))),
        "</defs>",
        f'<rect x="0" y="0" width="{_num(width)}" height="{_num(height)}" fill="#ffffff"/>',
    ]


# Protocols ------------------------------------------------------------------------


def _lines(node: ActionNode) -> list[list[tuple[str, str]]]:
    """The box's parameter lines: each a list of (text, kind) that fits."""
    room = int((BOX - 16) / (11 * CHAR))
    lines: list[list[tuple[str, str]]] = [[]]
    used = 0
    for i, param in enumerate(node.params):
        piece = str(param) + ("," if i < len(node.params) - 1 else "")
        if lines[-1] and used + 1 + len(piece) > room:
            lines.append([])
            used = 0
        used += len(piece) + (1 if lines[-1] else 0)
        lines[-1].append((piece, param.kind))
    return [line for line in lines if line]


def _box_height(node: ActionNode) -> float:
    return 30 + LINE * len(_lines(node)) + (LINE if node.sub else 0)


def protocol_svg(graph: ProtocolGraph) -> str:
    """The protocol as one SVG document (a string, no XML declaration, so that
    it may be inlined in HTML or Markdown as it is)."""
    depth_rows = sorted({a.depth for a in graph.actions})
    cells: dict[tuple[int, str], list[ActionNode]] = {}
    for node in graph.actions:
        cells.setdefault((node.depth, node.role), []).append(node)
    # A lane is as wide as its widest row needs (actions of one cell side by
    # side, at most ACROSS of them, then on a line below).
    across = {role: min(ACROSS, max([len(v) for (_, r), v in cells.items() if r == role],
                                    default=1))
              for role in graph.roles}
    subtitle = textwrap.wrap(graph.subtitle, 110) or [""]
    top = MARGIN + 30 + LINE * len(subtitle) + 14
    left = MARGIN + BULGE
    lanes: dict[str, tuple[float, float]] = {}  # role -> (x, width)
    x: float = left
    for role in graph.roles:
        lanes[role] = (x, LANE * across[role])
        x += LANE * across[role]
    boxes: dict[str, tuple[float, float, float, float]] = {}
    y: float = top + 34
    for depth in depth_rows:
        tallest = 0.0
        for role in graph.roles:
            cell = cells.get((depth, role), [])
            cy: float = y
            for start in range(0, len(cell), ACROSS):
                line = cell[start:start + ACROSS]
                h = max(_box_height(node) for node in line)
                lane_x, lane_w = lanes[role]
                slot = lane_w / len(line)
                for i, node in enumerate(line):
                    boxes[node.name] = (lane_x + slot * i + (slot - BOX) / 2, cy, BOX,
                                        _box_height(node))
                cy += h + GAP
            tallest = max(tallest, cy - GAP - y)
        y += tallest + ROW_GAP
    lanes_bottom = y - ROW_GAP + 20
    width = x + BULGE + MARGIN
    legend = _legend(graph, MARGIN, lanes_bottom + 18, width - 2 * MARGIN)
    height = lanes_bottom + 18 + legend[0] + MARGIN
    out = _open(width, height, f"{graph.name}: protocol diagram")
    out.append(_text(MARGIN, MARGIN + 16, graph.name, 18, extra=' font-weight="bold"'))
    for i, said in enumerate(subtitle):
        out.append(_text(MARGIN, MARGIN + 36 + i * LINE, said, 11, extra=' fill="#444444"'))
    for column, (role, (x, lane_w)) in enumerate(lanes.items()):
        fill = "#f7f7f7" if column % 2 == 0 else "#fbfbfb"
        out.append(f'<rect x="{_num(x)}" y="{_num(top)}" width="{_num(lane_w)}" '
                   f'height="{_num(lanes_bottom - top)}" fill="{fill}" stroke="#dddddd"/>')
        out.append(_text(x + lane_w / 2, top + 20, role, 14, "middle",
                         ' font-weight="bold" class="role"'))
    scope_fill = {scope: SCOPE_FILLS[i % len(SCOPE_FILLS)] for i, scope in enumerate(graph.scopes)}
    out.append('<g class="depends">')
    for dependency, dependent in graph.depends:
        if dependency in boxes and dependent in boxes:
            out.append(_dependency(boxes[dependency], boxes[dependent]))
    out.append("</g>")
    for node in graph.actions:
        out.extend(_box(node, boxes[node.name], scope_fill.get(node.scope, "#ffffff")))
    out.append('<g class="exclusions">')
    for i, (a, b) in enumerate(graph.nono):
        out.extend(_exclusion(boxes[a], boxes[b], "nono", a, b, graph.chain_of(i)))
    for a, b in graph.nogo:
        out.extend(_exclusion(boxes[a], boxes[b], "nogo", a, b))
    out.append("</g>")
    out.extend(legend[1])
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _box(node: ActionNode, at: tuple[float, float, float, float], fill: str) -> list[str]:
    x, y, w, h = at
    out = [f'<g class="action" data-role="{text(node.role)}">',
           f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" height="{_num(h)}" rx="6" '
           f'fill="{fill}" stroke="#333333" stroke-width="{2.4 if node.completes else 1.2}"'
           + (' stroke-dasharray="5 3"' if node.sub else "") + "/>"]
    out.append(_text(x + 8, y + 18, node.name, 13, extra=' font-weight="bold"'))
    line_y = y + 18
    if node.sub:
        line_y += LINE
        out.append(_text(x + 8, line_y, "sub-scope " + ", ".join(node.scope), 10,
                         extra=' font-style="italic" fill="#555555"'))
    for line in _lines(node):
        line_y += LINE
        spans = []
        for i, (piece, kind) in enumerate(line):
            space = " " if i else ""
            weight = ' font-weight="bold"' if kind == "key" else ""
            spans.append(f'<tspan fill="{COLOURS[kind]}"{weight}>{space}{text(piece)}</tspan>')
        out.append(f'<text x="{_num(x + 8)}" y="{_num(line_y)}" font-size="11">'
                   + "".join(spans) + "</text>")
    out.append("</g>")
    return out


def _dependency(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> str:
    x1, y1 = a[0] + a[2] / 2, a[1] + a[3]
    x2, y2 = b[0] + b[2] / 2, b[1]
    if y2 <= y1:  # a cycle's closing edge: from the side
        x1, y1 = a[0] + a[2], a[1] + a[3] / 2
    bend = max(20.0, (y2 - y1) / 2)
    return (f'<path d="M{_num(x1)},{_num(y1)} C{_num(x1)},{_num(y1 + bend)} '
            f'{_num(x2)},{_num(y2 - bend)} {_num(x2)},{_num(y2 - 2)}" fill="none" '
            f'stroke="#444444" stroke-width="1.3" marker-end="url(#arrow-dep)"/>')


def _curve(a: tuple[float, float, float, float], b: tuple[float, float, float, float],
           swing: float, shift: float = 0) -> tuple[list[float], tuple[float, float]]:
    """Control points of a curve between two boxes' sides, and its midpoint;
    ``shift`` moves its start up and its end down (so A -/> B and B -/> A part)."""
    ay, by = a[1] + a[3] / 2 - shift, b[1] + b[3] / 2 + shift
    if abs(a[0] - b[0]) < 1:  # one lane: out to one side and back
        side = a[0] + a[2] if swing > 0 else a[0]
        pts = [side, ay, side + swing, ay, side + swing, by, side, by]
    elif a[0] < b[0]:
        pts = [a[0] + a[2], ay, a[0] + a[2] + 40, ay, b[0] - 40, by, b[0], by]
    else:
        pts = [a[0], ay, a[0] - 40, ay, b[0] + b[2] + 40, by, b[0] + b[2], by]
    mid = ((pts[0] + 3 * pts[2] + 3 * pts[4] + pts[6]) / 8,
           (pts[1] + 3 * pts[3] + 3 * pts[5] + pts[7]) / 8)
    return pts, mid


def _exclusion(a: tuple[float, float, float, float], b: tuple[float, float, float, float],
               rule: str, first: str, second: str,
               chain: tuple[int, tuple[str, ...]] | None = None) -> list[str]:
    """A nono pair or a nogo edge; ``chain``: the link is one of a large nono
    group's chain (its number and its actions), labelled with the number."""
    nono = rule == "nono"
    pts, (mx, my) = _curve(a, b, BULGE * (0.75 if nono else -0.75), 0 if nono else 7)
    colour = NONO if nono else NOGO
    p = [_num(v) for v in pts]
    what = f"{first} and {second} exclude each other" if nono else f"{first} -/> {second}"
    said = rule
    if chain is not None:
        said = f"nono {chain[0]}"
        what = (f"{first}, {second} and the {len(chain[1]) - 2} other actions of the group "
                "exclude each other")
    out = [f'<g class="{rule}"><title>{text(said + ": " + what)}</title>',
           f'<path d="M{p[0]},{p[1]} C{p[2]},{p[3]} {p[4]},{p[5]} {p[6]},{p[7]}" fill="none" '
           f'stroke="{colour}" stroke-width="1.6" stroke-dasharray="6 4"'
           + ("" if nono else ' marker-end="url(#arrow-nogo)"') + "/>"]
    out.extend(_cross(mx, my, colour, nono))
    out.append(_text(mx + 9, my - 6, said, 10, extra=f' fill="{colour}" font-weight="bold"'))
    out.append("</g>")
    return out


def _cross(x: float, y: float, colour: str, circled: bool) -> list[str]:
    """The mark in the middle of an exclusion: an X (nono), a struck circle (nogo)."""
    if circled:
        return [f'<path d="M{_num(x - 5)},{_num(y - 5)} L{_num(x + 5)},{_num(y + 5)} '
                f'M{_num(x - 5)},{_num(y + 5)} L{_num(x + 5)},{_num(y - 5)}" '
                f'stroke="{colour}" stroke-width="2.2"/>']
    return [f'<circle cx="{_num(x)}" cy="{_num(y)}" r="5.5" fill="#ffffff" stroke="{colour}" '
            f'stroke-width="1.6"/>',
            f'<path d="M{_num(x - 4)},{_num(y + 4)} L{_num(x + 4)},{_num(y - 4)}" '
            f'stroke="{colour}" stroke-width="1.6"/>']


def _legend(graph: ProtocolGraph, x: float, y: float, width: float) -> tuple[float, list[str]]:
    """The legend under the lanes: its height, and its elements."""
    items: list[tuple[str, str]] = [
        ("dep", "A -> B: B depends on A (A done first)"),
        ("nono", "nono: the two exclude each other"),
        ("nogo", "nogo A -/> B: once A occurred, B may not"),
        ("done", "thick border: completes the enactment"),
    ]
    words = [("key", "key: a key (the scope)"), ("done", "done: a dependency"),
             ("out", "out: the performer binds it"), ("in", "in: bound before, carried")]
    scopes = [(", ".join(s), SCOPE_FILLS[i % len(SCOPE_FILLS)])
              for i, s in enumerate(graph.scopes)]
    chains = [f"nono {n}: these {len(g)} actions exclude each other, linked in a chain: "
              + _cut(", ".join(g), 90) for n, g in enumerate(graph.nono_chains, 1)]
    rows = len(items) + 1 + (1 + len(scopes) if scopes else 0) + len(chains)
    height = 28 + rows * 18
    out = ['<g class="legend">',
           f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(width)}" height="{_num(height)}" '
           f'fill="#ffffff" stroke="#bbbbbb" rx="4"/>',
           _text(x + 10, y + 18, "Legend", 12, extra=' font-weight="bold"')]
    row = y + 38
    for kind, label in items:
        if kind == "dep":
            out.append(f'<path d="M{_num(x + 12)},{_num(row - 4)} H{_num(x + 52)}" '
                       f'stroke="#444444" stroke-width="1.3" marker-end="url(#arrow-dep)"/>')
        elif kind in ("nono", "nogo"):
            colour = NONO if kind == "nono" else NOGO
            out.append(f'<path d="M{_num(x + 12)},{_num(row - 4)} H{_num(x + 52)}" '
                       f'stroke="{colour}" stroke-width="1.6" stroke-dasharray="6 4"'
                       + (' marker-end="url(#arrow-nogo)"' if kind == "nogo" else "") + "/>")
            out.extend(_cross(x + 32, row - 4, colour, kind == "nono"))
        else:
            out.append(f'<rect x="{_num(x + 14)}" y="{_num(row - 11)}" width="36" height="14" '
                       f'rx="3" fill="#ffffff" stroke="#333333" stroke-width="2.4"/>')
        out.append(_text(x + 64, row, label, 11))
        row += 18
    spans = "".join(f'<tspan fill="{COLOURS[k]}">{"   " if i else ""}{text(w)}</tspan>'
                    for i, (k, w) in enumerate(words))
    out.append(f'<text x="{_num(x + 12)}" y="{_num(row)}" font-size="11">{spans}</text>')
    row += 18
    if scopes:
        out.append(_text(x + 12, row, "dashed box: an action of a sub-scope (its keys), "
                         "by colour:", 11))
        row += 18
        for label, fill in scopes:
            out.append(f'<rect x="{_num(x + 14)}" y="{_num(row - 11)}" width="36" height="14" '
                       f'rx="3" fill="{fill}" stroke="#333333" stroke-dasharray="5 3"/>')
            out.append(_text(x + 64, row, "sub-scope " + label, 11))
            row += 18
    for said in chains:
        out.append(_text(x + 12, row, said, 11, extra=f' fill="{NONO}"'))
        row += 18
    out.append("</g>")
    return height, out


# Sequence charts ------------------------------------------------------------------

SEQ_LANE = 170
SEQ_WRAP = 90  # characters of a label's line


def _wrap(s: str) -> list[str]:
    return textwrap.wrap(s, SEQ_WRAP, break_long_words=True, break_on_hyphens=False) or [""]


def sequence_svg(chart: SequenceChart) -> str:
    """A chart as one SVG document: lifelines, then one arrow per step, the
    breaking step in red with its note."""
    title = _wrap(chart.title)
    top = MARGIN + LINE * len(title) + 16
    left = MARGIN + 34
    xs = {role: left + SEQ_LANE / 2 + i * SEQ_LANE for i, role in enumerate(chart.roles)}
    rows: list[tuple[float, list[str], list[str]]] = []
    y: float = top + 50
    widest: float = left + SEQ_LANE * max(1, len(chart.roles))
    for m in chart.messages:
        label, note = _wrap(m.label), _wrap(m.note) if m.note else []
        start = min(xs[m.role], xs[m.target]) + 6
        longest = max(len(s) for s in label + note)
        widest = max(widest, start + width_of("x" * longest, 11) + 60)
        rows.append((y, label, note))
        y += LINE * (len(label) + len(note)) + (34 if m.role == m.target else 22)
    ending = _wrap(chart.ending) if chart.ending else []
    bottom = y + (LINE * len(ending) + 20 if ending else 0)
    width, height = widest + MARGIN, bottom + 40 + MARGIN
    out = _open(width, height, chart.title)
    for i, line in enumerate(title):
        out.append(_text(MARGIN, MARGIN + 12 + i * LINE, line, 13 if i == 0 else 11,
                         extra=' font-weight="bold"' if i == 0 else ""))
    for role, x in xs.items():
        out.append(f'<line x1="{_num(x)}" y1="{_num(top + 30)}" x2="{_num(x)}" '
                   f'y2="{_num(bottom + 10)}" stroke="#999999" stroke-dasharray="4 3"/>')
        for box_y in (top, bottom + 10):
            out.append(f'<rect x="{_num(x - 70)}" y="{_num(box_y)}" width="140" height="28" '
                       f'rx="4" fill="#f2f2f2" stroke="#555555"/>')
            out.append(_text(x, box_y + 18, _cut(role, 20), 12, "middle",
                             ' font-weight="bold" class="role"'))
    for n, (m, (row_y, label, note)) in enumerate(zip(chart.messages, rows, strict=True), 1):
        out.extend(_message(n, m.role, m.target, m.broken, xs, row_y, label, note))
    if ending:
        out.append(f'<rect x="{_num(left)}" y="{_num(y - 6)}" '
                   f'width="{_num(SEQ_LANE * max(1, len(chart.roles)))}" '
                   f'height="{_num(LINE * len(ending) + 10)}" fill="#fff4e5" stroke="#e07000"/>')
        for i, line in enumerate(ending):
            out.append(_text(left + 8, y + 8 + i * LINE, line, 11, extra=' class="ending"'))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _message(n: int, role: str, target: str, broken: bool, xs: dict[str, float], y: float,
             label: Iterable[str], note: list[str]) -> list[str]:
    colour = NONO if broken else "#333333"
    label = list(label)
    cls = "step broken" if broken else "step"
    out = [f'<g class="{cls}">', _text(MARGIN, y + LINE * (len(label) - 1) + 6, str(n), 11,
                                        extra=f' fill="{colour}"')]
    x1, x2 = xs[role], xs[target]
    start = min(x1, x2) + 6
    for i, line in enumerate(label):
        out.append(_text(start, y + i * LINE, line, 11,
                         extra=f' fill="{colour}"' + (' font-weight="bold"' if broken else "")))
    arrow_y = y + LINE * (len(label) - 1) + 8
    marker = "bad" if broken else "msg"
    stroke = f'stroke="{colour}" stroke-width="{2.2 if broken else 1.3}"'
    if x1 == x2:
        out.append(f'<path d="M{_num(x1)},{_num(arrow_y)} h36 v12 h-34" fill="none" {stroke} '
                   f'marker-end="url(#arrow-{marker})"/>')
        arrow_y += 12
    else:
        out.append(f'<line x1="{_num(x1)}" y1="{_num(arrow_y)}" '
                   f'x2="{_num(x2 - 3 if x2 > x1 else x2 + 3)}" y2="{_num(arrow_y)}" {stroke} '
                   f'marker-end="url(#arrow-{marker})"/>')
    if broken:
        out.extend(_cross(x1, arrow_y, NONO, True))
    for i, line in enumerate(note):
        out.append(_text(start, arrow_y + 14 + i * LINE, ("X " if broken and not i else "") + line,
                         10, extra=f' fill="{colour}" font-style="italic"'))
    out.append("</g>")
    return out
