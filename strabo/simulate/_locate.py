"""Where in a TOML file a key path is written, so that errors can say ``file:line``.

``tomllib`` gives line numbers for syntax errors only; a scenario that parses
but says something wrong (an unknown role, a policy that does not import) is
reported at the line of the key, found here from the text. Only the forms a
scenario uses are understood: ``[a.b]`` headers, ``key = value`` lines and
``key = { inline = table }``; a key not found is reported at its table, or
without a line.
"""

from __future__ import annotations

import re

# Each part can match only one way (no two quantifiers compete for the same
# characters), so a long line costs linear time, not cubic.
_HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*=""")


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in re.findall(r"""("[^"]*"|'[^']*'|[^.]+)""",
                                                               dotted))


def line_of(text: str, path: tuple[str, ...]) -> int | None:
    """The 1-based line where ``path`` (``("agents", "buyer", "count")``) is
    written: its key line or its table header (or its first subtable's, for
    ``[agents.NAME]`` tables), else its nearest enclosing table's. None when
    nothing of it is found."""
    lines = text.splitlines()
    for length in range(len(path), 0, -1):
        wanted = path[:length]
        table: tuple[str, ...] = ()
        for number, line in enumerate(lines, 1):
            header = _HEADER.match(line)
            if header:
                table = _parts(header.group(1).strip())
                if table[:len(wanted)] == wanted:  # the table, or its first subtable
                    return number
                continue
            key = _KEY.match(line)
            if key and (*table, key.group(1).strip("\"'")) == wanted:
                return number
            inline = rf"""[{{,]\s*["']?{re.escape(wanted[-1])}["']?\s*="""
            if (len(wanted) >= 2 and key and table == wanted[:-2]
                    and key.group(1).strip("\"'") == wanted[-2] and re.search(inline, line)):
                return number  # key = { ... }: an inline table holding the last part
    return None
