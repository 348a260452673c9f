"""``strabo check``: parse and validate protocol files."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langshaw.model import LangshawProtocol

DESCRIPTION = """\
Parse and validate Langshaw protocol files.

For each valid file, print a summary: roles, keys, actions with their
performers, and the completion condition. For an invalid file, print every
error as path:line:col: message: syntax, undeclared names, and the attribute
types (an unknown type name, a schema file that cannot be read or is not a
valid JSON Schema, an attribute typed differently in two actions). Warnings
(actions that can never be enabled, for instance) are printed too but do not
fail the check.

With --verify, also explore every enactment of each valid protocol (one root
enactment; keys other than the root take at most --sub-keys values) and report,
each at its place in the file and with a shortest trace that reaches it:

  not live       a state from which the enactment can never complete
  unsafe         decentralized only: agents acting on what they have received
                 do what a shared state would refuse (both actions of a nono
                 group, an action after its nogo, one attribute bound twice)
  dead action    an action that no reachable state enables (warning)
  never holds    a completion clause that holds in no reachable state (warning)

--semantics chooses the model: 'shared' (a SyncServer, instant or batched
policy), 'decentralized' (peers exchanging messages), or 'both'. With --json,
print one JSON object per file instead (reports, diagnostics, traces).

Each verification (one per file and semantics) has two budgets: --max-states
(default 60000) and --max-seconds (default 60). Past either it stops, and the
file fails as 'not verified', the message naming the budget to raise. One
that runs longer than 2 s prints a progress line on stderr about once a second
(states explored, seconds taken) when stderr is a terminal, or with --progress
(a log, a CI job); stdout is never touched, and a quicker one prints nothing.

With --diagram FILE (one protocol), also write the protocol's diagram: roles
as lanes, actions with their parameters (key, done: a dependency, out: the
performer binds it, in: carried), dependencies as arrows, sub-scopes, nono and
nogo, and a legend. SVG, or Mermaid text with --format mermaid or a FILE ending
in .mmd. With --verify too, each counterexample is written next to it as a
sequence chart, FILE-counterexample-1.svg and so on, the breaking step marked.

