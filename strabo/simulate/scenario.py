"""Scenario files: what ``strabo simulate`` runs, read from TOML and checked.

A scenario names a Langshaw protocol, the agents that play its roles (coded
policies or LLM agents), how rounds are counted and when to stop, and what the
report holds. Every problem in a file is reported at once, each as
``file:line: key.path: message`` (docs/patterns.md has the format), so a
mistyped role or a policy that does not import is found before anything runs.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langshaw import LangshawError, LangshawProtocol
from strabo.simulate.move import Policy
from syncserver.acts_for import ActsFor
from syncserver.config import Policy as ServerPolicy
from syncserver.settings import Problems, SettingsError, Table, must, parse_toml

__all__ = [
    "AgentSpec",
    "ChartSpec",
    "ReportSpec",
    "RoundSpec",
    "Scenario",
    "ScenarioError",
    "bundled_scenario",
    "load_scenario",
    "parse_scenario",
]

KINDS = ("coded", "llm")
#: Agents a scenario may run at most, all counts together: each has its own
#: replica of the social state and applies every batch, so a run costs about
#: agents x actions x the enactment's size (200 posting in one round take some
#: 20 s); a population beyond this is refused, not attempted.
MAX_AGENTS = 200
#: The largest scenario file read, and the most problems listed.
MAX_BYTES = 1024 * 1024
MAX_PROBLEMS = 50
#: Seconds one policy call may take by default ([stop] policy_timeout).
POLICY_TIMEOUT = 10.0


class ScenarioError(SettingsError):
    """A scenario that cannot run; ``problems`` lists each, located."""


@dataclass(frozen=True)
class AgentSpec:
    """``[agents.NAME]``: one agent, or ``count`` alike (``NAME-1`` ... ``NAME-n``)."""

    name: str
    role: str
    kind: str = "coded"
    count: int = 1
    policy: str | None = None  # "module:callable", for kind "coded"
    params: Mapping[str, Any] = field(default_factory=dict)
    persona: str | None = None  # kind "llm": who the agent is
    goal: str | None = None  # kind "llm": what it wants, in plain words
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    max_calls: int | None = None
    # Attributes ("seller", "Take.queue") each agent may bind only to its own
    # name: the server refuses, and the adapter does not offer, anything else.
    acts_for: tuple[str, ...] = ()
    base: Path = Path(".")  # the scenario's folder: policy modules may sit there

    def names(self) -> list[str]:
        """The agent names this entry stands for."""
        if self.count == 1:
            return [self.name]
        return [f"{self.name}-{i}" for i in range(1, self.count + 1)]

    def resolve(self) -> Policy:
        """The policy callable (kind "coded")."""
        found = _import_policy(self.policy or "", self.base)
        if isinstance(found, str):
            raise ValueError(found)
        return found


@dataclass(frozen=True)
class RoundSpec:
    """``[rounds]``: which key numbers the rounds, which action ends one, and
    the round limit (the run stops if a round beyond it opens; coordinators
    are told it and close the enactment after it)."""

    key: str
    end: str | None = None
    limit: int | None = None


@dataclass(frozen=True)
class ChartSpec:
    """``[report.chart]``: a line per ``series`` value, ``y`` against ``x``; one
    panel per ``y`` column."""

    x: str
    y: tuple[str, ...]
    series: str | None = None
    title: str | None = None


@dataclass(frozen=True)
class ReportSpec:
    """``[report]``: one table row per instance of ``rows``, with ``columns``."""

    rows: str | None = None
    columns: tuple[str, ...] = ()
    chart: ChartSpec | None = None
    output: str | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    protocol: LangshawProtocol
    protocol_path: Path
    agents: tuple[AgentSpec, ...]
    description: str = ""
    path: Path | None = None
    rounds: RoundSpec | None = None
    max_actions: int | None = None
    timeout: float = 300.0
    policy_timeout: float = POLICY_TIMEOUT
    policy: str = "instant"
    http: bool = False
    report: ReportSpec = field(default_factory=ReportSpec)

    def population(self) -> dict[str, list[str]]:
        """Each role, with the names of the agents that play it."""
        found: dict[str, list[str]] = {role: [] for role in self.protocol.roles}
        for spec in self.agents:
            found[spec.role].extend(spec.names())
        return found

    def default_output(self) -> Path:
        """Where the report goes when neither the scenario nor the caller says."""
        stem = self.path.stem if self.path else "scenario"
        return Path(self.report.output or f"{stem}-report")


def bundled_scenario(name: str) -> Path | None:
    """The scenario shipped with the pattern protocols (``market`` is
    ``protocols/patterns/market.toml``, installed with strabo), if any."""
    from syncserver.bundled import directory

    try:
        found = directory() / "patterns" / f"{name.removesuffix('.toml')}.toml"
    except FileNotFoundError:
        return None
    return found if found.is_file() else None


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario file; raise ScenarioError listing every problem."""
    path = Path(path)
    if path.is_file() and path.stat().st_size > MAX_BYTES:
        raise ScenarioError([f"{path}: {path.stat().st_size} bytes; a scenario is at most "
                             f"{MAX_BYTES} bytes"])
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ScenarioError([f"{path}: not UTF-8 text"]) from None
    return parse_scenario(text, source=str(path), base=path.parent, path=path)


