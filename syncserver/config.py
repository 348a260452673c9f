"""The multiagent systems a SyncServer hosts, read from TOML and checked at start.

A bad configuration is refused before the server listens, with one message per
problem naming the file and the place in it (``mas.purchase.agents.buyer``).

```toml
[mas.purchase]
protocols = ["../protocols/purchase.lsh"]   # relative to this file, or a bundled
                                            # protocol's name: ["purchase"]

[mas.purchase.agents.buyer]
roles = ["Buyer"]                # or "Purchase:Buyer" when several protocols share a role name
token_env = "BUYER_TOKEN"        # or token = "..."
url = "http://127.0.0.1:8401"    # peer to peer only: where this agent listens
acts_for = { "RFQ.buyer" = "ann" } # optional: bindings it is held to (syncserver.acts_for)
```
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langshaw import LangshawError, LangshawProtocol
from syncserver.acts_for import ActsFor
from syncserver.limits import NAMES as LIMIT_NAMES
from syncserver.limits import Limits, limits_from

# How a SyncServer finalizes attempts (syncserver.ledger): each on arrival, or
# in windows of batch_window_ms. The one list every parser and check uses.
POLICIES = ("instant", "batched")


class ConfigError(Exception):
    """A configuration the server cannot start with; ``problems`` lists each one."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class AgentConfig:
    """An agent of a MAS: who it is, what it may do, how it proves it."""

    name: str
    token: str
    roles: Mapping[str, frozenset[str]]  # protocol name -> roles played
    url: str | None = None  # where it listens, when agents enact peer to peer
    acts_for: ActsFor = field(default_factory=ActsFor)  # bindings it is held to


@dataclass(frozen=True)
class MASConfig:
    """One multiagent system: its protocols and its agents."""

    name: str
    protocols: Mapping[str, LangshawProtocol]
    agents: Mapping[str, AgentConfig]
    tokens: Mapping[str, str] = field(default_factory=dict)  # token -> agent name

    def agent_for_token(self, token: str) -> AgentConfig | None:
        name = self.tokens.get(token)
        return self.agents[name] if name is not None else None


@dataclass(frozen=True)
class Config:
    mas: Mapping[str, MASConfig]
    policy: str | None = None
    batch_window_ms: float | None = None
    db: str | None = None
    limits: Limits = field(default_factory=Limits)


_MAS_FIELDS = {"protocols", "agents"}
_AGENT_FIELDS = {"roles", "token", "token_env", "url", "acts_for"}
_SERVER_FIELDS = {"policy", "batch_window_ms", "db", *LIMIT_NAMES}


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read and check a TOML configuration; raise ConfigError listing every problem."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: not valid TOML: {exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"]) from None
    return build_config(data, base=path.parent, source=str(path), environ=environ)


