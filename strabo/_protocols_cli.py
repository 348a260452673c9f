"""``strabo check`` with bundled protocols by name, and ``strabo protocols``.

``langshaw`` checks files and knows nothing of what strabo ships; this layer
turns a name such as ``atomic-ucp`` into the bundled file before checking it.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from langshaw import cli as check_cli
from syncserver import bundled

CHECK_DESCRIPTION = (
    check_cli.DESCRIPTION
    + """
A FILE that does not exist but names a bundled protocol checks that one:
'strabo check atomic-ucp purchase' ('strabo protocols' lists them). The
pattern protocols are named with their folder, 'patterns/market', or without
it, 'market', when no other bundled protocol has that name.
"""
)

DESCRIPTION = """\
List the protocols bundled with strabo, or print one.

  strabo protocols                 the names, each with what it is about
  strabo protocols atomic-ucp      the protocol's text (save it, edit it)
  strabo protocols --path NAME     where the file is installed

The pattern protocols (docs/patterns.md) are listed as patterns/NAME; NAME
alone also finds one when no other bundled protocol has that name (so
'market' is 'patterns/market'). Wherever a protocol file is expected
('strabo check', configurations, 'strabo agent'), a file of that name in the
working directory wins over the bundled one.
"""


def resolve(name: str) -> str:
    """A path as given, or, if no such file exists, the bundled protocol ``name``."""
    if Path(name).exists():
        return name  # even a folder: the check says it cannot read it
    found = bundled.find(name)
    return str(found) if found is not None else name  # the check reports it as it is


def configure_check(parser: argparse.ArgumentParser) -> None:
    check_cli.configure(parser)


def run_check(args: argparse.Namespace) -> int:
    missing = [name for name in args.files if not Path(name).exists() and not bundled.find(name)]
    args.files = [resolve(name) for name in args.files]
    status = check_cli.run(args)
    for name in missing:  # after the check's own line: say what would have been found
        close = difflib.get_close_matches(name.removesuffix(".lsh"), bundled.names(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        print(f"strabo check: no file {name!r}, nor a bundled protocol of that name ({hint}"
              "'strabo protocols' lists them)", file=sys.stderr)
    return status


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="a bundled protocol to print")
    parser.add_argument(
        "--path", action="store_true", help="print the file's path instead of its text"
    )


def run(args: argparse.Namespace) -> int:
    if args.name is None:
        width = max(len(n) for n in bundled.names())
        for name in bundled.names():
            print(f"{name:<{width}}  {bundled.describe(name)}")
        return 0
    try:
        path = bundled.path(args.name)
    except KeyError as exc:
        print(f"strabo protocols: {exc.args[0]}", file=sys.stderr)
        return 2
    print(path if args.path else path.read_text(encoding="utf-8"), end="\n" if args.path else "")
    return 0
