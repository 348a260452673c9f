"""``strabo inspect URL``: who takes part on a SyncServer, or what one agent is doing."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from syncserver.options import positive

DESCRIPTION = """\
Print what a running multiagent system is made of, from one of two places:

  a SyncServer   every agent of a MAS, the roles it plays, whether it is
                 connected (holds an event stream) and when it last attempted;
                 needs the token of any agent of that MAS (--token, or the
                 STRABO_TOKEN variable) and --mas when it is not 'default'
  an agent       the URL of its inspection endpoint (peach.inspection; an LLM
                 agent serves one with 'strabo agent --inspect-port'): each role
                 it plays with its goal, responsibilities, must-never and
                 must-always constraints (and whether they hold), the actions
                 enabled now, decisions pending, the state it exposes, its
                 handlers and hooks, and its counters

Which one URL is, is found out by asking it. --json prints the answer as it came.

Examples:
  strabo inspect http://127.0.0.1:8000 --token buyer-secret --mas purchase
  strabo inspect http://127.0.0.1:8500/inspect

Exit status: 0 when it printed, 1 when URL could not be read (or the output
was closed before all of it was printed, as by '| head -1'), 2 for a usage error.
"""

AGENT_KIND = "strabo.agent"
#: The largest answer read (an agent's inspection is bounded far below this).
MAX_ANSWER = 8 * 1024 * 1024


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="a SyncServer, or an agent's /inspect")
    parser.add_argument("--token", help="an agent's token on the SyncServer (or STRABO_TOKEN)")
    parser.add_argument("--mas", default="default", help="the MAS to list (default: default)")
    parser.add_argument("--json", action="store_true", help="print the JSON answer as it came")
    parser.add_argument(
        "--timeout", type=positive, default=10.0,
        help="seconds to wait for the whole answer (default 10)",
    )


class _Failure(Exception):
    pass


class _Answer:
    """One response, read whole within the deadline and MAX_ANSWER bytes."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body
        try:
            self.data: Any = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested absurdly
            self.data = None

    @property
    def text(self) -> str:
        return self.body[:200].decode("utf-8", "replace")


