"""``strabo check --verify``: run the verifier and say what it found, each fault
at the place in the file it concerns (``path:line:col``), with its trace."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

from langshaw.diagnostics import Diagnostic, Severity
from langshaw.model import LangshawProtocol
from langshaw.verify import MAX_SECONDS, Progress, Report, Step, verify

_SECTIONS = ("who", "what", "do", "sayso", "nono", "nogo")


class Locator:
    """Finds where in the text a name or a declaration is."""

    def __init__(self, path: str, text: str, protocol: LangshawProtocol) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.protocol = protocol

    def at(self, line: int, *names: str) -> tuple[int, int]:
        """``line`` (1-based) and the column of the first of ``names`` on it."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        for name in names:
            found = re.search(rf"\b{re.escape(name)}\b", text)
            if found:
                return line, found.start() + 1
        return line, len(text) - len(text.lstrip()) + 1

    def action(self, name: str) -> tuple[int, int]:
        return self.at(self.protocol.actions[name].line or 1, name)

    def section(self, header: str, *names: str) -> tuple[int, int]:
        """The line of section ``header`` naming all of ``names`` (else the header)."""
        start = None
        for i, text in enumerate(self.lines, 1):
            word = text.split("#", 1)[0].strip().split(" ", 1)[0]
            if start is not None and word in _SECTIONS:
                break
            if word == header:
                start = i
            if start is not None and all(re.search(rf"\b{re.escape(n)}\b", text) for n in names):
                return self.at(i, *names)
        return self.at(start or 1, header)

    def diagnostic(
        self, where: tuple[int, int], message: str, severity: Severity
    ) -> Diagnostic:
        return Diagnostic(self.path, where[0], where[1], message, severity, "verify")


def findings(report: Report, where: Locator) -> list[tuple[Diagnostic, list[Step]]]:
    """The report's faults as located diagnostics, each with its trace."""
    found: list[tuple[Diagnostic, list[Step]]] = []
    label = f"{report.semantics}: "
    if not report.complete:
        if report.ran_out == "max_seconds":
            why = (
                f"not verified: out of time after {report.max_seconds:g} s, {report.states} "
                "states explored (raise --max-seconds, or lower --sub-keys)"
            )
        else:
            why = (
                f"not verified: more than {report.states} states "
                "(raise --max-states, or lower --sub-keys)"
            )
        found.append(
            (where.diagnostic(where.at(1, report.protocol), label + why, "error"), [])
        )
        return found
    if not report.live:
        clause = " and ".join(" or ".join(c) for c in where.protocol.completion)
        found.append(
            (
                where.diagnostic(
                    where.section("what", *where.protocol.completion[0]),
                    label
                    + (
                        "not live: after this trace the enactment can never complete"
                        if report.stuck
                        else "not live: no enactment can ever complete"
                    )
                    + f" ({clause})",
                    "error",
                ),
                report.stuck,
            )
        )
    for conflict in report.conflicts:
        if conflict.rule in ("nono", "nogo"):
            at = where.section(conflict.rule, *conflict.actions)
        elif conflict.attribute is not None:
            at = where.section("sayso", conflict.attribute)
        else:
            at = where.action(conflict.actions[0])
        found.append(
            (
                where.diagnostic(
                    at, label + f"unsafe ({conflict.rule}): {conflict.message}", "error"
                ),
                list(conflict.trace),
            )
        )
    for name, why in (report.dead or {}).items():
        found.append(
            (
                where.diagnostic(
                    where.action(name), label + f"dead action '{name}': {why}", "warning"
                ),
                [],
            )
        )
    for never in report.never_hold or []:
        found.append(
            (
                where.diagnostic(
                    where.section("what", *never),
                    label + f"completion clause '{' or '.join(never)}' holds in no reachable state",
                    "warning",
                ),
                [],
            )
        )
    return found


def summary(report: Report) -> str:
    bound = f"sub-keys {report.sub_keys}" + (", reached" if report.bound_reached else "")
    line = (
        f"  {report.semantics}: {report.verdict} ({report.states} states, "
        f"{report.transitions} transitions, {bound}, {report.seconds:.3f} s)"
    )
    if not report.shortest:
        line += (
            "\n    (traces below are short, not known to be shortest: the search for "
            "shortest ones ran out of time; --shortest waits for them)"
        )
    return line


def check(
    path: str, text: str, protocol: LangshawProtocol, args: Any
) -> tuple[list[Report], list[tuple[Diagnostic, list[Step]]]]:
    where = Locator(path, text, protocol)
    reports: list[Report] = []
    found: list[tuple[Diagnostic, list[Step]]] = []
    scopes = scope_count(protocol, args.sub_keys, args.max_states)
    if scopes > args.max_states:
        # The verifier builds a table of every scope before its first state,
        # and each state costs time in proportion to it: a huge --sub-keys
        # would run for ever without a word, --max-states notwithstanding.
        message = (
            f"not verified: --sub-keys {args.sub_keys} gives more than {args.max_states} "
            "action scopes (more than --max-states; lower --sub-keys)"
        )
        found.append((where.diagnostic(where.at(1, protocol.name), message, "error"), []))
        return reports, found
    max_seconds = getattr(args, "max_seconds", MAX_SECONDS)
    for semantics in args.semantics:
        report = verify(
            protocol,
            semantics=semantics,
            sub_keys=args.sub_keys,
            max_states=args.max_states,
            max_seconds=max_seconds,
            collisions=getattr(args, "collisions", True),
            shortest=getattr(args, "shortest", False),
            progress=_progress(path, semantics, args) if wants_progress(args) else None,
        )
        reports.append(report)
        found.extend(findings(report, where))
    return reports, found


def wants_progress(args: Any) -> bool:
    """``--progress``, or stderr a terminal: someone may be watching."""
    if getattr(args, "progress", False):
        return True
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        return False


def _progress(path: str, semantics: str, args: Any) -> Callable[[Progress], None]:
    """Progress lines on stderr, naming the file, the semantics and the budgets."""
    seconds = getattr(args, "max_seconds", MAX_SECONDS)
    limits = f"{args.max_states} states" + (
        f" or {seconds:g} s" if seconds is not None and seconds != float("inf") else ""
    )

    def say(progress: Progress) -> None:
        gives_up = "" if progress.tracing else f" (gives up at {limits})"
        print(f"{path}: {semantics}: {progress}{gives_up}", file=sys.stderr, flush=True)

    return say


def scope_count(protocol: LangshawProtocol, sub_keys: int, limit: int) -> int:
    """How many (action, key values) scopes ``sub_keys`` values per non-root key
    give, counted only up to just past ``limit`` (``sub_keys`` may be huge)."""
    root, total = set(protocol.root_keys), 0
    for action in protocol.actions.values():
        scopes = 1
        for key in action.keys:
            if key not in root:
                scopes = min(scopes * sub_keys, limit + 1)
        total = min(total + scopes, limit + 1)
    return total


def trace_lines(trace: list[Step]) -> list[str]:
    return [f"    {i}. {step}" for i, step in enumerate(trace, 1)]
