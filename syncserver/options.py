"""What every ``strabo`` verb shares on its command line: exit statuses and the
checks of common option values.

A verb is run by people and by scripts; both need to tell a failed run from a
mistyped command without reading the text, and a person needs the mistake in
one line, at once, not a traceback after the server has started. So every
verb exits with one of four statuses, and option values are checked by argparse
before anything runs (``--port 70000`` is refused as usage, not discovered as
an ``OverflowError`` when binding).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys

__all__ = [
    "CLOSED_STDOUT", "DONE", "EXIT_STATUSES", "FAILED", "INTERRUPTED", "USAGE", "count",
    "port", "positive",
    "silence_stdout",
]

#: The work was done (a checkout completed, a file is valid, a server was stopped).
DONE = 0
#: The work failed (a protocol is invalid, a checkout did not complete, a peer is
#: unreachable).
FAILED = 1
#: Bad usage or configuration (an unknown option, a bad value, a port in use, a
#: configuration file with mistakes): nothing was done.
USAGE = 2
#: Interrupted (Ctrl-C), as shells report a process ended by SIGINT.
INTERRUPTED = 130
#: Stdout closed before all was written (``| head``), as shells report a
#: process SIGPIPE ended (128 + 13): under ``set -o pipefail`` a cut-short run
#: never reads as a success.
CLOSED_STDOUT = 141

EXIT_STATUSES = f"""\
exit status (every command):
  {DONE}    done
  {FAILED}    the work failed (an invalid protocol, a checkout that did not complete)
  {USAGE}    bad usage or configuration (an unknown option, a bad value, a port in use)
  {INTERRUPTED}  interrupted (Ctrl-C)
  {CLOSED_STDOUT}  stdout closed before all was written (strabo ... | head), unless
       the work had already failed (1)
An error a user can cause is one line on stderr; a traceback is a bug: please report it."""


def _parsed(text: str, kind: type[int] | type[float], name: str) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {name}") from None


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    value = int(_parsed(text, int, "a port number"))
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value}: a port is 0 (any free one) to 65535")
    return value


def positive(text: str) -> float:
    """An argparse type: a positive, finite number (seconds, a window)."""
    value = _parsed(text, float, "a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be a positive number")
    return value


def count(text: str) -> int:
    """An argparse type: a positive whole number (calls, rounds, bytes)."""
    value = int(_parsed(text, int, "a whole number"))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value}: must be a positive whole number")
    return value


def silence_stdout() -> None:
    """Point stdout at /dev/null: its reader went away (``| head``) or the run
    was interrupted, and the flush at exit must not fail again on a closed pipe
    (Python would print an error for it)."""
    with contextlib.suppress(BrokenPipeError, ValueError, OSError):
        sys.stdout.flush()
    with contextlib.suppress(ValueError, OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
