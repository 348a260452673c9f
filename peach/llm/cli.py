"""``strabo agent``: run an LLM agent on one or more Langshaw roles, from the shell."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from syncserver.options import INTERRUPTED, count, port, positive

DESCRIPTION = """\
Run an LLM agent that enacts Langshaw protocols toward a goal in plain words.

Give each role it plays as a pair, in order: --protocol FILE --role ROLE (repeat
the pair for several roles, in one protocol or several); FILE may name a bundled
protocol ('--protocol purchase', see 'strabo protocols'). The protocols decide
what the agent may do; the model only chooses among the enabled actions and
binds their attributes. Every attempt is checked against the protocol, so a
model mistake is refused, never enacted.

Where the social state lives:
  --syncserver URL --token T   join a running SyncServer (see strabo syncserver);
                               --name must be the agent the token belongs to
  --embedded                   serve a SyncServer in this process and print its
                               URL and the tokens of the other agents (--peer)
                               so that they can join

The agent decides when something calls for it (the start, an action newly
enabled, an action it waits for, an --event) and stops when every enactment it
is in is complete, when the model says the goal is reached, or when a budget
(--max-calls, --max-seconds, --max-tokens) runs out.

Whether the goal was reached is judged on the protocol's log, not on what the
model says: --success ACTION names an action that counts as success (repeat for
several; e.g. --success Completed). Exit status: 0 when the goal was reached
(with --success: every enactment the agent took part in ended in one of those
actions; without it: the run ended normally and the agent performed an action),
1 otherwise (why, on stderr: a checkout that Failed, a purchase Rejected, a
budget used up, no action at all), 2 for a usage error, 130 on Ctrl-C.

