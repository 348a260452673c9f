"""Lines of code of a Python file: lines holding code, not blank, not comments,
not docstrings (the README compares the UCP agents with the Strabo paper's Table 4).

    .venv/bin/python bench/loc.py strabo/ucp/*.py
"""

from __future__ import annotations

import io
import sys
import tokenize

_SKIP = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.ENCODING,
}


def loc(path: str) -> int:
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    code: set[int] = set()
    docstrings: set[int] = set()
    previous = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        lines = range(token.start[0], token.end[0] + 1)
        if token.type == tokenize.STRING and previous in (
            None,
            tokenize.INDENT,
            tokenize.NEWLINE,
            tokenize.DEDENT,
        ):
            docstrings.update(lines)  # a string standing alone: a docstring
        elif token.type not in _SKIP:
            code.update(lines)
        if token.type not in (tokenize.COMMENT, tokenize.NL):
            previous = token.type
    return len(code - docstrings)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for name in sys.argv[1:]:
        print(f"{loc(name):5d}  {name}")
