"""``strabo merchant``: options, clean errors, and a real server from a subprocess."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys

import httpx

from strabo.cli import main


def test_help_lists_the_options(capsys):
    assert main(["merchant", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--host", "--port", "--catalog", "--log-level", "8182", "127.0.0.1"):
        assert option in out


def test_a_bad_catalog_is_one_line_on_stderr(tmp_path, capsys):
    path = tmp_path / "shop.json"
    path.write_text("not json")

    assert main(["merchant", "--catalog", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("strabo merchant: catalog ")
    assert "is not valid JSON" in err
    assert "Traceback" not in err


def test_a_port_in_use_is_one_line_on_stderr(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        assert main(["merchant", "--port", str(port)]) == 2

    err = capsys.readouterr().err
    expected = f"strabo merchant: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert err.strip() == expected


async def test_the_command_serves_and_prints_its_url():
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "strabo.cli", "merchant", "--port", "0", "--log-level", "warning",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        first = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        url = first.decode().split()[-1]
        assert first.decode().startswith("UCP merchant listening on http://127.0.0.1:")
        async with httpx.AsyncClient() as client:
            profile = (await client.get(f"{url}/.well-known/ucp")).json()
        assert profile["ucp"]["services"]["dev.ucp.shopping"]["rest"]["endpoint"] == url + "/"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), timeout=60)
    # Ctrl-C: a graceful stop, then 130 (tests/strabo/test_exit_and_files.py has the rest).
    assert process.returncode == 130
    assert b"Traceback" not in await process.stderr.read()
