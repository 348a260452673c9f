"""Draw the diagram of every shipped protocol into docs/diagrams/, as SVG.

    python scripts/diagrams.py           write them (after changing a protocol
                                         or the drawing code)
    python scripts/diagrams.py --check   write nothing; exit 1, naming them, if
                                         any is missing, stale or extra

protocols/NAME.lsh is drawn as docs/diagrams/NAME.svg, protocols/patterns/
NAME.lsh as docs/diagrams/patterns/NAME.svg (the names `strabo protocols`
lists). tests/langshaw/test_diagram.py runs --check, so the committed files are
never older than the code and the protocols.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ROOT / "protocols"
OUT = ROOT / "docs" / "diagrams"


def expected() -> dict[Path, str]:
    """Every diagram file there should be, with its content."""
    sys.path.insert(0, str(ROOT))
    from langshaw import LangshawProtocol
    from langshaw.diagrams import protocol_diagram

    found = {}
    for path in sorted([*PROTOCOLS.glob("*.lsh"), *PROTOCOLS.glob("patterns/*.lsh")]):
        name = path.relative_to(PROTOCOLS).with_suffix(".svg")
        found[OUT / name] = protocol_diagram(LangshawProtocol.load(path))
    return found


def stale() -> list[str]:
    """What --check would complain of: each file missing, out of date, or extra."""
    wanted = expected()
    problems = []
    for path, text in wanted.items():
        if not path.is_file():
            problems.append(f"missing: {path.relative_to(ROOT)}")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"out of date: {path.relative_to(ROOT)}")
    for path in sorted(OUT.rglob("*.svg")) if OUT.is_dir() else []:
        if path not in wanted:
            problems.append(f"extra (no such protocol): {path.relative_to(ROOT)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; fail if a diagram is missing or stale")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run: python scripts/diagrams.py", file=sys.stderr)
        return 1 if problems else 0
    for path, text in expected().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    for problem in stale():  # an extra file, for a protocol that is gone
        print(problem, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