def build_config(
    data: Mapping[str, Any],
    *,
    base: Path = Path("."),
    source: str = "<config>",
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Check a configuration given as a dict (the parsed TOML)."""
    env = os.environ if environ is None else environ
    problems: list[str] = []

    def problem(where: str, message: str) -> None:
        problems.append(f"{source}: {where}: {message}" if where else f"{source}: {message}")

    for key in data:
        if key not in ("mas", "server"):
            problem(key, "unknown section (expected [mas.NAME] tables and an optional [server])")
    server = data.get("server", {})
    if not isinstance(server, Mapping):
        problem("server", "must be a table")
        server = {}
    for key in server:
        if key not in _SERVER_FIELDS:
            problem(
                f"server.{key}", f"unknown setting (known: {', '.join(sorted(_SERVER_FIELDS))})"
            )
    policy = server.get("policy")
    if policy is not None and policy not in POLICIES:
        problem("server.policy", f"must be 'instant' or 'batched', not {policy!r}")
    window = server.get("batch_window_ms")
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int | float) or window <= 0
    ):
        problem("server.batch_window_ms", f"must be a positive number, not {window!r}")
    limits = limits_from(server, problem)
    db = server.get("db")
    if db is not None and not isinstance(db, str):
        problem("server.db", "must be a path or a postgresql:// URL (a string)")
    elif isinstance(db, str) and db != ":memory:" and not db.startswith(
        ("postgresql://", "postgres://")
    ):
        db = str((base / db).resolve())  # a file; a PostgreSQL URL stays as it is

    systems = data.get("mas")
    if not isinstance(systems, Mapping) or not systems:
        problem("", "no multiagent system: add at least one [mas.NAME] table")
        systems = {}
    all_mas: dict[str, MASConfig] = {}
    for mas_name, mas in systems.items():
        where = f"mas.{mas_name}"
        if not isinstance(mas, Mapping):
            problem(where, "must be a table")
            continue
        for key in mas:
            if key not in _MAS_FIELDS:
                problem(f"{where}.{key}", "unknown field (known: agents, protocols)")
        protocols = _protocols(mas.get("protocols"), base, f"{where}.protocols", problem)
        agents = _agents(mas.get("agents"), protocols, where, env, problem)
        tokens: dict[str, str] = {}
        for agent in agents.values():
            if agent.token in tokens:
                problem(
                    f"{where}.agents.{agent.name}",
                    f"has the same token as agent '{tokens[agent.token]}': tokens must be unique",
                )
            tokens[agent.token] = agent.name
        all_mas[mas_name] = MASConfig(mas_name, protocols, agents, tokens)
    if problems:
        raise ConfigError(problems)
    return Config(mas=all_mas, policy=policy, batch_window_ms=window, db=db, limits=limits)


def _protocols(value: Any, base: Path, where: str, problem: Any) -> dict[str, LangshawProtocol]:
    # Items are file paths (from TOML) or, from Python, already loaded protocols.
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, str | LangshawProtocol) for v in value)
    ):
        problem(where, "must be a non-empty list of protocol file paths")
        return {}
    protocols: dict[str, LangshawProtocol] = {}
    for item in value:
        if isinstance(item, LangshawProtocol):
            protocol = item
        else:
            file = _protocol_file(base, item)
            try:
                protocol = LangshawProtocol.load(file)
            except LangshawError as exc:
                details = str(exc).replace("\n", "\n  ")
                problem(where, f"protocol {item!r} is invalid:\n  {details}")
                continue
        if protocol.name in protocols:
            problem(where, f"two protocols are named {protocol.name!r}")
            continue
        protocols[protocol.name] = protocol
    return protocols


def _protocol_file(base: Path, item: str) -> Path:
    """A path relative to the configuration, or the name of a bundled protocol
    (``"purchase"``) when no such file exists."""
    from syncserver.bundled import find

    found = find(item, base)
    return found if found is not None else base / item  # reported as unreadable


def _agents(
    value: Any,
    protocols: Mapping[str, LangshawProtocol],
    where: str,
    env: Mapping[str, str],
    problem: Any,
) -> dict[str, AgentConfig]:
    if not isinstance(value, Mapping) or not value:
        problem(f"{where}.agents", "no agent: add at least one [" + where + ".agents.NAME] table")
        return {}
    agents: dict[str, AgentConfig] = {}
    for name, spec in value.items():
        here = f"{where}.agents.{name}"
        if not isinstance(spec, Mapping):
            problem(here, "must be a table")
            continue
        for key in spec:
            if key not in _AGENT_FIELDS:
                problem(
                    f"{here}.{key}", "unknown field (known: roles, token, token_env, url, acts_for)"
                )
        token = _token(spec, here, env, problem)
        roles = _roles(spec.get("roles"), protocols, here, problem)
        url = spec.get("url")
        if url is not None and (
            not isinstance(url, str) or not url.startswith(("http://", "https://"))
        ):
            problem(f"{here}.url", f"must be an http:// or https:// URL, not {url!r}")
            url = None
        acts_for = ActsFor.parse(
            spec.get("acts_for"), protocols.values(), f"{here}.acts_for", problem, roles
        )
        if token is not None and roles is not None:
            agents[name] = AgentConfig(
                name=name, token=token, roles=roles, url=url, acts_for=acts_for
            )
    return agents


def _token(spec: Mapping[str, Any], here: str, env: Mapping[str, str], problem: Any) -> str | None:
    token, token_env = spec.get("token"), spec.get("token_env")
    if (token is None) == (token_env is None):
        problem(here, "give exactly one of token (the secret) or token_env (a variable holding it)")
        return None
    if token is not None:
        if not isinstance(token, str) or not token:
            problem(f"{here}.token", "must be a non-empty string")
            return None
        return token
    if not isinstance(token_env, str) or not token_env:
        problem(f"{here}.token_env", "must be the name of an environment variable")
        return None
    value = env.get(token_env)
    if not value:
        problem(f"{here}.token_env", f"environment variable {token_env} is not set (or empty)")
        return None
    return value


def _roles(
    value: Any, protocols: Mapping[str, LangshawProtocol], here: str, problem: Any
) -> dict[str, frozenset[str]] | None:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        problem(f"{here}.roles", "must be a non-empty list of role names")
        return None
    roles: dict[str, set[str]] = {}
    ok = True
    for item in value:
        if ":" in item:
            protocol_name, _, role = item.partition(":")
            protocol = protocols.get(protocol_name)
            if protocol is None:
                problem(f"{here}.roles", f"{item!r}: no protocol named {protocol_name!r} here")
                ok = False
            elif role not in protocol.roles:
                problem(
                    f"{here}.roles",
                    f"{item!r}: {protocol_name} has no role {role!r} "
                    f"(roles: {', '.join(protocol.roles)})",
                )
                ok = False
            else:
                roles.setdefault(protocol_name, set()).add(role)
            continue
        owners = [p.name for p in protocols.values() if item in p.roles]
        if not owners:
            known = sorted({r for p in protocols.values() for r in p.roles})
            problem(f"{here}.roles", f"no protocol has a role {item!r} (roles: {', '.join(known)})")
            ok = False
        elif len(owners) > 1:
            choices = ", ".join(f"'{o}:{item}'" for o in owners)
            problem(f"{here}.roles", f"{item!r} is a role of several protocols; write {choices}")
            ok = False
        else:
            roles.setdefault(owners[0], set()).add(item)
    return {p: frozenset(r) for p, r in roles.items()} if ok else None