The model, through one of two providers (--provider):
  anthropic (default)  Claude, through the Anthropic Messages API; the key comes
                       from ANTHROPIC_API_KEY; --model defaults to claude-sonnet-4-6
  openai               any OpenAI-compatible Chat Completions endpoint: OpenAI
                       itself (key from OPENAI_API_KEY), or a local server at
                       --base-url (Ollama http://127.0.0.1:11434/v1, vLLM
                       http://127.0.0.1:8000/v1, llama.cpp http://127.0.0.1:8080/v1),
                       which needs no key (a placeholder is sent); --model is
                       required: the name the endpoint serves (e.g. llama3.1)
docs/llm-agents.md explains providers, prompts, tools, hooks and transcripts.

Example (the Purchase sample's sellers and shipper join the embedded server):
  strabo agent --protocol protocols/purchase.lsh --role Buyer --embedded \\
      --port 8300 --mas purchase --goal "Buy a pen for at most 10; pick the \\
      cheapest quote; deliver to 1 Main St."
  python -m samples.purchase.seller      # in another shell, and the shipper
The same with a local model served by Ollama: add
  --provider openai --base-url http://127.0.0.1:11434/v1 --model llama3.1
"""


def configure(parser: argparse.ArgumentParser) -> None:
    roles = parser.add_argument_group("roles and goal")
    roles.add_argument(
        "--protocol", action="append", metavar="FILE", default=[],
        help="a Langshaw protocol file (repeat, paired with --role)",
    )
    roles.add_argument(
        "--role", action="append", metavar="ROLE", default=[],
        help="the role the agent plays in the protocol given at the same position",
    )
    goal = roles.add_mutually_exclusive_group()
    goal.add_argument("--goal", metavar="TEXT", help="the agent's goal, in plain words")
    goal.add_argument("--goal-file", metavar="FILE", help="read the goal from a file")
    roles.add_argument(
        "--success", action="append", metavar="ACTION", default=[],
        help="an action of the agent's protocols whose occurrence in its enactments "
        "means the goal is reached (e.g. Completed); repeatable. Judged on the log: "
        "without it, the exit status says only whether the run ended normally and the "
        "agent acted",
    )
    roles.add_argument(
        "--name", metavar="NAME",
        help="the agent's name (default: the first role, in lower case); with "
        "--syncserver, the agent the token authenticates",
    )
    roles.add_argument(
        "--event", action="append", metavar="TEXT", default=[],
        help="an external event (a request from the user) pending at the start; repeatable",
    )
    roles.add_argument(
        "--mandate", metavar="FILE",
        help="what the principal allows beyond the protocols (TOML or JSON: how often "
        "an action, how many enactments, bounds on values, a ceiling, actions needing "
        "approval; docs/llm-agents.md, Mandates). Refusals are told to the model",
    )
    roles.add_argument(
        "--yes", action="store_true",
        help="grant every approval the mandate asks for (default: ask at the terminal; "
        "without one, refuse)",
    )
    roles.add_argument(
        "--approve-timeout", type=positive, default=None, metavar="S",
        help="how long an approval at the terminal may wait for its answer before the "
        "action is refused (default: 300)",
    )
    roles.add_argument(
        "--secret", action="append", metavar="ATTRIBUTE", default=[],
        help="an attribute whose values are never shown to the model or logged; repeatable",
    )

    where = parser.add_argument_group("social state (one of)")
    where.add_argument("--syncserver", metavar="URL", help="a running SyncServer")
    where.add_argument("--token", metavar="T", help="this agent's bearer token (with --syncserver)")
    where.add_argument(
        "--embedded", action="store_true", help="serve a SyncServer in this process"
    )
    where.add_argument(
        "--mas", default="default", help="the MAS to join or serve (default: default)"
    )
    where.add_argument(
        "--port", type=port, default=0,
        help="with --embedded: the port to serve on (default: a free one)",
    )
    where.add_argument(
        "--peer", action="append", metavar="NAME=ROLE", default=[],
        help="with --embedded: another agent of the MAS (token NAME-secret); ROLE may be "
        "Protocol:Role. Default: one agent per role the LLM agent does not play, named "
        "after the role in lower case",
    )

    model = parser.add_argument_group("model and budget")
    model.add_argument(
        "--provider", choices=PROVIDER_CHOICES, default=None,
        help="anthropic (the Messages API, the default) or openai (any OpenAI-compatible "
        "Chat Completions endpoint)",
    )
    model.add_argument(
        "--model", metavar="M",
        help="the model: default claude-sonnet-4-6 for anthropic; required for openai",
    )
    model.add_argument(
        "--base-url", metavar="URL",
        help="the provider's endpoint, e.g. http://127.0.0.1:11434/v1 for Ollama with "
        "--provider openai (default: the provider's own API, or ANTHROPIC_BASE_URL / "
        "OPENAI_BASE_URL)",
    )
    model.add_argument("--max-calls", type=count, default=50, metavar="N",
                       help="stop after N LLM calls (default 50)")
    model.add_argument("--max-seconds", type=positive, default=600.0, metavar="S",
                       help="stop after S seconds (default 600)")
    model.add_argument("--max-tokens", type=count, default=500_000, metavar="N",
                       help="stop after N tokens, in and out (default 500000)")
    model.add_argument("--transcript", metavar="FILE",
                       help="save every prompt, tool call and result as JSON")
    model.add_argument("-v", "--verbose", action="store_true",
                       help="log each decision and action as it happens")
    model.add_argument("--inspect-port", type=port, metavar="PORT",
                       help="serve GET /inspect on 127.0.0.1:PORT (0: a free port) while "
                       "running: roles, enabled actions, pending decisions, counters; "
                       "read it with 'strabo inspect URL'")


# Kept literal so that `strabo --help` loads no SDK; tests check it matches PROVIDERS.
PROVIDER_CHOICES = ("anthropic", "openai")


class UsageError(Exception):
    """A command line that cannot run; the message says how to fix it."""


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(name)s: %(message)s",
    )
    if not args.verbose:  # the SDKs' transports log every request at INFO
        for transport in ("httpx", "httpx2"):
            logging.getLogger(transport).setLevel(logging.WARNING)
    try:
        return asyncio.run(run_agent(args))
    except UsageError as exc:
        print(f"strabo agent: {exc}", file=sys.stderr)
        return 2


async def run_agent(
    args: argparse.Namespace,
    on_ready: Callable[[str], Awaitable[Any] | None] | None = None,
    client: Any = None,
) -> int:
    """The command's body, for ``asyncio.run`` or a test's event loop. ``on_ready``
    gets the SyncServer's URL once the agent's adapters can start."""
    import asyncio
    import contextlib
    import inspect

    from peach import ExecutorError, PeachAdapter, SyncExecutor
    from peach.llm import Budget, LLMAgent, LLMError
    from peach.llm._providers import default_model, missing_key, provider_of
    from syncserver.stopping import stop_on_signals

    pairs = _roles(args)
    goal = _goal(args)
    name = args.name or pairs[0][1].lower()
    try:
        provider = provider_of(client, args.provider)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if provider == "openai" and not args.model:
        raise UsageError(
            "--provider openai needs --model: the name the endpoint serves "
            "(e.g. llama3.1 for Ollama)"
        )
    model = default_model(provider, args.model)
    if client is None:
        check_base_url_option(args.base_url, provider)
    problem = missing_key(provider, args.base_url) if client is None else None
    if problem:
        raise UsageError(problem)
    if bool(args.syncserver) == bool(args.embedded):
        raise UsageError("say where the social state lives: --syncserver URL --token T, "
                         "or --embedded")
    if args.syncserver and not args.token:
        raise UsageError("--syncserver needs --token (this agent's bearer token)")
    if args.syncserver:
        check_syncserver_url(args.syncserver)
    if args.embedded and args.token:
        raise UsageError("--token goes with --syncserver; an embedded server makes its own")
    if args.transcript and not Path(args.transcript).parent.is_dir():
        raise UsageError(
            f"--transcript {args.transcript}: the folder {Path(args.transcript).parent} "
            "does not exist"
        )
    budget = Budget(args.max_calls, args.max_seconds, args.max_tokens)
    mandate = _mandate(args.mandate, pairs)

    async with contextlib.AsyncExitStack() as stack:
        if args.embedded:
            protocols = list({id(p): p for p, _ in pairs}.values())
            url, executor = await embedded_server(
                stack, name, protocols, _agents(name, pairs, args.peer), args.mas, args.port,
                "strabo agent", sys.stdout,
            )
        else:
            url = args.syncserver
            executor = SyncExecutor(url, token=args.token, mas=args.mas)
        adapters = [PeachAdapter(name, p, role, executor) for p, role in pairs]
        try:
            agent = LLMAgent(
                adapters, goal, client=client, model=model, budget=budget, provider=provider,
                base_url=args.base_url, transcript=args.transcript, secrets=args.secret,
                name=name, success=args.success or None, mandate=mandate,
                approve=_approver(args.yes, name, set(args.secret)),
                approve_timeout=args.approve_timeout,
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        for adapter in adapters:
            adapter.listeners.append(_printer(name))
        if args.inspect_port is not None:
            from peach.inspection import inspection_app
            from syncserver.serving import serve

            try:
                where = await stack.enter_async_context(
                    serve(inspection_app(agent.inspect), port=args.inspect_port or None)
                )
            except OSError as exc:
                raise UsageError(
                    f"cannot serve the inspection on port {args.inspect_port}: "
                    f"{exc.strerror or exc}"
                ) from None
            print(f"strabo agent: inspection at {where}/inspect", flush=True)
        for text in args.event:
            await agent.inject(text)
        if on_ready is not None:
            ready = on_ready(url)
            if inspect.isawaitable(ready):
                await ready
        # Ctrl-C and SIGTERM stop the run (the agent says why in its report), as
        # they stop the servers (syncserver.stopping): 130 after Ctrl-C.
        with stop_on_signals(lambda sig: agent.stop("interrupted")) as stopping:
            plays = ", ".join(f"{a.role} in {a.protocol.name}" for a in adapters)
            print(f"strabo agent: {name} plays {plays}; it acts when the protocol enables "
                  f"it, and stops at completion, after --max-seconds {args.max_seconds:g}, "
                  "or on Ctrl-C", flush=True)
            notes = asyncio.create_task(_idle_notes(adapters))
            try:
                report = await agent.run()
            except LLMError as exc:
                raise UsageError(str(exc)) from None
            except ExecutorError as exc:
                return cannot_join("agent", exc)
            finally:
                notes.cancel()
    print(f"strabo agent: {report}")
    for rule, message in sorted(report.first_rejection.items()):
        print(f"  refused ({rule}), first: {message}")
    for decision in report.decisions:
        calls = ", ".join(c["tool"] for c in decision.tool_calls) or "-"
        print(f"  #{decision.number} {decision.kind:<8} {calls}")
    if args.transcript:
        print(f"  transcript: {args.transcript}")
    if stopping.status() == INTERRUPTED:
        return INTERRUPTED
    shortfall = report.shortfall
    if shortfall is not None:  # one line: why the run is no success
        print(f"strabo agent: {shortfall}", file=sys.stderr)
        return 1
    return 0


async def embedded_server(
    stack: AsyncExitStack[Any],
    name: str,
    protocols: list[Any],
    agents: dict[str, list[str]],
    mas: str,
    port: int | None,
    command: str,
    out: Any,
) -> tuple[str, Any]:
    """Serve a SyncServer in this process for ``--embedded`` (until ``stack``
    closes); print its URL and the other agents' tokens. Returns the URL and a
    LocalExecutor for the agent ``name``."""
    from peach import LocalExecutor
    from syncserver import SyncServer, create_app, uvicorn_options
    from syncserver.config import ConfigError
    from syncserver.serving import serve

    try:
        server = SyncServer.embedded(
            protocols, agents, mas=mas, tokens={a: f"{a}-secret" for a in agents if a != name}
        )
    except ConfigError as exc:  # a --peer with a role the protocols lack, say
        raise UsageError(str(exc).removeprefix("<embedded>: ")) from None
    try:
        app, options = create_app(server), uvicorn_options(server.config.limits)
        url = await stack.enter_async_context(serve(app, port=port or None, **options))
    except OSError as exc:
        raise UsageError(f"cannot serve on port {port}: {exc.strerror or exc}") from None
    stack.callback(server.close_streams)  # at exit, let peers' streams end at once
    print(f"{command}: SyncServer at {url}, MAS {mas!r}", file=out, flush=True)
    for peer, roles in agents.items():
        if peer != name:
            print(f"  peer {peer} ({', '.join(roles)}): token {peer}-secret", file=out, flush=True)
    return url, LocalExecutor(server, mas=mas)


def check_syncserver_url(url: str) -> None:
    """A --syncserver that cannot be a SyncServer's address is a usage error now,
    not a connection error (or a traceback) later."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--syncserver {url!r} is not an http(s) URL (e.g. http://127.0.0.1:8300)")


def check_base_url_option(url: str | None, provider: str) -> None:
    """A --base-url (or the provider's *_BASE_URL variable, which the SDK reads)
    that cannot be an endpoint is a usage error now, before the embedded SyncServer
    starts, not a request to 'not-a-url/chat/completions' later."""
    import os

    from peach.llm._base_url import check_base_url

    variable = "OPENAI_BASE_URL" if provider == "openai" else "ANTHROPIC_BASE_URL"
    name, value = ("--base-url", url) if url is not None else (variable, os.environ.get(variable))
    if value:
        try:
            check_base_url(value, name)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def _roles(args: argparse.Namespace) -> list[tuple[Any, str]]:
    from langshaw import LangshawError, LangshawProtocol

    if not args.protocol or not args.role:
        raise UsageError("give at least one --protocol FILE --role ROLE pair")
    if len(args.protocol) != len(args.role):
        raise UsageError(
            f"{len(args.protocol)} --protocol but {len(args.role)} --role: give them in pairs, "
            "the role after its protocol"
        )
    loaded: dict[str, Any] = {}
    pairs = []
    for path, role in zip(args.protocol, args.role, strict=True):
        if path not in loaded:
            file = _protocol_file(path)
            if file is None:
                raise UsageError(
                    f"cannot read {path}: no such file, nor a bundled protocol of that name "
                    "(see 'strabo protocols')"
                )
            try:
                loaded[path] = LangshawProtocol.load(file)
            except OSError as exc:
                raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
            except LangshawError as exc:
                raise UsageError(f"{path} is not a valid protocol:\n{exc}") from None
        protocol = loaded[path]
        if role not in protocol.roles:
            raise UsageError(
                f"{protocol.name} ({path}) has no role {role!r} (roles: "
                f"{', '.join(protocol.roles)})"
            )
        pairs.append((protocol, role))
    names = [p.name for p in loaded.values()]
    if len(set(names)) != len(names):
        raise UsageError(f"two files define the same protocol name: {sorted(names)}")
    return pairs


def _goal(args: argparse.Namespace) -> str:
    if args.goal_file:
        try:
            goal = Path(args.goal_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {args.goal_file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:  # a binary file, say: one line, not a traceback
            raise UsageError(f"cannot read {args.goal_file}: not UTF-8 text") from None
    else:
        goal = args.goal or ""
    if not goal.strip():
        raise UsageError("give the agent a goal: --goal TEXT or --goal-file FILE")
    return goal


def _agents(name: str, pairs: list[tuple[Any, str]], peers: list[str]) -> dict[str, list[str]]:
    several = len({p.name for p, _ in pairs}) > 1
    agents: dict[str, list[str]] = {
        name: [f"{p.name}:{r}" if several else r for p, r in pairs]
    }
    if peers:
        for peer in peers:
            peer_name, sep, role = peer.partition("=")
            if not sep or not peer_name or not role:
                raise UsageError(f"--peer {peer!r}: write NAME=ROLE (or NAME=Protocol:Role)")
            if peer_name == name:
                raise UsageError(f"--peer {peer_name!r} is the LLM agent's own name")
            agents.setdefault(peer_name, []).append(role)
        return agents
    mine = {(p.name, r) for p, r in pairs}
    for protocol, _ in pairs:
        for role in protocol.roles:
            if (protocol.name, role) not in mine:
                peer = role.lower()
                entry = f"{protocol.name}:{role}" if several else role
                if entry not in agents.setdefault(peer, []):
                    agents[peer].append(entry)
    return agents


def _printer(name: str) -> Callable[[Any, list[tuple[Any, ...]]], None]:
    def show(batch: Any, newly: list[tuple[Any, ...]]) -> None:
        for entry in batch.entries:
            who = "you" if entry.performer == name else entry.performer
            keys = " ".join(f"{k}={v}" for k, v in entry.instance.keys.items())
            print(f"  #{batch.seq:<4} {entry.instance.name:<22} by {who:<10} {keys}", flush=True)

    return show


#: Seconds between the lines saying an agent still waits for others.
IDLE_NOTE = 30.0


async def _idle_notes(adapters: list[Any], every: float = IDLE_NOTE) -> None:
    """While nothing is enabled for the agent, say so now and then: an agent whose
    peers never join would otherwise wait in silence until --max-seconds."""
    import asyncio
    import time

    started = time.monotonic()
    while True:
        await asyncio.sleep(every)
        note = idle_note(adapters, time.monotonic() - started)
        if note:
            print(note, flush=True)


def idle_note(adapters: list[Any], waited: float) -> str | None:
    """The line for an agent with nothing enabled (None when it has something to do)."""
    if any(a.running and a.enabled() for a in adapters):
        return None
    roles = ", ".join(a.role for a in adapters)
    return (f"strabo agent: waited {waited:.0f} s; nothing is enabled for {roles} yet "
            "(the other agents have not acted)")


def _protocol_file(name: str) -> Path | None:
    """A protocol file as given, or the bundled protocol of that name."""
    from syncserver.bundled import find

    return find(name)


def _mandate(path: str | None, pairs: list[tuple[Any, str]]) -> Any:
    """--mandate FILE, read and checked against the agent's protocols and the
    roles it plays in them (``pairs``: protocol, role)."""
    if path is None:
        return None
    from syncserver.mandate import MandateError, read_mandate

    roles: dict[str, set[str]] = {}
    for protocol, role in pairs:
        roles.setdefault(protocol.name, set()).add(role)
    try:
        return read_mandate(path, list({p.name: p for p, _ in pairs}.values()), roles)
    except MandateError as exc:
        raise UsageError("--mandate: " + "\n  ".join(exc.problems)) from None
    except UnicodeDecodeError:  # read_mandate lets it through: not a traceback here
        raise UsageError(f"--mandate: {path}: not UTF-8 text") from None


def _approver(
    yes: bool, name: str, secrets: set[str]
) -> Callable[[str, Any], Awaitable[bool]]:
    """What asks the principal: --yes grants; a terminal asks; else no one can."""
    from peach.llm._asking import Terminal

    async def approve(agent: str, instances: Any) -> bool:
        what = "; ".join(f"{i.action.name} {_brief(i.bindings, secrets)}" for i in instances)
        if yes:
            print(f"strabo agent: {name}: approved by --yes: {what}", flush=True)
            return True
        if not sys.stdin.isatty():
            print(f"strabo agent: {name}: {what} needs approval and no terminal can ask "
                  "(give --yes to grant it)", file=sys.stderr, flush=True)
            return False
        question = f"strabo agent: {name} wants to perform {what}. Approve? [y/N] "
        answer = await terminal.ask(question)  # given up on at the adapter's approve_timeout
        return answer.strip().lower() in ("y", "yes")

    terminal = Terminal()
    return approve


def _brief(bindings: Any, secrets: set[str], limit: int = 200) -> str:
    text = ", ".join(
        f"{k}={'[secret]' if k in secrets else repr(v)}"
        for k, v in bindings.items()
        if v is not True
    )
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cannot_join(verb: str, exc: Exception) -> int:
    """Say why the agent could not join the SyncServer (a token naming another
    agent gets the hint to give ``--name``); the exit status, 1."""
    hint = " (give --name: the agent the token authenticates)" if "named" in str(exc) else ""
    print(f"strabo {verb}: {exc}{hint}", file=sys.stderr)
    return 1
