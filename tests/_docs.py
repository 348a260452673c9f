"""The fenced blocks of README.md and docs/*.md: found, classified, checked, run.

tests/test_docs.py states the conventions and turns each block into a test.
By hand: ``.venv/bin/python -m tests._docs`` lists every block and what is done
with it, and counts the blocks; ``.venv/bin/python -m tests._docs docs/peach.md:13``
runs one (the session it is in) in a temporary directory and prints what happens.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import fcntl
import functools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"

# The info string of a fence says what the block is.
KINDS = {
    "sh": "command",
    "bash": "command",
    "shell": "command",
    "console": "command",
    "python": "python",
    "langshaw": "langshaw",
    "lsh": "langshaw",
    "toml": "toml",
    "json": "json",
    "": "output",
    "text": "output",
}

# Marker lines: comments at the top of a block (before anything else in it).
_KEYED = re.compile(r"#\s*(needs|slow|outline|session|env|file|excerpt of)\s*:?\s+(.+?)\s*$")
_EXIT = re.compile(r"#\s*exits with status (\d+)\b")
_BARE = re.compile(r"#\s*(runs until Ctrl-C|continues the example above|synopsis)\b")
SKIPS = ("needs", "slow", "outline")

SECONDS = 60.0  # the most one test may take (a session: all its steps)
READY_SECONDS = 30.0  # for a server to say it listens
STOP_SECONDS = 10.0  # for a server to exit once interrupted
# A server interrupted by Ctrl-C ends with 0 or 130; a Python script, killed by
# the KeyboardInterrupt it does not catch, with -SIGINT.
INTERRUPTED = (0, 130, -signal.SIGINT)
TRACEBACK = "Traceback (most recent call last)"


def docs() -> list[str]:
    """The documents, relative to the repository's root."""
    return ["README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")))]


@dataclass(frozen=True)
class Block:
    doc: str  # "docs/peach.md"
    line: int  # the line of its opening fence
    info: str  # the info string's first word
    lines: tuple[str, ...]  # the body, without the fence's indentation
    markers: tuple[tuple[str, str], ...]

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def kind(self) -> str:
        return KINDS.get(self.info, "unknown")

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    @property
    def body(self) -> list[str]:
        """The lines after the markers."""
        return list(self.lines[len(self.markers) :])

    def marker(self, name: str) -> str | None:
        return next((value for key, value in self.markers if key == name), None)

    @property
    def skip(self) -> str | None:
        """Why the block is not run, as its marker says."""
        for key in SKIPS:
            value = self.marker(key)
            if value is not None:
                return f"{key}: {value}"
        return None

    @property
    def server(self) -> bool:
        return self.marker("runs until Ctrl-C") is not None

    @property
    def exit_status(self) -> int:
        return int(self.marker("exits with status") or 0)


def parse_markers(lines: list[str]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for line in lines:
        line = line.strip()
        if keyed := _KEYED.fullmatch(line):
            found.append((keyed[1], keyed[2]))
        elif status := _EXIT.match(line):
            found.append(("exits with status", status[1]))
        elif bare := _BARE.match(line):
            found.append((bare[1], line))
        else:
            break
    return found


def blocks_of(doc: str, text: str | None = None) -> list[Block]:
    """Every fenced block of ``doc`` (```, or ~~~; indented ones too)."""
    if text is None:
        text = (ROOT / doc).read_text(encoding="utf-8")
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)", lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, info = opening.groups()
        end = i + 1
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError(f"{doc}:{i + 1}: a fence that is never closed")
        body = [line[len(indent) :] if line.startswith(indent) else line.lstrip()
                for line in lines[i + 1 : end]]
        markers = parse_markers(body) if KINDS.get(info) != "json" else []
        found.append(Block(doc, i + 1, info, tuple(body), tuple(markers)))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for doc in docs() for block in blocks_of(doc)]


# -- What is run: single blocks, and sessions ---------------------------------------


@dataclass
class Unit:
    """One test: a runnable block, or a session of blocks run together."""

    blocks: list[Block]

    @property
    def id(self) -> str:
        return self.blocks[0].id

    @property
    def skip(self) -> str | None:
        return next((b.skip for b in self.blocks if b.skip), None)


