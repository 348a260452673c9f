"""Lines of code of a Python file: lines holding code, not blank, not comments,
not docstrings (the README compares the UCP agents with the Strabo paper's Table 4).

    .venv/bin/python bench/loc.py strabo/ucp/*.py
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    """Print each file's count, as ``  64  path`` (the README quotes this format);
    1 if a file cannot be read or is not Python, after counting the others."""
    parser = argparse.ArgumentParser(
        prog="bench/loc.py",
        description="Count the lines of code of Python files: the lines holding code, "
        "not blank lines, not comments, not docstrings (a string standing alone as a "
        "statement). A line holding code and a comment counts; a statement over "
        "several lines counts each of them.",
        epilog="example: .venv/bin/python bench/loc.py strabo/ucp/*.py",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="a Python source file")
    args = parser.parse_args(argv)
    status = 0
    for name in args.files:
        try:
            count = loc(name)
        except (OSError, UnicodeDecodeError, SyntaxError, tokenize.TokenError) as exc:
            if isinstance(exc, OSError):
                reason = exc.strerror or str(exc)
            elif isinstance(exc, UnicodeDecodeError):
                reason = "not UTF-8 text"
            else:
                reason = f"not Python: {exc}"
            print(f"bench/loc.py: {name}: {reason}", file=sys.stderr)
            status = 1
            continue
        print(f"{count:5d}  {name}")
    return status


if __name__ == "__main__":
    sys.exit(main())
