"""``strabo check``: parse and validate protocol files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DESCRIPTION = """\
Parse and validate Langshaw protocol files.

For each valid file, print a summary: roles, keys, actions with their
performers, and the completion condition. For an invalid file, print every
error as path:line:col: message: syntax, undeclared names, and the attribute
types (an unknown type name, a schema file that cannot be read or is not a
valid JSON Schema, an attribute typed differently in two actions). Warnings
(actions that can never be enabled, for instance) are printed too but do not
fail the check.

Exit status: 0 when every file is valid, 1 otherwise.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="protocol files (.lsh)")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print only problems, no summaries"
    )


def run(args: argparse.Namespace) -> int:
    from langshaw.diagnostics import Diagnostic
    from langshaw.model import diagnose

    failed = 0
    for name in args.files:
        path = Path(name)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            print(Diagnostic(name, 1, 1, f"cannot read: {reason}"), file=sys.stderr)
            failed += 1
            continue
        protocol, diagnostics = diagnose(text, name, base=path.parent)
        for diagnostic in diagnostics:
            print(diagnostic, file=sys.stderr)
        if protocol is None:
            failed += 1
        elif not args.quiet:
            print(protocol.describe())
            print()
    total = len(args.files)
    if failed:
        print(f"{failed} of {total} file(s) invalid", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"{total} file(s) valid")
    return 0
