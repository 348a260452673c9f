"""One exit-status convention for every verb (0 done, 1 failed, 2 usage, 130
interrupted), and a one-line message, never a traceback, for what a user can do
wrong: a bad option, a reader that goes away (``| head``), Ctrl-C, a URL that is
not what it should be. Each case here was once a traceback or a wrong status."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import pytest

from strabo.cli import main
from syncserver.serving import serve
from tests.conftest import ROOT

Scope = MutableMapping[str, Any]


def strabo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strabo.cli", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )


def test_help_documents_the_exit_statuses() -> None:
    out = strabo("--help").stdout
    for line in ("0    done", "1    the work failed", "2    bad usage or configuration",
                 "130  interrupted (Ctrl-C)", "a traceback is a bug"):
        assert line in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["demo", "--bogus"], "strabo demo: unrecognized arguments: --bogus "
         "(see 'strabo demo --help')"),
        (["syncserver", "--config", "x.toml", "--port", "70000"],
         "strabo syncserver: argument --port: 70000: a port is 0 (any free one) to 65535"),
        (["demo", "--timeout", "0"], "strabo demo: argument --timeout: 0: must be a positive"),
        (["demo", "--timeout", "nan"], "strabo demo: argument --timeout: nan: must be a positive"),
        (["merchant", "--port", "-5"], "strabo merchant: argument --port: -5: a port is"),
        (["simulate", "market", "--rounds", "0"],
         "strabo simulate: argument --rounds: 0: must be a positive whole number"),
        (["syncserver", "--config", "x.toml", "--max-body", "ten"],
         "strabo syncserver: argument --max-body: 'ten' is not a whole number"),
        (["--bogus"], "strabo: unrecognized arguments: --bogus (see 'strabo --help')"),
    ],
)
def test_a_usage_error_is_one_line_and_status_2(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(says) and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "args",
    [
        ["protocols"],
        ["check", "--verify", "--json", "-q", "atomic-ucp"],
        ["protocols", "atomic-ucp"],
        ["simulate", "market", "--out", "{tmp}"],
        ["demo"],
    ],
)
def test_a_reader_that_goes_away_ends_the_command_quietly(args: list[str], tmp_path: Any) -> None:
    """``strabo ... | head -1``: the reader closes the pipe after one line; the
    command ends at once, with nothing on stderr (the demo used to wait out its
    30 s timeout and print a handler's traceback), and status 141 (128 +
    SIGPIPE: cut short), or 0 when all of it was written before the reader
    left; which one is a race here, and pinned in test_closed_pipe.py."""
    args = [a.replace("{tmp}", str(tmp_path / "report")) for a in args]
    process = subprocess.Popen(
        [sys.executable, "-m", "strabo.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline()  # one line, then the reader leaves
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) in (0, 141), err
    # No traceback, no "Exception ignored" at exit (simulate's progress bar is
    # on stderr, and stays).
    assert "Traceback" not in err and "Exception ignored" not in err, err


def test_a_name_that_is_neither_a_file_nor_bundled_gets_a_suggestion() -> None:
    done = strabo("check", "atomic_ucp")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "strabo check: no file 'atomic_ucp', nor a bundled protocol of that name (did you "
        "mean 'atomic-ucp'? 'strabo protocols' lists them)"
    )


async def _not_ucp(scope: Scope, receive: Callable[[], Awaitable[Any]],
                   send: Callable[[Any], Awaitable[None]]) -> None:
    """A web server that is not a UCP merchant: HTML pages, 404 for the profile."""
    status = 404 if scope["path"] == "/.well-known/ucp" else 200
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/html")]})
    await send({"type": "http.response.body", "body": b"<html><h1>Not here</h1></html>"})


async def test_a_merchant_url_that_is_not_a_ucp_merchant_is_one_line_and_status_2() -> None:
    async with serve(_not_ucp, lifespan="off") as url:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "strabo.cli", "demo", "--merchant", url, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 2
    assert err.decode() == (
        f"strabo demo: {url} is not a UCP merchant: GET /.well-known/ucp answered 404 Not "
        "Found (a UCP merchant publishes its profile there)\n"
    )


class _SlowMerchant:
    """The bundled merchant, with every POST held until the test lets it go: a
    checkout that is under way when Ctrl-C comes."""

    def __init__(self) -> None:
        from strabo.merchant import create_app

        self.app = create_app()
        self.release = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            await self.release.wait()
        await self.app(scope, receive, send)


@pytest.fixture
async def slow_merchant() -> AsyncIterator[str]:
    merchant = _SlowMerchant()
    async with serve(merchant) as url:
        yield url
        merchant.release.set()


@pytest.mark.parametrize("executor", ["syncserver", "peer"])
async def test_ctrl_c_during_a_checkout_is_status_130_with_one_word(
    slow_merchant: str, executor: str
) -> None:
    """Interrupted while the proxy waits on the merchant: the command says so and
    exits 130, without the agents' reconnect warnings (the embedded servers
    stopped under them) and without waiting out the handlers' grace."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "strabo.cli", "demo", "--merchant", slow_merchant,
        "--executor", executor, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    while b"Create" not in await asyncio.wait_for(process.stdout.readline(), 120):
        pass  # the checkout is under way: its POST is held
    process.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 130
    assert err.decode() == "strabo demo: interrupted\n"


def test_an_interrupted_verb_says_so(capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from strabo import _protocols_cli

    def interrupted(args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_protocols_cli, "run", interrupted)
    assert main(["protocols"]) == 130
    assert capsys.readouterr().err == "strabo protocols: interrupted\n"