def parse_scenario(
    text: str, *, source: str = "<scenario>", base: Path = Path("."), path: Path | None = None
) -> Scenario:
    """Check a scenario given as TOML text; protocol paths are relative to ``base``."""
    try:
        data = parse_toml(text, source, MAX_BYTES, what="scenario")
    except SettingsError as exc:
        raise ScenarioError(exc.problems) from None
    return _Checker(text, source, base, path).check(data)


# The shape of each table, checked by pydantic; what depends on the protocol
# (roles, keys, actions, columns) and on the code (policies) is checked by
# _Checker into the same list of problems.

_TEXT = "a non-empty string"
_NONBLANK = r"\S"


class _File(Table):
    scenario: dict[str, Any] | None = must("a table")
    rounds: dict[str, Any] | None = must("a table")
    stop: dict[str, Any] | None = must("a table")
    server: dict[str, Any] | None = must("a table")
    report: dict[str, Any] | None = must("a table")
    agents: dict[str, Any] | None = must("[agents.NAME] tables")


class _About(Table):
    name: str | None = must(_TEXT, pattern=_NONBLANK)
    protocol: str = must(_TEXT, ..., pattern=_NONBLANK)
    description: str | None = must(_TEXT, pattern=_NONBLANK)


class _Rounds(Table):
    key: str = must(_TEXT, ..., pattern=_NONBLANK)
    end: str | None = must(_TEXT, pattern=_NONBLANK)
    limit: int | None = must("a positive integer", gt=0)


class _Stop(Table):
    max_actions: int | None = must("a positive integer", gt=0)
    timeout: float = must("a positive number", 300.0, gt=0)
    policy_timeout: float = must("a positive number", POLICY_TIMEOUT, gt=0)


class _Server(Table):
    policy: ServerPolicy = must("'instant' or 'batched'", "instant")
    http: bool = must("true or false", False)


class _Report(Table):
    rows: str | None = must(_TEXT, pattern=_NONBLANK)
    columns: list[str] | None = must("a list of attribute names")
    chart: dict[str, Any] | None = must("a table")
    output: str | None = must(_TEXT, pattern=_NONBLANK)


class _Chart(Table):
    x: str = must(_TEXT, ..., pattern=_NONBLANK)
    y: str | list[str] = must("a column name or a list of them", ..., min_length=1)
    series: str | None = must(_TEXT, pattern=_NONBLANK)
    title: str | None = must(_TEXT, pattern=_NONBLANK)


