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
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from pydantic import create_model

from langshaw import LangshawError, LangshawProtocol
from syncserver.acts_for import ActsFor
from syncserver.limits import Limits
from syncserver.mandate import Mandate
from syncserver.settings import Problems, SettingsError, Table, must, read_toml

#: The name the dashboard's viewer token acts under (syncserver._dashboard).
VIEWER = "(viewer)"

# How a SyncServer finalizes attempts (syncserver.ledger): each on arrival, or
# in windows of batch_window_ms. The one list every parser and check uses.
Policy = Literal["instant", "batched"]
POLICIES: tuple[str, ...] = typing.get_args(Policy)


class ConfigError(SettingsError):
    """A configuration the server cannot start with; ``problems`` lists each one."""


@dataclass(frozen=True)
class AgentConfig:
    """An agent of a MAS: who it is, what it may do, how it proves it."""

    name: str
    token: str
    roles: Mapping[str, frozenset[str]]  # protocol name -> roles played
    url: str | None = None  # where it listens, when agents enact peer to peer
    acts_for: ActsFor = field(default_factory=ActsFor)  # bindings it is held to
    mandate: Mandate = field(default_factory=Mandate)  # its principal's bounds


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
    #: Serve the read-only dashboard at /ui (syncserver._dashboard).
    dashboard: bool = False
    #: A token that reads (GET) every MAS here and attempts nothing.
    viewer_token: str | None = None
    #: Answer ``POST .../attempts`` in the guarded protocol (syncserver._fastlane).
    fast_lane: bool = True


# The shape of the file, checked by pydantic; what the shape cannot say (roles,
# tokens, protocol files) is checked below, into the same list of problems.


class _File(Table):
    mas: dict[str, Any] | None = must("[mas.NAME] tables")
    server: dict[str, Any] | None = must("a table")


class _ServerBase(Table):
    policy: Policy | None = must("'instant' or 'batched'")
    batch_window_ms: float | None = must("a positive number", gt=0)
    db: str | None = must("a path or a postgresql:// URL (a string)")


def _limit(default: object) -> tuple[Any, Any]:
    if isinstance(default, int):
        return int | None, must("a positive whole number", gt=0)
    return float | None, must("a positive number of seconds", gt=0)


# The [server] table: the settings above, every field of Limits (same names),
# and the dashboard's (syncserver._dashboard: /ui, and its read-only token).
_DASHBOARD: dict[str, Any] = {
    "dashboard": (bool, must("true or false", False)),
    "viewer_token": (str | None, must("a non-empty string", min_length=1)),
    "viewer_token_env": (str | None, must("the name of an environment variable", min_length=1)),
}
_Server: type[_ServerBase] = create_model(  # type: ignore[call-overload]
    "_Server",
    __base__=_ServerBase,
    **{f.name: _limit(f.default) for f in fields(Limits)},
    **_DASHBOARD,
    # Answer attempts in the guarded protocol (syncserver._fastlane); false: in the app.
    fast_lane=(bool, must("true or false", True)),
)


class _MAS(Table):
    protocols: list[str | LangshawProtocol] = must(
        "a non-empty list of protocol file paths", ..., min_length=1
    )
    agents: dict[str, Any] | None = must("[AGENT] tables")


class _Agent(Table):
    roles: list[str] = must("a non-empty list of role names", ..., min_length=1)
    token: str | None = must("a non-empty string", min_length=1)
    token_env: str | None = must("the name of an environment variable", min_length=1)
    url: str | None = must("an http:// or https:// URL", pattern=r"^https?://")
    acts_for: Any = None  # checked against the protocols by ActsFor.parse
    mandate: Any = None  # checked against the protocols by Mandate.parse


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read and check a TOML configuration; raise ConfigError listing every problem."""
    path = Path(path)
    try:
        text, data = read_toml(path)
    except SettingsError as exc:
        raise ConfigError(exc.problems) from None
    return build_config(data, base=path.parent, source=str(path), environ=environ, text=text)


def build_config(
    data: Mapping[str, Any],
    *,
    base: Path = Path("."),
    source: str = "<config>",
    environ: Mapping[str, str] | None = None,
    text: str | None = None,
) -> Config:
    """Check a configuration given as a dict (the parsed TOML; with its ``text``,
    problems are reported at their lines)."""
    env = os.environ if environ is None else environ
    problems = Problems(source, text)
    top = problems.check(_File, data)
    server = problems.check(_Server, (top and top.server) or {}, ("server",))
    db = server.db if server else None
    if db is not None and db != ":memory:" and not db.startswith(("postgresql://", "postgres://")):
        db = str((base / db).resolve())  # a file; a PostgreSQL URL stays as it is
    limits = Limits(
        **{
            f.name: getattr(server, f.name)
            for f in fields(Limits)
            if server is not None and getattr(server, f.name) is not None
        }
    )

    systems = top.mas if top else None
    if top is not None and not systems and not data.get("mas"):
        problems.add("", "no multiagent system: add at least one [mas.NAME] table")
    all_mas: dict[str, MASConfig] = {}
    for mas_name, table in (systems or {}).items():
        where = ("mas", mas_name)
        mas = problems.check(_MAS, table, where)
        if mas is None:
            continue
        protocols = _protocols(mas.protocols, base, (*where, "protocols"), problems)
        if mas.agents is None and table.get("agents") is not None:
            continue  # not a table: reported
        agents = _agents(mas.agents, protocols, where, env, problems)
        tokens: dict[str, str] = {}
        for agent in agents.values():
            if agent.token in tokens:
                problems.add(
                    (*where, "agents", agent.name),
                    f"has the same token as agent '{tokens[agent.token]}': tokens must be unique",
                )
            tokens[agent.token] = agent.name
        all_mas[mas_name] = MASConfig(mas_name, protocols, agents, tokens)
    options = {k: getattr(server, k) for k in _DASHBOARD} if server is not None else {}
    viewer = _viewer_token(options, all_mas, env, problems) if server is not None else None
    if problems:
        raise ConfigError(problems.messages)
    assert server is not None
    return Config(
        mas=all_mas,
        policy=server.policy,
        batch_window_ms=server.batch_window_ms,
        db=db,
        limits=limits,
        dashboard=bool(options["dashboard"]),
        viewer_token=viewer,
        fast_lane=bool(getattr(server, "fast_lane", True)),
    )


def _viewer_token(
    options: Mapping[str, Any], systems: Mapping[str, MASConfig], env: Mapping[str, str],
    problems: Problems,
) -> str | None:
    """The dashboard's read-only token (``viewer_token`` or ``viewer_token_env``),
    which must not be an agent's: a token names one caller."""
    where = ("server", "viewer_token")
    token: str | None = options["viewer_token"]
    variable: str | None = options["viewer_token_env"]
    if token is not None and variable is not None:
        problems.add(where, "give at most one of viewer_token and viewer_token_env")
        return None
    if variable is not None:
        token = env.get(variable)
        if not token:
            problems.add(
                ("server", "viewer_token_env"),
                f"environment variable {variable} is not set (or empty)",
            )
            return None
    if token is not None and any(token in system.tokens for system in systems.values()):
        problems.add(where, "is an agent's token: the viewer needs a token of its own")
        return None
    return token


