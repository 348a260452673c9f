"""The ``strabo`` command: one entry point, one subcommand per tool.

Each subcommand lives next to the code it drives (``langshaw._cli`` and so on) and
exposes ``configure(parser)`` and ``run(args) -> int``. Modules are imported when
the command line is built, so they keep heavy imports inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "check": ("langshaw._cli", "parse and validate Langshaw protocol files"),
    "syncserver": ("syncserver._cli", "run a SyncServer hosting multiagent systems"),
    "merchant": ("strabo.merchant._cli", "run the bundled UCP merchant"),
    "demo": ("samples.demo", "run a whole UCP checkout with embedded parts"),
    "agent": ("peach.llm._cli", "run an LLM agent that enacts Langshaw protocols"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strabo",
        description="Declarative interaction protocols and the agents that enact them.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module_name.startswith(exc.name):
                raise
            continue  # subcommand not built yet
        sub_parser = sub.add_parser(
            name,
            help=help_text,
            description=getattr(module, "DESCRIPTION", help_text),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.configure(sub_parser)
        sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