Exit status: 0 when every file is valid (and, with --verify, live and safe),
1 otherwise, 2 when a diagram cannot be written or --format is unknown; 141
when stdout was closed before everything was written (| head), unless a file
had already failed (1).
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="protocol files (.lsh)")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print only problems, no summaries"
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="explore every enactment: liveness, safety, dead actions (see below)",
    )
    parser.add_argument(
        "--semantics",
        choices=["shared", "decentralized", "both"],
        default="both",
        help="which enactments --verify explores (default: both)",
    )
    parser.add_argument(
        "--sub-keys",
        type=_positive,
        default=2,
        metavar="N",
        help="values each non-root key may take in one enactment (default 2)",
    )
    parser.add_argument(
        "--no-collisions",
        dest="collisions",
        action="store_false",
        help="decentralized: a role uses a sub-key value only if it has received it or "
        "nobody used it yet (by default any value, as if two agents could generate "
        "the same one)",
    )
    parser.add_argument(
        "--shortest",
        action="store_true",
        help="wait for shortest traces however long that takes (by default the search "
        "for them may take as long as the exploration, then settles for short ones)",
    )
    parser.add_argument(
        "--max-states",
        type=_positive,
        default=60_000,
        metavar="N",
        help="give up (and say so) beyond this many states (default 60000, a few "
        "seconds; each state stands for every one that differs only in key values)",
    )
    parser.add_argument(
        "--max-seconds",
        type=_seconds,
        default=60.0,
        metavar="S",
        help="give up (and say so) after S seconds, exploring and tracing together "
        "(default 60; 'inf': no limit); the searches for shortest traces settle "
        "for short ones when it runs out after the exploration",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="print progress on stderr during a verification longer than 2 s, about "
        "once a second (the default when stderr is a terminal; never on stdout)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print JSON (one object per file) instead of text"
    )
    parser.add_argument(
        "--diagram",
        metavar="FILE",
        help="write the protocol's diagram to FILE (and, with --verify, each "
        "counterexample as FILE-counterexample-N): see below",
    )
    parser.add_argument(
        "--format",
        dest="diagram_format",
        metavar="FORMAT",
        help="the diagrams' format: svg or mermaid (default: mermaid for a FILE "
        "ending in .mmd, else svg)",
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return value if math.isfinite(value) else math.inf


class _Tally:
    """How many files failed so far: the verdict, should stdout close early."""

    def __init__(self) -> None:
        self.failed = 0


def run(args: argparse.Namespace) -> int:
    """Check ``args.files``. A closed stdout (``| head``) stops the check with
    BrokenPipeError, its ``status`` set to 1 when a file had already failed:
    the caller exits with that (a failure found is still the verdict), else
    with 141, as a command killed by SIGPIPE."""
    tally = _Tally()
    try:
        return _run(args, tally)
    except BrokenPipeError as closed:
        closed.status = 1 if tally.failed else None  # type: ignore[attr-defined]
        raise


def _run(args: argparse.Namespace, tally: _Tally) -> int:
    from langshaw.diagnostics import LangshawError
    from langshaw.model import diagnose, read_source

    if getattr(args, "semantics", "both") == "both":
        args.semantics = ["shared", "decentralized"]
    else:
        args.semantics = [args.semantics]
    as_json = getattr(args, "json", False)
    problem = _diagram_problem(args)
    if problem:
        print(f"strabo check: {problem}", file=sys.stderr)
        return 2
    documents = []
    for name in args.files:
        path = Path(name)
        document: dict[str, Any] = {"file": name, "valid": False, "diagnostics": []}
        documents.append(document)
        try:
            text = read_source(path, name)
        except LangshawError as exc:
            for diagnostic in exc.diagnostics:
                _emit(document, diagnostic, as_json)
            tally.failed += 1
            continue
        protocol, diagnostics = diagnose(text, name, base=path.parent)
        for diagnostic in diagnostics:
            _emit(document, diagnostic, as_json)
        if protocol is None:
            tally.failed += 1
            continue
        document["valid"] = True
        reports: list[Any] = []
        if not args.quiet and not as_json:
            print(protocol.describe())
        if getattr(args, "verify", False):
            from langshaw import _verify_cli

            reports, found = _verify_cli.check(name, text, protocol, args)
            document["reports"] = [r.to_json() for r in reports]
            failed = any(d.severity == "error" for d, _ in found)
            tally.failed += failed  # before its summary: a stdout closed there still says 1
            if not args.quiet and not as_json:
                for report in reports:
                    print(_verify_cli.summary(report))
            for diagnostic, trace in found:
                _emit(document, diagnostic, as_json, _verify_cli.trace_lines(trace))
            if failed:
                document["valid"] = False
        if getattr(args, "diagram", None):
            problem = _write_diagrams(args, protocol, reports, document)
            if problem:
                print(f"strabo check: {problem}", file=sys.stderr)
                return 2
            if not args.quiet and not as_json:
                for written in [document["diagram"], *document.get("counterexamples", [])]:
                    print(f"  diagram: {written}")
        if not args.quiet and not as_json:
            print()
    if as_json:
        print(json.dumps(documents, indent=2, default=str))
    total = len(args.files)
    what = "verified" if getattr(args, "verify", False) else "valid"
    if tally.failed:
        print(f"{tally.failed} of {total} file(s) {'invalid' if what == 'valid' else 'failed'}",
              file=sys.stderr)
        return 1
    if not args.quiet and not as_json:
        print(f"{total} file(s) {what}")
    return 0


def _diagram_problem(args: argparse.Namespace) -> str | None:
    """Why the diagram options cannot be followed (before any checking), if so."""
    from langshaw.diagrams import format_of

    diagram, fmt = getattr(args, "diagram", None), getattr(args, "diagram_format", None)
    if diagram is None:
        return "--format applies to --diagram only" if fmt is not None else None
    if len(args.files) != 1:
        return f"--diagram draws one protocol, not {len(args.files)}: give one FILE"
    if _same_file(diagram, args.files[0]):
        return f"--diagram {diagram!r} is the protocol file itself: it would be overwritten"
    try:
        args.diagram_format = format_of(diagram, fmt)
    except ValueError as exc:
        return str(exc)
    return None


def _same_file(one: str, other: str) -> bool:
    """Whether two names are one file (hard links and symlinks too)."""
    try:
        return Path(one).samefile(other)
    except OSError:  # either does not exist (yet): then they are not one file
        return False


def _write_diagrams(
    args: argparse.Namespace,
    protocol: LangshawProtocol,
    reports: list[Any],
    document: dict[str, Any],
) -> str | None:
    """Write the diagram (and the counterexamples of ``document``'s reports);
    the reason, in one line, if a file cannot be written."""
    from langshaw import diagrams

    fmt, path = args.diagram_format, Path(args.diagram)
    texts = {path: diagrams.protocol_diagram(protocol, fmt)}
    for n, chart in enumerate(diagrams.counterexamples(protocol, reports), 1):
        texts[diagrams.counterexample_path(path, n)] = diagrams.sequence_diagram(chart, fmt)
    for target, text in texts.items():
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return f"cannot write the diagram {str(target)!r}: {reason}"
    document["diagram"] = str(path)
    document["counterexamples"] = [str(t) for t in list(texts)[1:]]
    return None


def _emit(
    document: dict[str, Any], diagnostic: Any, as_json: bool, trace: list[str] | None = None
) -> None:
    if as_json:
        entry = {
            "file": diagnostic.source,
            "line": diagnostic.line,
            "column": diagnostic.column,
            "severity": diagnostic.severity,
            "code": diagnostic.code,
            "message": diagnostic.message,
        }
        document["diagnostics"].append(entry)
        return
    print(diagnostic, file=sys.stderr)
    for line in trace or ():
        print(line, file=sys.stderr)
