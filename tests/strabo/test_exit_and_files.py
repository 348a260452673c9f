"""The long-running commands stop by one convention, and files that are not UTF-8
text are one-line errors: cases a review of the documented commands found.

Stopping (``strabo --help``, "stopping a server"): SIGTERM (``docker stop``,
systemd) and Ctrl-C both stop a server gracefully, then it exits 0 for SIGTERM
(a stop asked for) and 130 for Ctrl-C (interrupted, as every verb). ``strabo
mcp`` and ``strabo a2a`` exited 0 on Ctrl-C, and ``strabo merchant`` died of
SIGTERM (status 143: uvicorn raised it again after its shutdown). Each command
is a real process; the signal is sent once it says it is ready, which it says
only once its handlers are in place (else a SIGTERM just then would kill it).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from strabo.cli import main
from tests.conftest import ROOT

BINARY = b"\xff\xfe\x00 not text"
PURCHASE = ["--protocol", "purchase", "--role", "Buyer", "--embedded", "--mas", "purchase"]

# command -> (arguments, the stream that says it is ready, what it says then)
SERVERS = {
    "syncserver": (["syncserver", "--config", str(ROOT / "samples" / "purchase" / "mas.toml"),
                    "--db", "{db}", "--port", "0", "--log-level", "warning"],
                   "stdout", "listening on http://"),
    "merchant": (["merchant", "--port", "0", "--log-level", "warning"],
                 "stdout", "UCP merchant listening on http://"),
    "mcp over http": (["mcp", *PURCHASE, "--transport", "http"],
                      "stdout", "strabo mcp: Buyer of Purchase as buyer, at http://"),
    "a2a": (["a2a", *PURCHASE], "stdout", "strabo a2a: Buyer of Purchase as buyer, at http://"),
    # stdin a pipe, as when an MCP client starts it: read by the loop, so a stop is at once
    "mcp over stdio": (["mcp", *PURCHASE], "stderr",
                       "strabo mcp: Buyer of Purchase as buyer, over stdio"),
}


@contextlib.asynccontextmanager
async def _started(args: list[str], stream: str, ready: str) -> AsyncIterator[
        tuple[asyncio.subprocess.Process, dict[str, asyncio.Task[bytes]]]]:
    """``strabo ARGS``, once it has printed ``ready`` on ``stream``; yields the
    process and, by stream name, a task reading the rest of each (the other one
    read all along, so that it can never block on a full pipe). stdin stays
    open: over stdio, its end ends MCP."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "strabo.cli", *args, cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    streams = {"stdout": process.stdout, "stderr": process.stderr}
    lines = streams.pop(stream)
    rest = {name: asyncio.create_task(reader.read()) for name, reader in streams.items()}
    try:
        seen = []
        while ready not in (line := (await asyncio.wait_for(lines.readline(), 120)).decode()):
            seen.append(line)
            if not line:  # it ended first: say how, and what it printed
                await asyncio.wait_for(process.wait(), 120)
                other = b"".join([await task for task in rest.values()]).decode()
                raise AssertionError(f"strabo {args[0]} ended ({process.returncode}) before "
                                     f"{ready!r}:\n{''.join(seen)}{other}")
        rest[stream] = asyncio.create_task(lines.read())
        yield process, rest
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        for task in rest.values():
            task.cancel()


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("command", sorted(SERVERS))
async def test_a_server_stops_gracefully_with_the_documented_status(
    command: str, sig: int, status: int, tmp_path: Path
) -> None:
    args, stream, ready = SERVERS[command]
    args = [a.replace("{db}", str(tmp_path / "log.db")) for a in args]
    async with _started(args, stream, ready) as (process, rest):
        process.send_signal(sig)
        # 120 s: a safety net for a loaded machine; a stop takes well under a second.
        await asyncio.wait_for(process.wait(), 120)
        out, err = [(await asyncio.wait_for(rest[name], 120)).decode()
                    for name in ("stdout", "stderr")]
    assert process.returncode == status, out + err
    assert "Traceback" not in err, err
    if command in ("syncserver", "merchant"):  # they say so on stderr
        assert err.rstrip().endswith(f"strabo {command}: stopped"), err


def test_help_documents_how_a_server_stops() -> None:
    out = subprocess.run([sys.executable, "-m", "strabo.cli", "--help"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT).stdout
    assert "stopping a server (syncserver, merchant, mcp, a2a; mcp over stdio when its" in out
    assert "exits 0 (SIGTERM: a stop asked for) or 130 (Ctrl-C: interrupted)" in out


# Files that are not UTF-8 text ------------------------------------------------------


def test_a_catalog_that_is_not_text_is_a_catalog_error(tmp_path: Path) -> None:
    from strabo.merchant.catalog import CatalogError, load_catalog

    catalog = tmp_path / "catalog.json"
    catalog.write_bytes(BINARY)
    with pytest.raises(CatalogError) as raised:
        load_catalog(catalog)
    assert str(raised.value) == f"cannot read catalog {catalog}: not UTF-8 text"


def test_strabo_merchant_with_a_catalog_that_is_not_text_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_bytes(BINARY)
    assert main(["merchant", "--catalog", str(catalog)]) == 2
    err = capsys.readouterr().err
    assert err == f"strabo merchant: cannot read catalog {catalog}: not UTF-8 text\n"


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_mandate_that_is_not_text_is_a_mandate_error(suffix: str, tmp_path: Path) -> None:
    from langshaw import LangshawProtocol
    from syncserver.mandate import MandateError, read_mandate
    from tests.conftest import PROTOCOLS

    mandate = tmp_path / f"mandate{suffix}"
    mandate.write_bytes(BINARY)
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    with pytest.raises(MandateError) as raised:
        read_mandate(mandate, [protocol], {"Purchase": ["Buyer"]})
    assert raised.value.problems == [f"{mandate}: not UTF-8 text"]


# bench/loc.py -------------------------------------------------------------------------


def _loc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/loc.py", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_loc_has_a_help_that_says_what_it_counts() -> None:
    done = _loc("--help")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("usage: bench/loc.py [-h] FILE [FILE ...]")
    text = " ".join(done.stdout.split())
    assert "the lines holding code, not blank lines, not comments, not docstrings" in text


def test_loc_counts_lines_holding_code_in_the_format_the_readme_quotes(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        '"""A module docstring,\n'
        'over two lines."""\n'
        "\n"
        "# a comment\n"
        "x = 1  # code and a comment: counts\n"
        "def f(a,\n"
        "      b):\n"
        '    """A docstring."""\n'
        "    return a + b\n"
    )
    done = _loc(str(source), str(source))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"    4  {source}\n" * 2


def test_loc_without_files_or_with_a_bad_one_is_no_traceback(tmp_path: Path) -> None:
    done = _loc()
    assert done.returncode == 2
    assert done.stderr.endswith("error: the following arguments are required: FILE\n")
    binary = tmp_path / "b.py"
    binary.write_bytes(BINARY)
    done = _loc(str(tmp_path / "missing.py"), str(binary), str(ROOT / "bench" / "loc.py"))
    assert done.returncode == 1
    assert done.stderr == (f"bench/loc.py: {tmp_path / 'missing.py'}: No such file or "
                           f"directory\nbench/loc.py: {binary}: not UTF-8 text\n")
    assert done.stdout.endswith(f"  {ROOT / 'bench' / 'loc.py'}\n")  # the others still count
