"""The ``strabo`` command: one entry point, one subcommand per tool.

Each subcommand lives next to the code it drives (``langshaw.cli`` and so on) and
exposes ``configure(parser)`` and ``run(args) -> int``. Only the module of the
subcommand given is imported (``strabo --help`` imports none): importing them
all cost about a second at every start, most of it the MCP SDK's.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, NoReturn

from syncserver.options import CLOSED_STDOUT, EXIT_STATUSES, INTERRUPTED, USAGE, silence_stdout

# name -> (module, one-line help, prefix of the module's configure/run/DESCRIPTION)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "check": (
        "strabo._protocols_cli",
        "parse and validate Langshaw protocol files (or bundled protocols by name)",
        "check",
    ),
    "protocols": ("strabo._protocols_cli", "list the bundled protocols, or print one", ""),
    "syncserver": ("syncserver.cli", "run a SyncServer hosting multiagent systems", ""),
    "merchant": ("strabo.merchant._cli", "run the bundled UCP merchant", ""),
    "demo": ("strabo.demo", "run a whole UCP checkout with embedded parts", ""),
    "inspect": ("strabo._inspect_cli", "list a SyncServer's agents, or inspect an agent", ""),
    "agent": ("peach.llm.cli", "run an LLM agent that enacts Langshaw protocols", ""),
    "simulate": (
        "strabo.simulate._cli",
        "run a multiagent simulation scenario (TOML) and write its report",
        "",
    ),
    "mcp": ("peach.mcp.cli", "serve one agent's role in a protocol as MCP tools", ""),
    "a2a": ("peach.a2a.cli", "serve one agent's role in a protocol as an A2A agent", ""),
}

STOPPING = """\
stopping a server (syncserver, merchant, mcp, a2a; mcp over stdio when its
  stdin is a pipe, as when a client starts it):
  SIGTERM (docker stop, systemd, kill) and Ctrl-C stop it gracefully: it stops
  taking requests, finishes those in flight (5 s at most), closes its stores,
  and exits 0 (SIGTERM: a stop asked for) or 130 (Ctrl-C: interrupted)."""


class _Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line, naming the verb's own help."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: {message} (see '{self.prog} --help')\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        # argparse swallows a failed write: ``strabo --help | head`` would exit 0.
        if message:
            (file or sys.stderr).write(message)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line; with ``argv``, only the subcommand it names is set up
    (its module imported), the others are only listed."""
    chosen = None
    if argv is not None:
        chosen = next((a for a in argv if not a.startswith("-")), "")
    parser = _Parser(
        prog="strabo",
        description="Declarative interaction protocols and the agents that enact them.",
        epilog=f"{EXIT_STATUSES}\n\n{STOPPING}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from strabo import __version__

    parser.add_argument("--version", action="version", version=f"strabo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text, prefix) in SUBCOMMANDS.items():
        if chosen is not None and name != chosen:
            sub.add_parser(name, help=help_text, description=help_text)
            continue
        module = importlib.import_module(module_name)
        affix = f"_{prefix}" if prefix else ""
        sub_parser = sub.add_parser(
            name,
            help=help_text,
            description=getattr(module, f"{prefix.upper()}_DESCRIPTION".lstrip("_"), help_text),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        getattr(module, f"configure{affix}")(sub_parser)
        sub_parser.set_defaults(_run=getattr(module, f"run{affix}"), _parser=sub_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one verb; its exit status follows syncserver.options (0 done, 1 failed,
    2 usage, 130 interrupted), and 141 when stdout was closed before all of the
    output was written, unless the verb had already decided on another status.

    Stdout is flushed here, not at the interpreter's exit: a pipe closed then
    would be "Exception ignored" on stderr and status 120."""
    try:
        status = _main(argv)
    except BrokenPipeError as closed:
        # The reader went away (``| head``): stop without a word, and say so in
        # the status, unless the verb had found what decides it (``status`` on
        # the exception: a check that had already failed, for one).
        silence_stdout()
        return getattr(closed, "status", None) or CLOSED_STDOUT
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        return status or CLOSED_STDOUT
    return status


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    try:  # argparse exits for --help, --version and usage errors: a status, here
        args, unknown = parser.parse_known_args(argv)
        if not getattr(args, "_run", None):
            if unknown:
                parser.error(f"unrecognized arguments: {' '.join(unknown)}")
            parser.print_help()
            return USAGE
        if unknown:  # the verb's usage, not the top level's
            args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as stopped:
        return stopped.code if isinstance(stopped.code, int) else USAGE
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(f"strabo {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