def runnable(block: Block) -> bool:
    return block.kind in ("command", "python") and block.marker("synopsis") is None


def units(blocks: list[Block] | None = None) -> list[Unit]:
    """The runnable blocks, one unit each, except that the blocks of one session (a
    ``# session: NAME`` marker, or ``# continues the example above``: the session
    of the doc's previous Python block) make one unit, with its TOML files (``# file:
    NAME``)."""
    blocks = all_blocks() if blocks is None else blocks
    sessions: dict[tuple[str, str], Unit] = {}
    last_python: dict[str, str] = {}
    for block in blocks:
        name = block.marker("session")
        if block.marker("continues the example above") is not None:
            if block.doc not in last_python:
                raise ValueError(f"{block.id}: continues no example above")
            name = last_python[block.doc]
        if name is None and runnable(block):
            name = block.id  # its own session, which a later block may continue
        if block.kind == "python" and name is not None:
            last_python[block.doc] = name
        if name is not None:
            sessions.setdefault((block.doc, name), Unit([])).blocks.append(block)
    return [unit for unit in sessions.values() if any(runnable(b) for b in unit.blocks)]


# -- Checks of the blocks that are not run ------------------------------------------


def check_langshaw(block: Block) -> str:
    """A complete protocol must be valid (schema paths are relative to protocols/),
    and equal to the shipped file of the same name if there is one; an excerpt
    (``# excerpt of FILE``) must be lines of FILE, in order; a fragment (starting
    with a clause keyword) must parse. Returns what was checked."""
    from langshaw import LangshawProtocol, LangshawValidationError

    source = block.marker("excerpt of")
    if source is not None:
        shipped = [line.rstrip() for line in (ROOT / source).read_text().splitlines()]
        position = 0
        for line in block.body:
            try:
                position = shipped.index(line.rstrip(), position) + 1
            except ValueError:
                raise AssertionError(f"{line.strip()!r} is not (there) in {source}") from None
        return f"an excerpt of {source}"
    first = next(line for line in block.lines if line.strip() and not line.startswith("#"))
    if first.split()[0].rstrip(":") in ("who", "what", "do", "sayso", "nono", "nogo"):
        # Under a name, a fragment may fail validation (no who, say), not syntax.
        with contextlib.suppress(LangshawValidationError):
            LangshawProtocol.parse("Fragment\n" + block.text, source=block.id, base=ROOT)
        return "a fragment that parses"
    protocol = LangshawProtocol.parse(block.text, source=block.id, base=ROOT / "protocols")
    shipped_files = {LangshawProtocol.load(p).name: p for p in (ROOT / "protocols").rglob("*.lsh")}
    if protocol.name in shipped_files:
        path = shipped_files[protocol.name]
        assert block.text == path.read_text(), (
            f"{protocol.name} differs from {path.relative_to(ROOT)}, which it shows"
        )
        return f"valid, and {path.relative_to(ROOT)} as shipped"
    return "valid"


def check_toml(block: Block) -> str:
    """Valid TOML; a scenario (``[scenario]``) is checked by parse_scenario, relative
    to protocols/patterns/; a SyncServer configuration whose every MAS names its
    protocols by build_config, relative to samples/ (an environment variable it
    names is set). Returns what was checked."""
    data = tomllib.loads(block.text)
    if "scenario" in data:
        from strabo.simulate import parse_scenario

        parse_scenario(block.text, source=block.id, base=ROOT / "protocols" / "patterns")
        return "a valid scenario"
    systems = data.get("mas")
    if systems and all("protocols" in mas for mas in systems.values()):
        from syncserver.config import build_config

        variables = re.findall(r'token_env\s*=\s*"([^"]+)"', block.text)
        environ = {name: f"{name.lower()}-value" for name in variables}
        build_config(data, base=ROOT / "samples", source=block.id, environ=environ,
                     text=block.text)
        return "a valid SyncServer configuration"
    return "valid TOML"


