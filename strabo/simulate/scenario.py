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
import math
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langshaw import LangshawError, LangshawProtocol
from strabo.simulate._locate import line_of
from strabo.simulate.move import Policy
from syncserver.acts_for import ActsFor
from syncserver.config import POLICIES

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
_SECTIONS = {
    "scenario": ("name", "protocol", "description"),
    "rounds": ("key", "end", "limit"),
    "stop": ("max_actions", "timeout", "policy_timeout"),
    "server": ("policy", "http"),
    "report": ("rows", "columns", "chart", "output"),
    "agents": (),
}
_CHART = ("x", "y", "series", "title")
_AGENT = ("role", "kind", "count", "policy", "params", "persona", "goal", "provider", "model",
          "base_url", "max_calls", "acts_for")


class ScenarioError(Exception):
    """A scenario that cannot run; ``problems`` lists each, located."""

    def __init__(self, problems: list[str]) -> None:
        if len(problems) > MAX_PROBLEMS:
            more = len(problems) - MAX_PROBLEMS
            problems = [*problems[:MAX_PROBLEMS], f"... and {more} more problems"]
        self.problems = problems
        super().__init__("\n".join(problems))


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
    try:
        if path.is_file() and path.stat().st_size > MAX_BYTES:
            raise ScenarioError([f"{path}: {path.stat().st_size} bytes; a scenario is at most "
                                 f"{MAX_BYTES} bytes"])
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
    if len(text) > MAX_BYTES:
        raise ScenarioError([f"{source}: {len(text)} characters; a scenario is at most "
                             f"{MAX_BYTES}"])
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise ScenarioError([f"{source}: not a scenario: arrays or tables nested too "
                             "deeply"]) from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = ""
        if " (at line " in message:
            message, _, tail = message.partition(" (at line ")
            where = ":" + tail.rstrip(")").replace(", column ", ":")
        raise ScenarioError([f"{source}{where}: not valid TOML: {message}"]) from None
    return _Checker(text, source, base, path).check(data)


