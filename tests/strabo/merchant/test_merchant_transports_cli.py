"""``strabo merchant`` says what it serves: its help names each transport (REST,
MCP, A2A), the UCP versions each is served in and its paths, which must be the
paths the merchant serves; and when it starts, it prints the URL of each
transport it does serve, every one of which answers."""

from __future__ import annotations

import asyncio
import signal
import sys

import httpx
import pytest

from strabo.cli import main
from strabo.merchant import _cli, _discovery


def test_the_help_paths_are_the_served_ones() -> None:
    assert _cli.PATHS == {"mcp": _discovery.MCP_PATH, "a2a": _discovery.A2A_PATH,
                          "card": _discovery.A2A_CARD_PATH}


def test_the_help_names_the_transports_versions_and_paths(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["merchant", "--help"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")
             and line.split() and line.split()[0] in ("REST", "MCP", "A2A")}
    assert set(lines) == {"REST", "MCP", "A2A"}, out
    assert "/checkout-sessions" in lines["REST"] and "both versions" in lines["REST"]
    assert _discovery.MCP_PATH in lines["MCP"] and "2026-04-08 only" in lines["MCP"]
    assert _discovery.A2A_PATH in lines["A2A"]
    text = " ".join(out.split())
    assert (f"agent card at {_discovery.A2A_CARD_PATH}: both versions, when the A2A SDK is "
            "installed (pip install 'strabo[a2a]')") in text
    old, new = _cli.UCP_VERSIONS
    assert f"UCP versions: {old} (the default), or {new} with --ucp-version {new}" in text


def test_the_command_list_tells_the_merchant_from_the_role_servers(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``strabo --help``: one merchant, and the mcp and a2a verbs serve a role."""
    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "merchant run the bundled UCP merchant" in out
    assert "mcp serve one agent's role in a protocol as MCP tools" in out
    assert "a2a serve one agent's role in a protocol as an A2A agent" in out


@pytest.mark.parametrize("version", _cli.UCP_VERSIONS)
async def test_the_command_prints_each_transport_it_serves(version: str) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "strabo.cli", "merchant", "--port", "0", "--log-level", "warning",
        "--ucp-version", version,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    try:
        said: dict[str, str] = {}
        while "simulation" not in said:
            line = (await asyncio.wait_for(process.stdout.readline(), timeout=60)).decode()
            assert line, "the merchant ended before saying what it serves"
            if line.startswith("  "):
                label, _, rest = line.strip().partition(":")
                said[label.split()[0]] = rest.strip()
        url = said["discovery"].removesuffix("/.well-known/ucp")
        assert said["REST"].startswith(f"{url}/checkout-sessions (UCP {version}")
        assert ("MCP" in said) == (version == "2026-04-08"), said
        async with httpx.AsyncClient() as client:
            profile = (await client.get(said["discovery"])).json()
            card = await client.get(said["A2A"].split()[0])
        assert card.status_code == 200 and card.json()["url"] == url + _discovery.A2A_PATH
        for listed in ("A2A", "MCP"):  # each as the profile lists it
            assert listed not in said or said[listed].split()[0] in str(
                profile["ucp"]["services"]), profile
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), timeout=60)
    assert process.returncode in (0, 130)
    assert b"Traceback" not in await process.stderr.read()