def check_json(block: Block) -> str:
    """Valid JSON; an attempt (``{"instances": [...]}``) must also be legal in a
    new enactment of a shipped protocol that has its actions."""
    data = json.loads(block.text)
    if not (isinstance(data, dict) and isinstance(data.get("instances"), list)):
        return "valid JSON"
    from langshaw import ActionInstance, LangshawProtocol, SocialState

    names = {instance["action"] for instance in data["instances"]}
    problems = []
    for path in sorted((ROOT / "protocols").rglob("*.lsh")):
        protocol = LangshawProtocol.load(path)
        if not names <= set(protocol.actions):
            continue
        instances = [ActionInstance(protocol.action(i["action"]), i["bindings"])
                     for i in data["instances"]]
        violation = SocialState(protocol).check(instances)
        if violation is None:
            return f"an attempt {protocol.name} accepts"
        problems.append(f"{protocol.name}: {violation}")
    raise AssertionError("no shipped protocol accepts this attempt: " + "; ".join(problems))


def command_lines(block: Block) -> list[str]:
    """The commands of a command block, one per logical line, comments left out (a
    synopsis is one command, whatever its lines)."""
    if block.marker("synopsis") is not None:
        return [" ".join(line.rstrip("\\") for line in block.body)]
    if block.info == "console":
        return [command for command, _ in console_steps(block)]
    return logical_lines(block.body)


def help_of(line: str) -> tuple[list[str], list[str]] | None:
    """For a command of this repository (``strabo VERB``, ``python bench/X.py``,
    ``python scripts/X.py``, ``python -m samples.X``): the command that prints its
    help, and the options the line gives it. None for any other command."""
    try:
        words = shlex.split(line.replace("\\\n", " "), comments=True)
    except ValueError:
        words = line.split()
    words = [w.strip("[]()|") for w in words]
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        words = words[1:]  # VARIABLE=value before the command
    if not words:
        return None
    program, rest = Path(words[0]).name, words[1:]
    if program == "strabo" and rest and not rest[0].startswith("-"):
        command, options = [str(BIN / "strabo"), rest[0]], rest[1:]
    elif program.startswith("python") and rest[:1] == ["-m"] and len(rest) > 1:
        if not rest[1].startswith("samples."):
            return None
        command, options = [sys_python(), "-m", rest[1]], rest[2:]
    elif program.startswith("python") and rest and rest[0].startswith(("bench/", "scripts/")):
        command, options = [sys_python(), rest[0]], rest[1:]
    else:
        return None
    return command, sorted({w.split("=")[0] for w in options if re.match(r"--?[A-Za-z]", w)})


@functools.cache
def help_text(command: tuple[str, ...]) -> str:
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, cwd=ROOT,
                            env=environment(), timeout=60, check=False)
    assert result.returncode == 0, f"`{' '.join(command)} --help`: {result.stdout}{result.stderr}"
    return result.stdout


def check_options(block: Block) -> str:
    """Every option the block gives a command of this repository is one that
    command's ``--help`` shows (for a synopsis, and for commands not run)."""
    checked = []
    for line in command_lines(block):
        found = help_of(line)
        if found is None:
            continue
        command, options = found
        name = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(command))
        script = command[2].replace(".", "/") + ".py" if command[1] == "-m" else command[-1]
        if command[0] != str(BIN / "strabo"):
            assert (ROOT / script).is_file(), f"{script}: no such file ({line!r})"
        if not options:
            checked.append(name)
            continue
        text = help_text(tuple(command))
        unknown = [o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])",
                                                          text)]
        assert not unknown, f"`{name} --help` knows no {', '.join(unknown)} ({line!r})"
        checked.append(f"{name} ({len(options)} options)")
    return "options of " + ", ".join(checked) if checked else "no command of this repository"


def check_syntax(block: Block) -> str:
    """A skipped example must still be Python (top-level await allowed; an outline
    need not), a skipped command still shell syntax."""
    if block.kind == "python" and block.marker("outline") is None:
        compile(textwrap.dedent("\n".join(block.body)), block.id, "exec",
                flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        return "Python syntax"
    if block.kind == "command" and block.marker("synopsis") is None:
        script = "\n".join(command_lines(block) if block.info == "console" else block.body)
        result = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True,
                                check=False)
        assert result.returncode == 0, result.stderr
        return "shell syntax"
    return "nothing"


