"""``strabo agent``: usage errors (as a real process for some), whole runs in-process against
a real SyncServer over HTTP with the scripted model on loopback (tests/peach/llm/fake.py),
through either provider."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest

from langshaw import LangshawProtocol
from peach import PeachAdapter, SyncExecutor
from peach.llm import PROVIDERS
from peach.llm import cli as _cli
from samples.llm import counterparts, scenarios
from strabo.cli import build_parser
from strabo.cli import main as strabo_main
from tests.conftest import PROTOCOLS, ROOT
from tests.harness import harness

PURCHASE = str(PROTOCOLS / "purchase.lsh")


KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY",
        "OPENAI_BASE_URL")


def strabo_agent(*args: str, key: str | None = "sk-test") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    if key:
        env["ANTHROPIC_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "strabo.cli", "agent", *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
    )


def test_help_explains_the_command():
    result = strabo_agent("--help")
    assert result.returncode == 0
    for text in ("--protocol FILE", "--role ROLE", "--goal", "--syncserver", "--embedded",
                 "--model", "--transcript", "ANTHROPIC_API_KEY", "docs/llm-agents.md",
                 "--provider {anthropic,openai}", "--base-url", "OPENAI_API_KEY",
                 "http://127.0.0.1:11434/v1", "Ollama", "vLLM", "llama.cpp",
                 "--success ACTION", "judged on the protocol's log"):
        assert text in result.stdout, text
    assert PROVIDERS == _cli.PROVIDER_CHOICES


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x", "--embedded"],
         None),  # no key: checked first
        (["--protocol", PURCHASE, "--goal", "x", "--embedded"],
         "give at least one --protocol FILE --role ROLE pair"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--role", "Seller", "--goal", "x",
          "--embedded"], "1 --protocol but 2 --role: give them in pairs"),
        (["--protocol", PURCHASE, "--role", "Byer", "--goal", "x", "--embedded"],
         "Purchase (" + PURCHASE + ") has no role 'Byer' (roles: Buyer, Seller, Shipper)"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--embedded"],
         "give the agent a goal"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x"],
         "say where the social state lives"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x", "--syncserver", "http://h"],
         "--syncserver needs --token"),
        (["--protocol", "nope.lsh", "--role", "Buyer", "--goal", "x", "--embedded"],
         "cannot read nope.lsh: no such file"),
        (["--protocol", "purchse", "--role", "Buyer", "--goal", "x", "--embedded"],
         "cannot read purchse: no such file, nor a bundled protocol of that name"),
        (["--protocol", "purchase", "--role", "Byer", "--goal", "x", "--embedded"],
         "Purchase ("),  # the bundled protocol, found by name
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x", "--embedded",
          "--peer", "seller"], "--peer 'seller': write NAME=ROLE"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x", "--embedded",
          "--transcript", "/nonexistent/t.json"],
         "--transcript /nonexistent/t.json: the folder /nonexistent does not exist"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x", "--embedded",
          "--max-calls", "0"], "argument --max-calls: 0: must be a positive whole number"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x", "--embedded",
          "--approve-timeout", "0"], "argument --approve-timeout: 0"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x", "--embedded",
          "--provider", "openai"], "--provider openai needs --model"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x", "--embedded",
          "--provider", "openai", "--model", "m"], "no OpenAI API key: set OPENAI_API_KEY, "
         "or give the base URL of an OpenAI-compatible server"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x", "--syncserver", "notaurl",
          "--token", "t"], "--syncserver 'notaurl' is not an http(s) URL"),
        (["--protocol", PURCHASE, "--role", "Buyer", "--goal", "x", "--embedded",
          "--peer", "x=Nope"], "Nope"),
    ],
)
def test_usage_errors_are_explained(args, message, monkeypatch, capsys):
    # In this process (a process each cost 0.5 s of CPU): what the command
    # prints and returns is the same; --help and a busy port run it as a process.
    for name in KEYS:
        monkeypatch.delenv(name, raising=False)
    if message is not None:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.chdir(ROOT)
    try:
        status = strabo_main(["agent", *args])
    except SystemExit as stopped:  # argparse's errors
        status = stopped.code
    out, err = capsys.readouterr()
    assert status == 2
    assert err.startswith("strabo agent: ")
    assert "Traceback" not in err and out == ""
    expected = message or "no Anthropic API key: set ANTHROPIC_API_KEY"
    assert expected in err


def test_a_busy_port_is_a_clear_error():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = strabo_agent("--protocol", PURCHASE, "--role", "Buyer", "--goal", "x",
                              "--embedded", "--port", str(port))
    assert result.returncode == 2
    assert f"strabo agent: cannot serve on port {port}: Address already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_invalid_protocol_file_is_reported_with_its_position(tmp_path):
    bad = tmp_path / "bad.lsh"
    bad.write_text("Bad\nwho A\nwhat k key, Done\ndo\n  A : Done(k, ghost)\n")
    result = strabo_agent("--protocol", str(bad), "--role", "A", "--goal", "x", "--embedded")
    assert result.returncode == 2
    assert f"{bad} is not a valid protocol" in result.stderr
    assert f"{bad}:5:" in result.stderr


def parse(*args: str):
    return build_parser().parse_args(["agent", *args])


def coded_peers(protocol: LangshawProtocol, url: str, tokens: dict[str, str],
                mas: str = "default") -> list[PeachAdapter]:
    adapters = []
    for name, prices in (("cheap", counterparts.CHEAP), ("dear", counterparts.DEAR)):
        executor = SyncExecutor(url, token=tokens[name], mas=mas)
        adapters.append(counterparts.seller(PeachAdapter(name, protocol, "Seller", executor),
                                            prices))
    executor = SyncExecutor(url, token=tokens["shipper"], mas=mas)
    adapters.append(counterparts.shipper(PeachAdapter("shipper", protocol, "Shipper", executor)))
    return adapters


async def test_agent_joins_a_running_syncserver(model, tmp_path, capsys):
    model.script("purchase")
    protocol = LangshawProtocol.load(PURCHASE)
    agents = {"buyer": ["Buyer"], "cheap": ["Seller"], "dear": ["Seller"], "shipper": ["Shipper"]}
    transcript = tmp_path / "t.json"
    async with harness("http", [protocol], agents) as h:
        assert h.url is not None
        peers = coded_peers(protocol, h.url, {a: f"{a}-token" for a in agents})
        async with contextlib.AsyncExitStack() as stack:
            for peer in peers:
                await stack.enter_async_context(peer)
            args = parse("--protocol", PURCHASE, "--role", "Buyer", "--goal",
                         scenarios.PURCHASE_GOAL, "--syncserver", h.url, "--token",
                         "buyer-token", "--transcript", str(transcript))
            status = await _cli.run_agent(args, client=model.client())
    out = capsys.readouterr().out
    assert status == 0, (out, model.unanswered)
    assert "strabo agent: done: bought a pen from cheap for 4" in out
    assert "Accept" in out and "by you" in out
    assert json.loads(transcript.read_text())[-1]["report"].startswith("done")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_agent_with_an_embedded_syncserver_that_peers_join(model, provider, capsys,
                                                                  monkeypatch):
    """The whole command, the client made as the command makes it: a local
    OpenAI-compatible server needs only --base-url (no key)."""
    for variable in KEYS:
        monkeypatch.delenv(variable, raising=False)
    model.script("purchase")
    protocol = LangshawProtocol.load(PURCHASE)
    peers: list[PeachAdapter] = []

    async def ready(url: str) -> None:
        tokens = {a: f"{a}-secret" for a in ("cheap", "dear", "shipper")}
        peers.extend(coded_peers(protocol, url, tokens, mas="purchase"))
        for peer in peers:
            await peer.start()

    if provider == "anthropic":
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        endpoint = ["--base-url", model.url]
    else:
        endpoint = ["--provider", "openai", "--base-url", f"{model.url}/v1"]
    args = parse("--protocol", PURCHASE, "--role", "Buyer", "--goal", scenarios.PURCHASE_GOAL,
                 "--embedded", "--mas", "purchase", "--peer", "cheap=Seller",
                 "--peer", "dear=Seller", "--peer", "shipper=Shipper", *endpoint,
                 "--model", "test-model")
    try:
        status = await _cli.run_agent(args, on_ready=ready)
    finally:
        for peer in peers:
            await peer.stop()
    out = capsys.readouterr().out
    assert status == 0, (out, model.unanswered)
    assert "SyncServer at http://127.0.0.1:" in out
    assert "peer cheap (Seller): token cheap-secret" in out
    assert {b["model"] for b in model.bodies} == {"test-model"}
    assert len(model.bodies) == 3


def test_default_peers_play_the_other_roles():
    purchase = LangshawProtocol.load(PURCHASE)
    logistics = LangshawProtocol.load(PROTOCOLS / "logistics.lsh")
    assert _cli._agents("buyer", [(purchase, "Buyer")], []) == {
        "buyer": ["Buyer"], "seller": ["Seller"], "shipper": ["Shipper"]}
    both = _cli._agents("me", [(purchase, "Buyer"), (logistics, "Merchant")], [])
    assert both["me"] == ["Purchase:Buyer", "Logistics:Merchant"]
    assert both["packer"] == ["Logistics:Packer"]


async def test_inspect_port_serves_the_running_agent(model, capsys, monkeypatch):
    import httpx

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    model.script("purchase")
    protocol = LangshawProtocol.load(PURCHASE)
    peers: list[PeachAdapter] = []
    seen: dict[str, object] = {}

    async def ready(url: str) -> None:
        printed = capsys.readouterr().out
        [line] = [x for x in printed.splitlines() if "inspection at" in x]
        where = line.split("inspection at ", 1)[1]
        async with httpx.AsyncClient() as client:
            seen.update((await client.get(where)).json())
        tokens = {a: f"{a}-secret" for a in ("cheap", "dear", "shipper")}
        peers.extend(coded_peers(protocol, url, tokens, mas="purchase"))
        for peer in peers:
            await peer.start()

    args = parse("--protocol", PURCHASE, "--role", "Buyer", "--goal", scenarios.PURCHASE_GOAL,
                 "--embedded", "--mas", "purchase", "--peer", "cheap=Seller",
                 "--peer", "dear=Seller", "--peer", "shipper=Shipper",
                 "--base-url", model.url, "--model", "test-model", "--inspect-port", "0")
    try:
        status = await _cli.run_agent(args, on_ready=ready)
    finally:
        for peer in peers:
            await peer.stop()
    assert status == 0, model.unanswered
    assert seen["kind"] == "strabo.agent" and seen["agent"] == "buyer"
    assert seen["decider"] == "LLM (anthropic, test-model)" and seen["status"] == "running"
    [role] = seen["roles"]  # type: ignore[misc]
    assert role["role"] == "Buyer" and role["protocol"] == "Purchase" and role["mas"] == "purchase"
    assert [a["action"] for a in role["enabled"]["actions"]] == ["RFQ"]