def run(args: argparse.Namespace) -> int:
    import httpx

    url = args.url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        print(f"strabo inspect: {args.url!r} is not an http:// or https:// URL", file=sys.stderr)
        return 2
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= 3600):
        print(f"strabo inspect: --timeout {args.timeout}: give seconds, more than 0 and at "
              "most 3600", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.timeout
    try:
        with httpx.Client(timeout=args.timeout) as client:
            kind, data = _identify(_Reader(client, deadline, args.timeout), url, args)
        if args.json:
            return _emit(json.dumps(data, indent=2))
        lines = agent_lines(data) if kind == "agent" else server_lines(url, data)
    except _Failure as exc:
        print(f"strabo inspect: {_clean(str(exc))}", file=sys.stderr)
        return 1
    except httpx.InvalidURL as exc:
        print(f"strabo inspect: not a valid URL ({exc}): check URL and --mas", file=sys.stderr)
        return 2
    except httpx.HTTPError as exc:
        print(f"strabo inspect: cannot read {url}: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:
        # JSON of the right kind with fields of the wrong types: not ours to print.
        print(
            f"strabo inspect: {url} answered JSON of an unexpected shape "
            f"({type(exc).__name__}: {_clean(str(exc))[:200]}); --json prints it as it came",
            file=sys.stderr,
        )
        return 1
    return _emit("\n".join(_clean(line) for line in lines))


def _emit(text: str) -> int:
    """Print ``text``. A reader that stops early (``| head -1``) raises
    BrokenPipeError here, which ``strabo.cli.main`` turns into a quiet exit
    with status 141, as for every verb."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return 0


class _Reader:
    """GETs that share one deadline, each answer bounded in size."""

    def __init__(self, client: Any, deadline: float, timeout: float) -> None:
        self.client = client
        self.deadline = deadline
        self.timeout = timeout

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> _Answer:
        """The deadline runs out either between two chunks (checked here) or inside
        one wait (httpx's timeout, which is what is left of it): one failure, the
        same message, whichever comes first on a slow or busy machine."""
        import httpx

        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._late(url)
        try:
            with self.client.stream("GET", url, headers=headers, timeout=left) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER:
                        raise _Failure(f"{url} answered more than {MAX_ANSWER} bytes; not read")
                    if time.monotonic() > self.deadline:
                        raise self._late(url)
                return _Answer(response.status_code, bytes(body))
        except httpx.TimeoutException:
            raise self._late(url) from None

    def _late(self, url: str) -> _Failure:
        return _Failure(f"{url} did not answer in full within {self.timeout:g} s (--timeout)")


def _identify(reader: _Reader, url: str, args: argparse.Namespace) -> tuple[str, Any]:
    problem = ""
    for candidate in (url, url + "/inspect"):
        answer = reader.get(candidate)
        data = answer.data
        if isinstance(data, Mapping) and data.get("kind") == AGENT_KIND:
            return "agent", data
        message = _error_message(data)
        if answer.status >= 500 and message:  # an agent whose inspection failed, say
            problem = f" ({candidate} answered {answer.status}: {message})"
    health = reader.get(url + "/health").data
    if not (isinstance(health, Mapping) and "policy" in health):
        raise _Failure(
            f"{url} is neither a SyncServer (no /health with a policy) nor an agent's "
            f"inspection endpoint (no JSON of kind strabo.agent at it or at /inspect){problem}"
        )
    token = args.token or os.environ.get("STRABO_TOKEN")
    if not token:
        other = " (or --mas NAME for another MAS)" if args.mas == "default" else ""
        raise _Failure(
            f"{url} is a SyncServer: give the token of an agent of MAS {args.mas!r} "
            f"(--token or STRABO_TOKEN) to list its agents{other}"
        )
    answer = reader.get(
        f"{url}/mas/{quote(args.mas, safe='')}/agents",
        headers={"Authorization": f"Bearer {token}"},
    )
    if answer.status != 200:
        message = _error_message(answer.data)
        hint = ""
        if answer.status == 404 and "multiagent system" in (message or ""):
            hint = (" (give the MAS your agent belongs to with --mas NAME: a [mas.NAME] "
                    "table of the server's configuration)")
        raise _Failure(
            f"the SyncServer answered {answer.status}: {message or answer.text}{hint}"
        )
    if not isinstance(answer.data, Mapping):
        raise _Failure(f"the SyncServer answered {answer.status} without a JSON object: "
                       f"{answer.text!r}")
    return "server", answer.data


def _error_message(data: Any) -> str | None:
    error = data.get("error") if isinstance(data, Mapping) else None
    message = error.get("message") if isinstance(error, Mapping) else None
    return str(message)[:500] if message is not None else None


def _clean(text: str) -> str:
    """Text safe to print on a terminal: control characters (escape sequences
    a hostile server could send) are shown escaped, not obeyed."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def server_lines(url: str, data: Mapping[str, Any]) -> list[str]:
    agents = data.get("agents", [])
    connected = sum(1 for a in agents if a.get("connected"))
    lines = [
        f"SyncServer {url}, MAS {data.get('mas')}: {len(agents)} agents, {connected} connected"
    ]
    rows = [("AGENT", "ROLES", "CONNECTED", "STREAMS", "LAST ATTEMPT")]
    for agent in agents:
        roles = "; ".join(f"{p}: {', '.join(r)}" for p, r in agent.get("roles", {}).items())
        streams = ", ".join(f"{p} x{n}" for p, n in agent.get("streams", {}).items()) or "-"
        since = agent.get("connected_since")
        rows.append(
            (
                agent.get("name", "?"),
                roles,
                f"since {since}" if agent.get("connected") else "no",
                streams,
                agent.get("last_attempt") or "-",
            )
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (str(c).ljust(w) for c, w in zip(row, widths, strict=True))
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def agent_lines(data: Mapping[str, Any]) -> list[str]:
    lines = [f"agent {data.get('agent')}"]
    for key, value in data.items():
        if key not in {"kind", "agent", "roles"}:
            lines.append(f"  {key}: {_field(value)}")
    for role in data.get("roles", []):
        lines.extend(_role_lines(role))
    return lines


def _role_lines(role: Mapping[str, Any]) -> list[str]:
    state = "running" if role.get("running") else "stopped"
    where = f"{role.get('protocol')} (MAS {role.get('mas')})"
    lines = [f"  role {role.get('role')} in {where}, {state}"]
    spec = role.get("spec")
    if spec:
        if spec.get("goal"):
            lines.append(f"    goal: {spec['goal']}")
        if spec.get("domain"):
            lines.append(f"    domain: {spec['domain']}")
        for duty in spec.get("responsibilities", []):
            actions = ", ".join(duty.get("actions", [])) or "no actions named"
            about = f": {duty['description']}" if duty.get("description") else ""
            lines.append(f"    responsibility {duty.get('name')}{about} ({actions})")
            for rule in duty.get("must_never", []):
                lines.append(f"      must never  {rule['name']}: {rule['description']}")
            for rule in duty.get("must_always", []):
                holds = rule.get("holds")
                mark = "" if holds is None else (" [holds]" if holds is True else " [BREACHED]")
                if isinstance(holds, str):
                    mark = f" [{holds}]"
                lines.append(f"      must always {rule['name']}: {rule['description']}{mark}")
        actions = spec.get("actions", {})
        if actions:
            listed = ", ".join(
                f"{name} ({a['kind']}{', coded' if a.get('coded') else ''})"
                for name, a in actions.items()
            )
            lines.append(f"    actions: {listed}")
    enabled = role.get("enabled", {})
    shown = [
        f"{e['action']} ({_keys(e['enactment']) if e.get('enactment') else 'new enactment'})"
        for e in enabled.get("actions", [])
    ]
    more = enabled.get("count", 0) - len(shown)
    enactments = role.get("enactments", {})
    scanned = enabled.get("scanned")
    where_found = (
        f" in the latest {scanned} of {enactments.get('count')} enactments" if scanned else ""
    )
    lines.append(
        f"    enabled now ({enabled.get('count', 0)}{where_found}): {', '.join(shown) or '-'}"
        + (f", and {more} more" if more > 0 else "")
    )
    lines.append(
        f"    enactments: {enactments.get('count', 0)}, {enactments.get('complete', 0)} complete"
    )
    pending = role.get("pending", [])
    unlisted = role.get("pending_count", len(pending)) - len(pending)
    lines.append(
        f"    pending: {', '.join(pending) or '-'}"
        + (f", and {unlisted} more" if unlisted > 0 else "")
    )
    if role.get("state"):
        lines.append(f"    state: {_short(role['state'])}")
    handlers = role.get("handlers", {})
    for kind in ("observation", "on_enabled"):
        for action, names in handlers.get(kind, {}).items():
            lines.append(f"    {kind} {action}: {', '.join(names)}")
    if handlers.get("on_completion"):
        lines.append(f"    on_completion: {', '.join(handlers['on_completion'])}")
    counters = role.get("counters", {})
    lines.append(f"    counters: {', '.join(f'{k} {v}' for k, v in counters.items()) or '-'}")
    for breach in role.get("breaches", []):
        lines.append(f"    breach: {breach['constraint']} after batch {breach['after_batch']}")
    return lines


def _keys(keys: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in keys.items())


def _field(value: Any) -> str:
    """One field an agent adds (an LLM agent's counters, tools, goal), shown
    like the roles' fields: a flat table as ``name value, ...``, a list of
    plain values comma-separated, anything deeper as JSON."""
    plain = (str, int, float, bool, type(None))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping) and all(isinstance(v, plain) for v in value.values()):
        return _short(", ".join(f"{k} {_field(v)}" for k, v in value.items()) or "-")
    if isinstance(value, list) and all(isinstance(v, plain) for v in value):
        return _short(", ".join(_field(v) for v in value) or "-")
    if isinstance(value, plain):
        return _short(str(value) if value is not None else "-")
    return _short(value)


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