Where = tuple[str, ...]


def _protocols(
    items: list[str | LangshawProtocol], base: Path, where: Where, problems: Problems
) -> dict[str, LangshawProtocol]:
    # Items are file paths (from TOML) or, from Python, already loaded protocols.
    protocols: dict[str, LangshawProtocol] = {}
    for item in items:
        if isinstance(item, LangshawProtocol):
            protocol = item
        else:
            file = _protocol_file(base, item)
            try:
                protocol = LangshawProtocol.load(file)
            except LangshawError as exc:
                details = str(exc).replace("\n", "\n  ")
                problems.add(where, f"protocol {item!r} is invalid:\n  {details}")
                continue
        if protocol.name in protocols:
            problems.add(where, f"two protocols are named {protocol.name!r}")
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
    tables: Mapping[str, Any] | None,
    protocols: Mapping[str, LangshawProtocol],
    where: Where,
    env: Mapping[str, str],
    problems: Problems,
) -> dict[str, AgentConfig]:
    if not tables:
        problems.add(
            (*where, "agents"),
            f"no agent: add at least one [{'.'.join(where)}.agents.NAME] table",
        )
        return {}
    agents: dict[str, AgentConfig] = {}
    for name, table in tables.items():
        here = (*where, "agents", name)
        spec = problems.check(_Agent, table, here)
        if spec is None:
            continue
        if name == VIEWER:  # the dashboard's reader: its streams and presence are its own
            problems.add(here, f"{name!r} is the name of the dashboard's viewer: choose another")
            continue
        token = _token(spec, here, env, problems)
        roles = _roles(spec.roles, protocols, here, problems)
        acts_for = ActsFor.parse(
            spec.acts_for,
            protocols.values(),
            ".".join((*here, "acts_for")),
            problems.add,
            roles,
        )
        mandate = Mandate.parse(
            spec.mandate,
            [p for p in protocols.values() if p.name in (roles or {})],
            (*here, "mandate"),
            problems.add,
            roles,
        )
        if token is not None and roles is not None:
            agents[name] = AgentConfig(
                name=name, token=token, roles=roles, url=spec.url, acts_for=acts_for,
                mandate=mandate,
            )
    return agents


def _token(spec: _Agent, here: Where, env: Mapping[str, str], problems: Problems) -> str | None:
    if (spec.token is None) == (spec.token_env is None):
        problems.add(
            here, "give exactly one of token (the secret) or token_env (a variable holding it)"
        )
        return None
    if spec.token is not None:
        return spec.token
    assert spec.token_env is not None
    value = env.get(spec.token_env)
    if not value:
        problems.add(
            (*here, "token_env"),
            f"environment variable {spec.token_env} is not set (or empty)",
        )
        return None
    return value


def _roles(
    value: list[str], protocols: Mapping[str, LangshawProtocol], here: Where, problems: Problems
) -> dict[str, frozenset[str]] | None:
    roles: dict[str, set[str]] = {}
    ok = True
    where = (*here, "roles")
    for item in value:
        if ":" in item:
            protocol_name, _, role = item.partition(":")
            protocol = protocols.get(protocol_name)
            if protocol is None:
                problems.add(where, f"{item!r}: no protocol named {protocol_name!r} here")
                ok = False
            elif role not in protocol.roles:
                problems.add(
                    where,
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
            problems.add(where, f"no protocol has a role {item!r} (roles: {', '.join(known)})")
            ok = False
        elif len(owners) > 1:
            choices = ", ".join(f"'{o}:{item}'" for o in owners)
            problems.add(where, f"{item!r} is a role of several protocols; write {choices}")
            ok = False
        else:
            roles.setdefault(owners[0], set()).add(item)
    return {p: frozenset(r) for p, r in roles.items()} if ok else None