class _Agent(Table):
    role: str = must(_TEXT, ..., pattern=_NONBLANK)
    kind: Literal["coded", "llm"] | None = must("'coded' or 'llm'")
    count: int = must("a positive integer", 1, gt=0)
    policy: str | None = must(_TEXT, pattern=_NONBLANK)
    params: dict[str, Any] = must("a table", {})
    persona: str | None = must(_TEXT, pattern=_NONBLANK)
    goal: str | None = must(_TEXT, pattern=_NONBLANK)
    provider: str | None = must(_TEXT, pattern=_NONBLANK)
    model: str | None = must(_TEXT, pattern=_NONBLANK)
    base_url: str | None = must(_TEXT, pattern=_NONBLANK)
    max_calls: int | None = must("a positive integer", gt=0)
    acts_for: str | list[str] | None = must(
        'an attribute or a list of them, e.g. "seller" or ["Take.queue", "Send.sender"]'
    )


_LLM_ONLY = ("persona", "goal", "provider", "model", "base_url", "max_calls")


class _Checker:
    """Reads the parsed TOML, collecting every problem with its place."""

    def __init__(self, text: str, source: str, base: Path, path: Path | None) -> None:
        self.base = base
        self.path = path
        self.found = Problems(source, text, limit=MAX_PROBLEMS)
        self.role_problems = False

    def problem(self, where: tuple[str, ...], message: str) -> None:
        self.found.add(where, message)

    def name_in(self, value: str | None, where: tuple[str, ...], known: list[str],
                what: str) -> str | None:
        if value is None or value in known:
            return value
        close = difflib.get_close_matches(value, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        self.problem(where, f"{value!r} is not {what} ({', '.join(known)}){hint}")
        return None

    def check(self, data: Mapping[str, Any]) -> Scenario:
        top = self.found.check(_File, data) or _File()
        about = self.found.check(_About, top.scenario or {}, ("scenario",))
        protocol, protocol_path = self.protocol(about)
        name = (about and about.name) or (protocol.name if protocol else "scenario")
        rounds = self.rounds(top.rounds, protocol)
        stop = self.found.check(_Stop, top.stop or {}, ("stop",)) or _Stop()
        server = self.found.check(_Server, top.server or {}, ("server",)) or _Server()
        report = self.report(top.report or {}, protocol)
        agents = self.agents(top.agents, "agents" in data, protocol)
        if self.found or protocol is None or protocol_path is None:
            raise ScenarioError(self.found.messages)
        return Scenario(
            name=name,
            protocol=protocol,
            protocol_path=protocol_path,
            agents=tuple(agents),
            description=(about and about.description) or "",
            path=self.path,
            rounds=rounds,
            max_actions=stop.max_actions,
            timeout=stop.timeout,
            policy_timeout=stop.policy_timeout,
            policy=server.policy,
            http=server.http,
            report=report,
        )

    def protocol(self, about: _About | None) -> tuple[LangshawProtocol | None, Path | None]:
        where = ("scenario", "protocol")
        if about is None:
            return None, None
        from syncserver.bundled import find

        given = about.protocol
        found = find(given, self.base)
        if found is None:
            self.problem(where, f"no protocol file {given!r} (relative to {self.base}), "
                                "nor a bundled protocol of that name")
            return None, None
        try:
            return LangshawProtocol.load(found), found
        except LangshawError as exc:
            self.problem(where, f"{given!r} is not a valid protocol:\n{exc}")
            return None, None

    def rounds(self, data: dict[str, Any] | None,
               protocol: LangshawProtocol | None) -> RoundSpec | None:
        if data is None:
            return None
        table = self.found.check(_Rounds, data, ("rounds",))
        if table is None:
            return None
        key: str | None = table.key
        end = table.end
        if protocol is not None:
            key = self.name_in(key, ("rounds", "key"), list(protocol.keys),
                               f"a key of {protocol.name}")
            end = self.name_in(end, ("rounds", "end"), list(protocol.actions),
                               f"an action of {protocol.name}")
            if key is not None and key in protocol.root_keys:
                self.problem(("rounds", "key"), f"{key!r} is the root key: one enactment has "
                                                "one value of it, so it cannot count rounds")
        return RoundSpec(key, end, table.limit) if key else None

    def report(self, data: dict[str, Any], protocol: LangshawProtocol | None) -> ReportSpec:
        table = self.found.check(_Report, data, ("report",))
        if table is None or protocol is None:
            # nothing to check the rest against
            return ReportSpec(output=table.output if table else None)
        rows = table.rows
        columns: tuple[str, ...] = ()
        if rows is not None:
            rows = self.name_in(rows, ("report", "rows"), list(protocol.actions),
                                f"an action of {protocol.name}")
        if rows is not None:
            action = protocol.actions[rows]
            allowed = [a for a in action.attributes if a not in protocol.actions]
            allowed += ["performer", "seq"]
            if table.columns is None:
                columns = tuple(a for a in allowed
                                if a not in protocol.root_keys and a != "seq")
            else:
                for column in table.columns:
                    self.name_in(column, ("report", "columns"), allowed,
                                 f"an attribute of {rows}, performer or seq")
                columns = tuple(table.columns)
        elif table.columns is not None:
            self.problem(("report", "columns"), "needs report.rows (the action a row is)")
        chart = self.chart(table.chart, columns, rows)
        return ReportSpec(rows, columns, chart, table.output)

    def chart(self, data: dict[str, Any] | None, columns: tuple[str, ...],
              rows: str | None) -> ChartSpec | None:
        if data is None:
            return None
        where = ("report", "chart")
        table = self.found.check(_Chart, data, where)
        if rows is None:
            self.problem(where, "needs report.rows: a chart plots the table")
            return None
        if table is None:
            return None
        ys = [table.y] if isinstance(table.y, str) else table.y
        for part, names in (("x", [table.x]), ("y", ys), ("series", [table.series])):
            for name in names:
                if name is not None and name not in columns:
                    self.problem((*where, part),
                                 f"{name!r} is not a column of the table "
                                 f"({', '.join(columns)})")
        return ChartSpec(table.x, tuple(ys), table.series, table.title)

    def agents(self, table: dict[str, Any] | None, given: bool,
               protocol: LangshawProtocol | None) -> list[AgentSpec]:
        if not table:
            self.problem(("agents",) if given else (),
                         "no agent: add at least one [agents.NAME] table")
        found: list[AgentSpec] = []
        names: dict[str, tuple[str, ...]] = {}
        for name, data in (table or {}).items():
            where = ("agents", name)
            if len(name) > 64 or not name.strip() or not name.isprintable():
                self.problem(where, f"{name[:80]!r} cannot name an agent: up to 64 printable "
                                    "characters, not only spaces")
                continue
            spec = self.agent(data, where, protocol)
            if spec is None:
                continue
            for agent in spec.names():
                if agent in names:
                    self.problem(where, f"agent name {agent!r} is already taken by "
                                        f"{'.'.join(names[agent])}")
                names[agent] = where
            found.append(spec)
        population = sum(s.count for s in found)
        if population > MAX_AGENTS:
            self.problem(("agents",), f"{population} agents in all; a scenario runs at most "
                                      f"{MAX_AGENTS} (each has its own replica and hears "
                                      "every action)")
        if protocol is not None and found and not self.role_problems:
            played = {s.role for s in found}
            for role in protocol.roles:
                if role not in played:
                    self.problem(("agents",), f"no agent plays {role} (add an "
                                              f"[agents.NAME] table with role = {role!r})")
        return found

    def agent(self, data: Any, where: tuple[str, ...],
              protocol: LangshawProtocol | None) -> AgentSpec | None:
        table = self.found.check(_Agent, data, where)
        if table is None:
            self.role_problems = True
            return None
        role: str | None = table.role
        if protocol is not None:
            role = self.name_in(role, (*where, "role"), list(protocol.roles),
                                f"a role of {protocol.name}")
        self.role_problems |= role is None
        kind = table.kind or ("llm" if table.goal and not table.policy else "coded")
        count = table.count
        if count > MAX_AGENTS:
            self.problem((*where, "count"), f"{count} agents; a scenario runs at most "
                                            f"{MAX_AGENTS}")
            count = 1
        policy = goal = None
        if kind == "coded":
            policy = table.policy
            if policy is None:
                self.problem((*where, "policy"), "missing: it is required")
            for key in _LLM_ONLY:
                if getattr(table, key) is not None:
                    self.problem((*where, key), "is for kind = 'llm'; a coded agent has a policy")
            if policy is not None:
                found = _import_policy(policy, self.base)
                if isinstance(found, str):
                    self.problem((*where, "policy"), found)
        else:
            goal = table.goal
            if goal is None:
                self.problem((*where, "goal"), "missing: it is required")
            if table.policy is not None:
                self.problem((*where, "policy"), "is for kind = 'coded'; an LLM agent has a goal")
        acts_for = self.acts_for(table.acts_for, (*where, "acts_for"), protocol, role)
        if role is None:
            return None
        return AgentSpec(
            name=where[-1], role=role, kind=kind, count=count, policy=policy,
            params=dict(table.params), goal=goal, max_calls=table.max_calls,
            acts_for=acts_for, base=self.base, persona=table.persona,
            provider=table.provider, model=table.model, base_url=table.base_url,
        )

    def acts_for(self, value: str | list[str] | None, where: tuple[str, ...],
                 protocol: LangshawProtocol | None, role: str | None) -> tuple[str, ...]:
        """``acts_for = "seller"`` or a list: attributes, or ``Action.attribute``,
        that the agent binds to its own name only."""
        if value is None:
            return ()
        targets = [value] if isinstance(value, str) else value
        if protocol is not None:
            played = {protocol.name: [role]} if role is not None else None
            ActsFor.parse({t: where[-2] for t in targets}, [protocol], "",
                          lambda at, message: self.problem(where, f"{at.lstrip('.')}: {message}"),
                          played)
        return tuple(targets)


def _import_policy(reference: str, base: Path) -> Callable[..., Any] | str:
    """The callable ``module:name`` names, or what is wrong with it. A module not
    found on the path is looked for in ``base`` (the scenario's folder) too."""
    module_name, colon, attribute = reference.partition(":")
    if not colon or not module_name or not attribute:
        return f"{reference!r} must be 'module:callable' (e.g. " \
               "'strabo.simulate.policies.market:cheapest')"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        beside = (base / top).is_dir() or (base / f"{top}.py").is_file()
        if exc.name != top or not beside:
            return f"cannot import {module_name!r}: {exc}"
        folder = str(base.resolve())
        sys.path.insert(0, folder)
        try:
            module = importlib.import_module(module_name)
        except Exception as again:  # whatever the module's own code raised
            return _import_failed(module_name, again)
        finally:
            if folder in sys.path:
                sys.path.remove(folder)
    except Exception as exc:  # a module whose own code fails (SyntaxError, ...)
        return _import_failed(module_name, exc)
    found: Any = module
    for part in attribute.split("."):
        found = getattr(found, part, None)
        if found is None:
            return f"module {module_name!r} has no {attribute!r}"
    if inspect.isclass(found) or not callable(found):
        what = "a class" if inspect.isclass(found) else f"a {type(found).__name__}"
        return f"{reference!r} is {what}, not a function policy(move) -> bindings | None"
    if inspect.iscoroutinefunction(found):
        return (f"{reference!r} is a coroutine function (async def); a policy is a plain "
                "function policy(move) -> bindings | None")
    policy: Callable[..., Any] = found
    return policy


def _import_failed(module: str, exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.lineno:
        where = f" ({exc.filename}:{exc.lineno})" if exc.filename else f" (line {exc.lineno})"
        return f"cannot import {module!r}: SyntaxError: {exc.msg}{where}"
    if isinstance(exc, ModuleNotFoundError | ImportError):
        return f"cannot import {module!r}: {exc}"
    return f"cannot import {module!r}: its code raised {type(exc).__name__}: {exc}"
