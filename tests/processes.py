"""Real processes for tests: the strabo command and sample agents."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Process:
    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self.proc = proc
        self.name = name
        self.lines: list[str] = []

    async def line_matching(self, pattern: str, seconds: float = 30.0) -> re.Match[str]:
        """Read stdout until a line matches ``pattern`` (the process says it is ready)."""
        assert self.proc.stdout is not None

        async def read() -> re.Match[str]:
            while True:
                raw = await self.proc.stdout.readline()  # type: ignore[union-attr]
                if not raw:
                    error = await self.proc.stderr.read() if self.proc.stderr else b""
                    raise AssertionError(
                        f"{self.name} exited ({await self.proc.wait()}) before printing "
                        f"{pattern!r}; stdout: {self.lines}; stderr: {error.decode()[-2000:]}"
                    )
                line = raw.decode().rstrip("\n")
                self.lines.append(line)
                match = re.search(pattern, line)
                if match:
                    return match

        return await asyncio.wait_for(read(), seconds)

    async def finish(self, seconds: float = 60.0) -> tuple[int, str, str]:
        out, err = await asyncio.wait_for(self.proc.communicate(), seconds)
        return self.proc.returncode or 0, "\n".join(self.lines) + out.decode(), err.decode()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)


@contextlib.asynccontextmanager
async def spawn(
    args: Sequence[str], name: str, env: dict[str, str] | None = None
) -> AsyncIterator[Process]:
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    process = Process(proc, name)
    try:
        yield process
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def strabo(*args: str) -> list[str]:
    return [sys.executable, "-m", "strabo.cli", *args]


def module(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", name, *args]


async def syncserver(config: Path, db: Path, port: int = 0, *extra: str):
    """Start ``strabo syncserver``; returns the context manager and a URL getter."""
    return spawn(
        strabo(
            "syncserver",
            "--config",
            str(config),
            "--db",
            str(db),
            "--port",
            str(port),
            "--log-level",
            "warning",
            *extra,
        ),
        "syncserver",
    )


LISTENING = r"listening on (http://\S+)"
