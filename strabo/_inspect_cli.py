"""``strabo inspect URL``: who takes part on a SyncServer, or what one agent is doing."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

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

Exit status: 0 when it printed, 1 when URL could not be read, 2 for a usage error.
"""

AGENT_KIND = "strabo.agent"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="a SyncServer, or an agent's /inspect")
    parser.add_argument("--token", help="an agent's token on the SyncServer (or STRABO_TOKEN)")
    parser.add_argument("--mas", default="default", help="the MAS to list (default: default)")
    parser.add_argument("--json", action="store_true", help="print the JSON answer as it came")
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for an answer (default 10)"
    )


class _Failure(Exception):
    pass


def run(args: argparse.Namespace) -> int:
    import httpx

    url = args.url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        print(f"strabo inspect: {args.url!r} is not an http:// or https:// URL", file=sys.stderr)
        return 2
    try:
        with httpx.Client(timeout=args.timeout) as client:
            kind, data = _identify(client, url, args)
    except _Failure as exc:
        print(f"strabo inspect: {exc}", file=sys.stderr)
        return 1
    except httpx.HTTPError as exc:
        print(f"strabo inspect: cannot read {url}: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2))
    elif kind == "agent":
        print("\n".join(agent_lines(data)))
    else:
        print("\n".join(server_lines(url, data)))
    return 0


def _identify(client: Any, url: str, args: argparse.Namespace) -> tuple[str, Any]:
    for candidate in (url, url + "/inspect"):
        data = _json(client.get(candidate))
        if isinstance(data, Mapping) and data.get("kind") == AGENT_KIND:
            return "agent", data
    health = _json(client.get(url + "/health"))
    if not (isinstance(health, Mapping) and "policy" in health):
        raise _Failure(
            f"{url} is neither a SyncServer (no /health with a policy) nor an agent's "
            "inspection endpoint (no JSON of kind strabo.agent at it or at /inspect)"
        )
    token = args.token or os.environ.get("STRABO_TOKEN")
    if not token:
        raise _Failure(
            f"{url} is a SyncServer: give the token of an agent of MAS {args.mas!r} "
            "(--token or STRABO_TOKEN) to list its agents"
        )
    response = client.get(
        f"{url}/mas/{quote(args.mas, safe='')}/agents",
        headers={"Authorization": f"Bearer {token}"},
    )
    data = _json(response)
    if response.status_code != 200:
        message = data.get("error", {}).get("message") if isinstance(data, Mapping) else None
        raise _Failure(
            f"the SyncServer answered {response.status_code}: {message or response.text[:200]}"
        )
    return "server", data


def _json(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


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
            lines.append(f"  {key}: {_short(value)}")
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
    lines.append(
        f"    enabled now ({enabled.get('count', 0)}): {', '.join(shown) or '-'}"
        + (f", and {more} more" if more > 0 else "")
    )
    enactments = role.get("enactments", {})
    lines.append(
        f"    enactments: {enactments.get('count', 0)}, {enactments.get('complete', 0)} complete"
    )
    lines.append(f"    pending: {', '.join(role.get('pending', [])) or '-'}")
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


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