class _Checker:
    """Reads the parsed TOML, collecting every problem with its place."""

    def __init__(self, text: str, source: str, base: Path, path: Path | None) -> None:
        self.text = text
        self.source = source
        self.base = base
        self.path = path
        self.found: list[tuple[int, str]] = []
        self.role_problems = False

    @property
    def problems(self) -> list[str]:
        """Every problem so far, in the order of the file."""
        return [text for _, text in sorted(self.found, key=lambda f: f[0])]

    def problem(self, where: tuple[str, ...], message: str) -> None:
        line = line_of(self.text, where) if where else None
        place = f"{self.source}:{line}" if line else self.source
        key = ".".join(where)
        text = f"{place}: {key}: {message}" if key else f"{place}: {message}"
        self.found.append((line or 0, text))

    def table(self, data: Mapping[str, Any], where: tuple[str, ...],
              known: tuple[str, ...]) -> Mapping[str, Any]:
        value = data.get(where[-1], {})
        if not isinstance(value, Mapping):
            self.problem(where, "must be a table")
            return {}
        if known:
            for key in value:
                if key not in known:
                    self.unknown((*where, key), known)
        return value

    def unknown(self, where: tuple[str, ...], known: tuple[str, ...] | list[str]) -> None:
        close = difflib.get_close_matches(where[-1], known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        self.problem(where, f"unknown setting ({hint}known: {', '.join(known)})")

    def string(self, data: Mapping[str, Any], where: tuple[str, ...],
               required: bool = False) -> str | None:
        value = data.get(where[-1])
        if value is None:
            if required:
                self.problem(where, "missing: it is required")
            return None
        if not isinstance(value, str) or not value.strip():
            self.problem(where, f"must be a non-empty string, not {value!r}")
            return None
        return value

    def positive(self, data: Mapping[str, Any], where: tuple[str, ...],
                 integer: bool = True) -> Any:
        value = data.get(where[-1])
        if value is None:
            return None
        wrong = isinstance(value, bool) or not isinstance(value, int | float)
        if (wrong or (integer and not isinstance(value, int)) or not math.isfinite(value)
                or value <= 0):
            kind = "integer" if integer else "number"
            self.problem(where, f"must be a positive {kind}, not {value!r}")
            return None
        return value

    def name_in(self, value: str | None, where: tuple[str, ...], known: list[str],
                what: str) -> str | None:
        if value is None or value in known:
            return value
        close = difflib.get_close_matches(value, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        self.problem(where, f"{value!r} is not {what} ({', '.join(known)}){hint}")
        return None

    def check(self, data: Mapping[str, Any]) -> Scenario:
        for key in data:
            if key not in _SECTIONS:
                self.problem((key,), "unknown section (expected [scenario], [rounds], [stop], "
                                     "[server], [report] and [agents.NAME] tables)")
        about = self.table(data, ("scenario",), _SECTIONS["scenario"])
        protocol, protocol_path = self.protocol(about)
        name = self.string(about, ("scenario", "name")) or (
            protocol.name if protocol else "scenario")
        description = self.string(about, ("scenario", "description")) or ""
        rounds = self.rounds(data, protocol)
        stop = self.table(data, ("stop",), _SECTIONS["stop"])
        max_actions = self.positive(stop, ("stop", "max_actions"))
        timeout = self.positive(stop, ("stop", "timeout"), integer=False)
        policy_timeout = self.positive(stop, ("stop", "policy_timeout"), integer=False)
        server = self.table(data, ("server",), _SECTIONS["server"])
        policy = server.get("policy", "instant")
        if policy not in POLICIES:
            self.problem(("server", "policy"), f"must be 'instant' or 'batched', not {policy!r}")
        http = server.get("http", False)
        if not isinstance(http, bool):
            self.problem(("server", "http"), f"must be true or false, not {http!r}")
        report = self.report(data, protocol)
        agents = self.agents(data, protocol)
        if self.problems or protocol is None or protocol_path is None:
            raise ScenarioError(self.problems)
        return Scenario(
            name=name,
            protocol=protocol,
            protocol_path=protocol_path,
            agents=tuple(agents),
            description=description,
            path=self.path,
            rounds=rounds,
            max_actions=max_actions,
            timeout=float(timeout or 300.0),
            policy_timeout=float(policy_timeout or POLICY_TIMEOUT),
            policy=str(policy),
            http=bool(http),
            report=report,
        )

    def protocol(self, about: Mapping[str, Any]) -> tuple[LangshawProtocol | None, Path | None]:
        where = ("scenario", "protocol")
        given = self.string(about, where, required=True)
        if given is None:
            return None, None
        from syncserver.bundled import find

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

    def rounds(self, data: Mapping[str, Any],
               protocol: LangshawProtocol | None) -> RoundSpec | None:
        if "rounds" not in data:
            return None
        table = self.table(data, ("rounds",), _SECTIONS["rounds"])
        key = self.string(table, ("rounds", "key"), required=True)
        end = self.string(table, ("rounds", "end"))
        limit = self.positive(table, ("rounds", "limit"))
        if protocol is not None:
            key = self.name_in(key, ("rounds", "key"), list(protocol.keys),
                               f"a key of {protocol.name}")
            end = self.name_in(end, ("rounds", "end"), list(protocol.actions),
                               f"an action of {protocol.name}")
            if key is not None and key in protocol.root_keys:
                self.problem(("rounds", "key"), f"{key!r} is the root key: one enactment has "
                                                "one value of it, so it cannot count rounds")
        return RoundSpec(key, end, limit) if key else None

    def report(self, data: Mapping[str, Any], protocol: LangshawProtocol | None) -> ReportSpec:
        table = self.table(data, ("report",), _SECTIONS["report"])
        output = self.string(table, ("report", "output"))
        rows = self.string(table, ("report", "rows"))
        if protocol is None:
            return ReportSpec(output=output)  # nothing to check the rest against
        columns: tuple[str, ...] = ()
        if protocol is not None and rows is not None:
            rows = self.name_in(rows, ("report", "rows"), list(protocol.actions),
                                f"an action of {protocol.name}")
        allowed: list[str] = []
        if protocol is not None and rows is not None:
            action = protocol.actions[rows]
            allowed = [a for a in action.attributes if a not in protocol.actions]
            allowed += ["performer", "seq"]
            given = table.get("columns")
            if given is None:
                columns = tuple(a for a in allowed
                                if a not in protocol.root_keys and a != "seq")
            elif not isinstance(given, list) or not all(isinstance(c, str) for c in given):
                self.problem(("report", "columns"), "must be a list of attribute names")
            else:
                for column in given:
                    self.name_in(column, ("report", "columns"), allowed,
                                 f"an attribute of {rows}, performer or seq")
                columns = tuple(given)
        elif "columns" in table:
            self.problem(("report", "columns"), "needs report.rows (the action a row is)")
        chart = self.chart(table, columns, rows)
        return ReportSpec(rows, columns, chart, output)

    def chart(self, report: Mapping[str, Any], columns: tuple[str, ...],
              rows: str | None) -> ChartSpec | None:
        if "chart" not in report:
            return None
        table = self.table(report, ("report", "chart"), _CHART)
        if rows is None:
            self.problem(("report", "chart"), "needs report.rows: a chart plots the table")
            return None
        x = self.string(table, ("report", "chart", "x"), required=True)
        series = self.string(table, ("report", "chart", "series"))
        title = self.string(table, ("report", "chart", "title"))
        given = table.get("y")
        ys = [given] if isinstance(given, str) else given
        if not isinstance(ys, list) or not ys or not all(isinstance(y, str) for y in ys):
            self.problem(("report", "chart", "y"), "must be a column name or a list of them")
            return None
        for part, names in (("x", [x]), ("y", ys), ("series", [series])):
            for name in names:
                if name is not None and name not in columns:
                    self.problem(("report", "chart", part),
                                 f"{name!r} is not a column of the table "
                                 f"({', '.join(columns)})")
        return ChartSpec(x, tuple(ys), series, title) if x else None

    def agents(self, data: Mapping[str, Any],
               protocol: LangshawProtocol | None) -> list[AgentSpec]:
        table = self.table(data, ("agents",), ())
        if not table:
            self.problem(("agents",) if "agents" in data else (),
                         "no agent: add at least one [agents.NAME] table")
        found: list[AgentSpec] = []
        names: dict[str, tuple[str, ...]] = {}
        for name in table:
            where = ("agents", name)
            if len(name) > 64 or not name.strip() or not name.isprintable():
                self.problem(where, f"{name[:80]!r} cannot name an agent: up to 64 printable "
                                    "characters, not only spaces")
                continue
            spec = self.agent(table, where, protocol)
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

    def agent(self, agents: Mapping[str, Any], where: tuple[str, ...],
              protocol: LangshawProtocol | None) -> AgentSpec | None:
        if not isinstance(agents.get(where[-1]), Mapping):
            self.table(agents, where, _AGENT)  # says it must be a table
            return None
        table = self.table(agents, where, _AGENT)
        role = self.string(table, (*where, "role"), required=True)
        if protocol is not None:
            role = self.name_in(role, (*where, "role"), list(protocol.roles),
                                f"a role of {protocol.name}")
        self.role_problems |= role is None
        kind = table.get("kind", "llm" if "goal" in table and "policy" not in table else "coded")
        if kind not in KINDS:
            self.problem((*where, "kind"), f"must be 'coded' or 'llm', not {kind!r}")
            return None
        count = table.get("count", 1)
        if self.positive(table, (*where, "count")) is None:
            count = 1
        elif count > MAX_AGENTS:
            self.problem((*where, "count"), f"{count} agents; a scenario runs at most "
                                            f"{MAX_AGENTS}")
            count = 1
        params = table.get("params", {})
        if not isinstance(params, Mapping):
            self.problem((*where, "params"), "must be a table")
            params = {}
        policy = goal = None
        if kind == "coded":
            policy = self.string(table, (*where, "policy"), required=True)
            for key in ("persona", "goal", "provider", "model", "base_url", "max_calls"):
                if key in table:
                    self.problem((*where, key), "is for kind = 'llm'; a coded agent has a policy")
            if policy is not None:
                found = _import_policy(policy, self.base)
                if isinstance(found, str):
                    self.problem((*where, "policy"), found)
        else:
            goal = self.string(table, (*where, "goal"), required=True)
            if "policy" in table:
                self.problem((*where, "policy"), "is for kind = 'coded'; an LLM agent has a goal")
        strings = {k: self.string(table, (*where, k))
                   for k in ("persona", "provider", "model", "base_url")}
        max_calls = self.positive(table, (*where, "max_calls"))
        acts_for = self.acts_for(table.get("acts_for"), (*where, "acts_for"), protocol, role)
        if role is None:
            return None
        return AgentSpec(
            name=where[-1], role=role, kind=kind, count=count, policy=policy,
            params=dict(params), goal=goal, max_calls=max_calls, acts_for=acts_for,
            base=self.base, **strings,
        )

    def acts_for(self, value: Any, where: tuple[str, ...], protocol: LangshawProtocol | None,
                 role: str | None) -> tuple[str, ...]:
        """``acts_for = "seller"`` or a list: attributes, or ``Action.attribute``,
        that the agent binds to its own name only."""
        if value is None:
            return ()
        targets = [value] if isinstance(value, str) else value
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            self.problem(where, 'must be an attribute or a list of them, e.g. "seller" or '
                                '["Take.queue", "Send.sender"]')
            return ()
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