# -- Running -------------------------------------------------------------------------


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a reader has after activating the venv, and no more: no API
    keys, no proxies, no PYTHONPATH (unless a ``# env:`` marker gives one)."""
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_", "COV_")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(dropped)
        and not k.endswith(("_API_KEY", "_BASE_URL", "_TOKEN"))
        and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(BIN.parent)
    env["PYTHONUNBUFFERED"] = "1"  # so that a server's first line is seen when printed
    env.update(extra or {})
    return env


def env_marker(block: Block) -> dict[str, str]:
    value = block.marker("env") or ""
    return dict(pair.split("=", 1) for pair in value.split("(")[0].split() if "=" in pair)


def mirror(directory: Path) -> Path:
    """A working copy of the repository's root for one test: a link to each of
    its entries, so that what a command writes (a database, a report) stays here."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") and entry.name != ".venv":
            continue
        if not (directory / entry.name).exists():
            (directory / entry.name).symlink_to(entry)
    return directory


# Runs a Python example as `python example.py` would, except that top-level
# `await` and `async with` are allowed, as in `python -m asyncio`.
PYTHON_RUNNER = """\
import ast, asyncio, inspect, os, sys
path = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(path))
with open(path, encoding="utf-8") as f:
    code = compile(f.read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
namespace = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
if code.co_flags & inspect.CO_COROUTINE:
    asyncio.run(eval(code, namespace))
else:
    exec(code, namespace)
"""


def python_program(blocks: list[Block]) -> str:
    """Consecutive examples joined into one program, each at its line in the doc (a
    traceback's line numbers are the doc's)."""
    lines: list[str] = []
    for block in blocks:
        lines += [""] * (block.line - len(lines))
        lines += list(block.lines)
    return "\n".join(lines) + "\n"


def console_steps(block: Block) -> list[tuple[str, str]]:
    """(command, the output the doc shows for it) for each ``$ `` line."""
    steps: list[tuple[str, list[str]]] = []
    continued = False
    for line in block.body:
        if line.startswith("$ "):
            steps.append((line[2:], []))
            continued = line.endswith("\\")
        elif continued:
            steps[-1] = (steps[-1][0] + "\n" + line, steps[-1][1])
            continued = line.endswith("\\")
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"{block.id}: output before the first command: {line!r}")
    return [(command, "\n".join(output)) for command, output in steps]


def matches(expected: str, actual: str, whole: bool = True) -> bool:
    """Whether ``actual`` is what the doc shows, ``...`` standing for any text
    (within a line or across lines); trailing spaces do not count."""
    actual = "\n".join(line.rstrip() for line in actual.strip("\n").splitlines())
    expected = "\n".join(line.rstrip() for line in expected.strip("\n").splitlines())
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    return re.match(pattern + (r"\Z" if whole else ""), actual, re.S) is not None


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    command: str
    python: bool = False

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Runner:
    """Runs one unit in ``directory`` (a mirror of the repository's root), printing
    what it does; raises AssertionError on the first failure."""

    directory: Path
    out: IO[str] = field(default_factory=lambda: sys.stdout)
    deadline: float = field(default_factory=lambda: time.monotonic() + SECONDS)
    processes: list[Process] = field(default_factory=list)
    servers: list[Process] = field(default_factory=list)
    count: int = 0

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def left(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"out of time: the test may take {SECONDS:.0f} s")
        return remaining

    def start(self, name: str, argv: list[str], env: dict[str, str], command: str,
              python: bool = False) -> Process:
        self.count += 1
        log = self.directory.parent / f"output-{self.count}.txt"
        with open(log, "wb") as sink:
            popen = subprocess.Popen(
                argv, cwd=self.directory, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
            )
        process = Process(name, popen, log, command, python)
        self.processes.append(process)
        return process

    def finish(self, process: Process) -> tuple[int, str]:
        """Wait for a command to end; on time out, kill it and fail."""
        try:
            status = process.popen.wait(timeout=self.left())
        except subprocess.TimeoutExpired:
            kill(process)
            raise AssertionError(
                f"{process.name}: still running after {SECONDS:.0f} s (a hang?); "
                f"its output:\n{process.output()}"
            ) from None
        return status, process.output()

    def shell(self, name: str, script: str, env: dict[str, str]) -> tuple[int, str]:
        self.say(f"$ {script}" if "\n" not in script else f"$ bash -c {script!r}")
        process = self.start(name, ["bash", "-e", "-o", "pipefail", "-c", script], env, script)
        status, output = self.finish(process)
        self.say(textwrap.indent(output, "  ") + f"  (exit status {status})")
        return status, output

    def serve(self, name: str, command: str, env: dict[str, str], python: bool = False,
              argv: list[str] | None = None) -> Process:
        """Start a command that runs until Ctrl-C; return once it is ready: it has
        printed a line, and every loopback port it names (an option ``--port N``,
        ``--...-port N``, or a URL in its command or its output) answers."""
        self.say(f"$ {command}   (in the background, until Ctrl-C)")
        process = self.start(name, argv or ["bash", "-c", f"exec {command}"], env, command,
                             python)
        until = time.monotonic() + min(READY_SECONDS, self.left())
        while True:
            output = process.output()
            if process.popen.poll() is not None:
                raise AssertionError(
                    f"{name}: exited ({process.popen.returncode}) before it was ready:\n{output}"
                )
            if output.strip() and all(answers(port) for port in ports(command + output)):
                self.say(textwrap.indent(output, "  ").rstrip() + "\n  (ready)")
                self.servers.append(process)
                return process
            if time.monotonic() > until:
                raise AssertionError(f"{name}: not ready after {READY_SECONDS:.0f} s:\n{output}")
            time.sleep(0.05)

    def interrupt(self, process: Process) -> tuple[int, str]:
        """Ctrl-C; the process must exit in time, and cleanly."""
        before = process.output()
        if process.popen.poll() is not None:
            raise AssertionError(
                f"{process.name}: exited ({process.popen.returncode}) before Ctrl-C:\n{before}"
            )
        process.popen.send_signal(signal.SIGINT)
        try:
            status = process.popen.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            kill(process)
            raise AssertionError(
                f"{process.name}: still running {STOP_SECONDS:.0f} s after Ctrl-C:\n"
                f"{process.output()}"
            ) from None
        output = process.output()
        self.say(f"  {process.name}: Ctrl-C: exit status {status}")
        assert TRACEBACK not in before, f"{process.name}: a traceback:\n{before}"
        assert status in INTERRUPTED, (
            f"{process.name}: exit status {status} after Ctrl-C (expected 0 or 130):\n{output}"
        )
        if not process.python:
            assert TRACEBACK not in output, f"{process.name}: a traceback:\n{output}"
        return status, output

    def close(self) -> None:
        for process in self.processes:
            kill(process)

    # The kinds of steps ----------------------------------------------------------

    def run(self, unit: Unit) -> None:
        for block in unit.blocks:
            if block.kind == "toml" and block.marker("file"):
                path = self.directory / (block.marker("file") or "")
                path.write_text(block.text)
                self.say(f"wrote {path.name} ({block.id})")
        background = [b for b in unit.blocks if b.server]
        foreground = [b for b in unit.blocks if runnable(b) and not b.server]
        servers: list[tuple[Process, Block, str]] = []
        for block in background:
            servers += [(p, block, expected) for p, expected in self.background(block)]
        programs: list[list[Block]] = []
        for block in foreground:
            if block.kind == "python" and programs and programs[-1][-1].kind == "python":
                programs[-1].append(block)
            else:
                programs.append([block])
        for group in programs:
            if group[0].kind == "python":
                self.python(group)
            else:
                self.command(group[0])
        for process, block, expected in reversed(servers):
            _, output = self.interrupt(process)
            if expected and not matches(expected, output, whole=False):
                raise AssertionError(
                    f"{block.id}: {process.name} printed\n{output}\nnot what the doc shows:\n"
                    f"{expected}"
                )

    def background(self, block: Block) -> list[tuple[Process, str]]:
        """A block that runs until Ctrl-C: each of its commands is a process of its
        own (as in a shell of its own), started in order, each once the one before
        is ready."""
        env = environment(env_marker(block))
        if block.kind == "python":
            path = self.script([block])
            argv = [sys_python(), "-c", PYTHON_RUNNER, str(path)]
            return [(self.serve(block.id, f"python {path.name}", env, True, argv), "")]
        if block.info == "console":
            steps = console_steps(block)
        else:
            steps = [(line, "") for line in logical_lines(block.body)]
        return [(self.serve(f"{block.id} `{command}`", command, env), expected)
                for command, expected in steps]

    def command(self, block: Block) -> None:
        env = environment(env_marker(block))
        if block.info != "console":
            status, output = self.shell(block.id, "\n".join(block.body), env)
            if status != block.exit_status:
                raise AssertionError(
                    f"{block.id}: exit status {status}, the doc says {block.exit_status}"
                )
            assert TRACEBACK not in output, f"{block.id}: a traceback"
            return
        steps = console_steps(block)
        for number, (command, expected) in enumerate(steps, 1):
            status, output = self.shell(block.id, command, env)
            wanted = block.exit_status if number == len(steps) else 0
            if status != wanted:
                raise AssertionError(f"{block.id}: `{command}`: exit status {status}, "
                                     f"the doc says {wanted}")
            assert TRACEBACK not in output, f"{block.id}: `{command}`: a traceback"
            if expected.strip() and not matches(expected, output):
                raise AssertionError(
                    f"{block.id}: `{command}` printed\n{output}\nnot what the doc shows:\n"
                    f"{expected}"
                )

    def script(self, blocks: list[Block]) -> Path:
        folder = self.directory.parent / "examples"
        folder.mkdir(exist_ok=True)
        path = folder / f"example_{blocks[0].line}.py"
        path.write_text(python_program(blocks))
        return path

    def python(self, blocks: list[Block]) -> None:
        """Consecutive examples of a unit, as one program: ``python example.py`` from
        the repository's root (the example's own folder is elsewhere)."""
        path = self.script(blocks)
        env = environment({k: v for b in blocks for k, v in env_marker(b).items()})
        names = ", ".join(b.id for b in blocks)
        self.say(f"$ python {path.name}   ({names})")
        process = self.start(names, [sys_python(), "-c", PYTHON_RUNNER, str(path)], env,
                             str(path), python=True)
        status, output = self.finish(process)
        self.say(textwrap.indent(output, "  ") + f"  (exit status {status})")
        if status != 0:
            raise AssertionError(f"{names}: exit status {status}:\n{output}")
        assert TRACEBACK not in output, f"{names}: a traceback (logged?):\n{output}"


def sys_python() -> str:
    return str(BIN / "python")


def logical_lines(lines: list[str]) -> list[str]:
    """Commands, one per logical line (joined at a trailing backslash), without
    comments and blank lines."""
    commands: list[str] = []
    current = ""
    for line in lines:
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        current += line + "\n"
        if not line.endswith("\\"):
            commands.append(current.strip())
            current = ""
    if current:
        commands.append(current.strip())
    return commands


def ports(text: str) -> set[int]:
    found = {int(p) for p in re.findall(r"--(?:[\w-]+-)?port[ =](\d+)", text)}
    found |= {int(p) for p in re.findall(r"https?://(?:127\.0\.0\.1|localhost):(\d+)", text)}
    return found - {0}


def answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def kill(process: Process) -> None:
    if process.popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.popen.pid, signal.SIGKILL)
        process.popen.wait()


def _die_with_parent() -> None:
    """In a child: SIGKILL when the runner dies (Linux), so nothing outlives a test."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# -- Isolation: a network of its own -------------------------------------------------


def _loopback_up() -> None:
    """Bring up ``lo`` in a new network namespace (what ``ip link set lo up`` does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, request))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP


UNSHARE = ["unshare", "--user", "--map-root-user", "--net"]


@functools.cache
def private_network() -> bool:
    """Whether each test can have a network namespace of its own (Linux, with
    unprivileged user namespaces): then the fixed ports the docs use (8300, 8182,
    8765...) collide neither with each other nor with anything else on the machine."""
    if not shutil.which("unshare"):
        return False
    probe = [*UNSHARE, sys.executable, "-c",
             "from tests._docs import _loopback_up; _loopback_up()"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(probe, cwd=ROOT, capture_output=True, timeout=20).returncode == 0
    return False


@contextlib.contextmanager
def port_lock() -> Iterator[None]:
    """Without private networks: one test at a time uses the docs' fixed ports."""
    with open(Path(tempfile.gettempdir()) / "strabo-test-docs-ports.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def uses_ports(unit: Unit) -> bool:
    """Whether a unit may listen on a fixed port: a server, or an example naming an
    address or a directory of agents (each with its url)."""
    return any(b.server or re.search(r"127\.0\.0\.1:\d|mas\.toml", b.text) for b in unit.blocks)


def run_isolated(unit: Unit, directory: Path) -> subprocess.CompletedProcess[str]:
    """Run ``unit`` in a child process (in a network namespace of its own when the
    machine allows it); its output says what happened, its status whether it passed."""
    argv = [sys.executable, "-m", "tests._docs", unit.id, str(directory)]
    isolated = private_network()
    if isolated:
        argv = [*UNSHARE, *argv, "--private-network"]
    lock = port_lock() if not isolated and uses_ports(unit) else contextlib.nullcontext()
    with lock:
        child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = child.communicate(timeout=SECONDS + 30)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            out, _ = child.communicate()
            out += f"\n(killed: the runner took more than {SECONDS + 30:.0f} s)"
        except BaseException:  # Ctrl-C in pytest: nothing of the test outlives it
            os.killpg(child.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(argv, child.returncode, out, "")


def census(blocks: list[Block] | None = None) -> dict[str, dict[str, int]]:
    """How many blocks of each kind are run, checked, not run (a marker says why),
    or output samples."""
    blocks = all_blocks() if blocks is None else blocks
    skipped = {b.id for unit in units(blocks) if unit.skip for b in unit.blocks}
    counts: dict[str, dict[str, int]] = {}
    for block in blocks:
        if block.kind == "output":
            fate = "output sample"
        elif block.id in skipped:
            fate = "not run (marker)"
        elif runnable(block):
            fate = "run"
        else:
            fate = "checked"
        kind = f"{block.kind} ({block.info})" if block.kind == "command" else block.kind
        counts.setdefault(kind, {}).setdefault(fate, 0)
        counts[kind][fate] += 1
    return counts


def main(argv: list[str]) -> int:
    if not argv:
        for unit in units():
            names = " + ".join(b.id for b in unit.blocks)
            print(f"{names}: {unit.skip or 'run'}")
        print()
        counts = census()
        for kind, fates in sorted(counts.items()):
            print(f"{kind:20} " + ", ".join(f"{n} {fate}" for fate, n in sorted(fates.items())))
        print(f"{sum(sum(f.values()) for f in counts.values())} blocks")
        return 0
    wanted, *rest = argv
    found = [u for u in units() if wanted in (b.id for b in u.blocks)]
    if not found:
        print(f"no runnable block at {wanted} (see: python -m tests._docs)", file=sys.stderr)
        return 2
    [unit] = found
    if "--private-network" in rest:
        _loopback_up()
        rest.remove("--private-network")
    directory = Path(rest[0]) if rest else Path(tempfile.mkdtemp(prefix="strabo-docs-"))
    runner = Runner(mirror(directory / "repo"))
    try:
        runner.run(unit)
    except AssertionError as error:
        for process in runner.processes:
            if process.command in (p.command for p in runner.servers):
                runner.say(f"the output of {process.name}:")
                runner.say(textwrap.indent(process.output(), "  "))
        runner.say(f"FAILED: {error}")
        return 1
    finally:
        runner.close()
    runner.say("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
