"""``strabo inspect URL`` against a real SyncServer and a real agent endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from peach.inspection import describe, inspection_app
from peach.roles import MustAlways, Responsibility, RoleSpec
from strabo.cli import main
from syncserver.serving import free_port, serve
from tests.conftest import load
from tests.harness import Harness
from tests.processes import ROOT

SIMPLE = load("atomic-ucp.lsh")
AGENTS = {"platform": ["Platform"], "business": ["Business"]}
ITEMS = [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}]


async def inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, ["inspect", *args])
    out, err = capsys.readouterr()
    return code, out, err


async def test_a_syncserver_lists_its_agents(capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness("http", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        async with platform:  # holds an event stream from start() on
            [create] = platform.initiating()
            await platform.attempt([create.bind(line_items=ITEMS, currency="USD", payment_pref={})])
            assert h.url is not None
            code, out, err = await inspect(capsys, h.url, "--token", "business-token")
            assert code == 0, err
            lines = out.splitlines()
            assert lines[0] == f"SyncServer {h.url}, MAS default: 2 agents, 1 connected"
            assert lines[1].split() == ["AGENT", "ROLES", "CONNECTED", "STREAMS", "LAST", "ATTEMPT"]
            business, platform_row = lines[2], lines[3]
            assert business.split()[:4] == ["business", "SimpleUCP:", "Business", "no"]
            assert platform_row.split()[:4] == ["platform", "SimpleUCP:", "Platform", "since"]
            assert "SimpleUCP x1" in platform_row and platform_row.rstrip().endswith("Z")
            code, out, _ = await inspect(capsys, h.url, "--token", "business-token", "--json")
            assert code == 0 and json.loads(out)["mas"] == "default"
            code, _, err = await inspect(capsys, h.url)
            assert code == 1 and "give the token of an agent of MAS 'default'" in err
            assert err.rstrip().endswith("to list its agents (or --mas NAME for another MAS)")
            code, _, err = await inspect(capsys, h.url, "--mas", "ucp")  # --mas given: no hint
            assert code == 1 and err.rstrip().endswith("of MAS 'ucp' (--token or STRABO_TOKEN) "
                                                       "to list its agents")
            code, _, err = await inspect(capsys, h.url, "--token", "wrong")
            assert code == 1 and "answered 401" in err
            code, _, err = await inspect(capsys, h.url, "--token", "business-token", "--mas", "x")
            assert code == 1 and "answered 404" in err and "'x'" in err
            assert err.rstrip().endswith("(give the MAS your agent belongs to with --mas NAME: "
                                         "a [mas.NAME] table of the server's configuration)")


async def test_an_agent_shows_its_role(capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness("local", [SIMPLE], AGENTS) as h:
        platform = h.adapter("platform", "Platform")
        spent = {"usd": 120}
        platform.adopt(
            RoleSpec(
                "Platform",
                goal="Buy roses for the shop",
                domain="florist",
                responsibilities=[
                    Responsibility(
                        "Budget",
                        "stay within the month's budget",
                        actions=("Create", "Complete"),
                        must_always=(
                            MustAlways(
                                "under-100", "spend at most 100 USD", lambda a: spent["usd"] <= 100
                            ),
                        ),
                    )
                ],
                state=lambda: {"spent": spent["usd"]},
            )
        )
        app = inspection_app(lambda: describe("platform", [platform], {"model": "coded"}))
        async with platform, serve(app) as url:
            code, out, err = await inspect(capsys, url)  # the base URL: /inspect is found
    assert code == 0, err
    assert out.splitlines()[:2] == ["agent platform", "  model: coded"]
    assert "  role Platform in SimpleUCP (MAS default), running" in out
    assert "    goal: Buy roses for the shop" in out
    assert "    responsibility Budget: stay within the month's budget (Create, Complete)" in out
    assert "      must always under-100: spend at most 100 USD [BREACHED]" in out
    assert "    enabled now (1): Create (new enactment)" in out
    assert '    state: {"spent": 120}' in out


async def test_neither_kind_nor_reachable(capsys: pytest.CaptureFixture[str]) -> None:
    async def other(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"no"})

    async with serve(other) as url:
        code, _, err = await inspect(capsys, url)
    assert code == 1 and "neither a SyncServer" in err
    code, _, err = await inspect(capsys, f"http://127.0.0.1:{free_port()}")
    assert code == 1 and "cannot read" in err
    code, _, err = await inspect(capsys, "ftp://x")
    assert code == 2 and "not an http://" in err


async def test_an_llm_agents_own_fields_read_as_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What an LLM agent adds beside its roles (peach.llm.agent's inspect) is
    printed like the roles' fields, not as raw JSON."""
    extra = {
        "decider": "LLM (anthropic, claude-x)",
        "pending_decisions": [],
        "deciding": False,
        "waiting_for": ["Created"],
        "tools": ["Complete", "Create"],
        "counters": {"decisions": 3, "llm calls": 4, "failed calls": 0, "tokens": 1200},
        "plan": {"next": ["Complete"]},  # deeper than a flat table: JSON, as before
    }
    app = inspection_app(lambda: describe("platform", [], extra))
    async with serve(app) as url:
        code, out, err = await inspect(capsys, url)
    assert code == 0, err
    assert out.splitlines() == [
        "agent platform",
        "  decider: LLM (anthropic, claude-x)",
        "  pending_decisions: -",
        "  deciding: no",
        "  waiting_for: Created",
        "  tools: Complete, Create",
        "  counters: decisions 3, llm calls 4, failed calls 0, tokens 1200",
        '  plan: {"next": ["Complete"]}',
    ]


@pytest.mark.parametrize("as_json", [True, False])
async def test_a_reader_that_stops_early_gets_no_traceback(as_json: bool) -> None:
    """``strabo inspect URL --json | head -1``: the reader leaves before the
    output is written. Here its end of the pipe is closed before strabo starts,
    so every write fails, as the last ones do under head."""
    app = inspection_app(lambda: describe("platform", [], {"notes": ["x" * 100] * 2000}))
    read, write = os.pipe()
    os.close(read)  # nobody will read: writing raises BrokenPipeError
    async with serve(app) as url:
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "strabo.cli", "inspect", url,
                *(["--json"] if as_json else []),
                stdout=write, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
            )
        finally:
            os.close(write)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert err.decode() == ""  # no traceback, no "Exception ignored" at exit
    assert proc.returncode == 141  # the reader went away: cut short (128 + SIGPIPE)
