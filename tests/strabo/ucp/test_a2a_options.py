"""What a user can tell the Business proxy about an A2A merchant, and what it
works out on its own, against real servers on loopback: the bundled merchant,
and a tool-style agent answering with Google's recorded shapes (the fake of
test_a2a_google).

- ``a2a_dialect`` (``strabo demo --a2a-dialect``) forces the dialect: a
  tool-style agent whose card reads as strabo's (no skills) is checked out with
  all the same, with a warning naming what the card said; "auto" is the card's;
  a bad value is a ValueError, and on the command line a one-line usage error.
- A profile whose agent card URL names ``localhost`` at another port (written
  for a local run, served at another loopback address) is read at the address
  the profile was read from, as the card's own ``url`` is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from peach import LocalExecutor
from strabo import serve
from strabo.cli import main
from strabo.demo import demo
from strabo.merchant import create_app, merchant_of
from strabo.ucp import versions
from strabo.ucp.a2a_tools import SESSION, TOOL
from strabo.ucp.a2a_transport import A2aCheckout, a2a_endpoint
from strabo.ucp.business_proxy import business_proxy
from strabo.ucp.buying import line_items_of
from strabo.ucp.platform_agent import platform_agent
from syncserver import SyncServer
from tests.conftest import load

from .test_a2a_google import BUYER, Agent, a2a_checkout, app_of, recorded
from .test_version_merchant import ROLES, Recorder, history

A2A = "/ucp/a2a"


@asynccontextmanager
async def tool_agent(*, card: dict[str, Any] | None = None,
                     profile: dict[str, Any] | None = None) -> AsyncIterator[Agent]:
    """The fake tool-style agent, serving ``card`` and ``profile`` (as given)
    in place of the recorded ones it would serve."""
    agent = Agent()

    def fixed(document: dict[str, Any]) -> Any:
        async def endpoint(request: Request) -> Response:
            return JSONResponse(document)
        return endpoint

    routes = [Route(path, fixed(doc)) for path, doc in (
        ("/.well-known/agent-card.json", card), ("/.well-known/ucp", profile)) if doc]
    try:
        async with serve(Starlette(routes=[*routes, Mount("", app_of(agent))])) as url:
            agent.url = url
            yield agent
    finally:
        agent.release.set()


def skill_less_card() -> dict[str, Any]:
    """Google's recorded card without its skills: it reads as strabo's dialect."""
    return {k: v for k, v in recorded("agent_card").items() if k != "skills"}


async def checkout(url: str, **options: Any) -> tuple[list[Any], Any]:
    """One SimpleUCP checkout over A2A with the merchant at ``url``, buying
    what Google's agent sells (for a bundled merchant, give ``buying={}``)."""
    buying = options.pop("buying", {"line_items": line_items_of("BISC-001"), "buyer": BUYER})
    return await a2a_checkout(url, buying, **options)


# --------------------------------------------------------------- the dialect


async def test_a_forced_dialect_overrules_a_card_that_reads_otherwise(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "strabo.ucp")
    async with tool_agent(card=skill_less_card()) as agent:
        seen, proxy = await checkout(agent.url, a2a_dialect=TOOL, ucp_version=versions.OLD)
    assert [i.name for i in seen] == ["Create", "Created", "Complete", "Completed"], seen
    assert agent.actions() == [["add_to_checkout"], ["update_customer_details"],
                               ["complete_checkout"]]
    assert (proxy._mcp.card_says, proxy._mcp.dialect) == (SESSION, TOOL)
    [warning] = [r.getMessage() for r in caplog.records if "forced" in r.getMessage()]
    assert "reads as the session dialect (it lists no skills)" in warning, warning
    assert "the tool dialect is forced (a2a_dialect): speaking tool" in warning, warning


async def test_auto_is_the_cards_and_the_card_agreeing_is_no_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "strabo.ucp")
    async with tool_agent(card=skill_less_card()) as agent:
        client = A2aCheckout(f"{agent.url}/.well-known/agent-card.json", versions.OLD,
                             dialect="auto")
        try:
            await client.send("get_checkout", "nowhere", None, {"Idempotency-Key": "k"})
        finally:
            await client.aclose()
        assert client.dialect == client.card_says == SESSION  # no skills: strabo's
    async with tool_agent() as agent:  # the recorded card: the tool dialect, as forced
        seen, proxy = await checkout(agent.url, a2a_dialect=TOOL, ucp_version=versions.OLD)
        assert seen[-1].name == "Completed" and proxy._mcp.card_says == TOOL
    assert not [r for r in caplog.records if "forced" in r.getMessage()]


async def test_the_bundled_merchant_with_its_dialect_forced() -> None:
    app = create_app(ucp_version=versions.NEW)
    sent: list[Any] = []
    async with serve(Recorder(app, sent)) as url:
        seen, proxy = await checkout(url, a2a_dialect=SESSION, buying={})
    assert proxy._mcp.dialect == proxy._mcp.card_says == SESSION
    assert [i.name for i in seen] == ["Create", "Created", "Complete", "Completed"], seen
    assert [o.id for o in merchant_of(app).orders()] == [seen[-1]["order"]["id"]]
    assert {path for _, path, _, _ in sent if path.startswith(("/checkout", A2A))} == {A2A}


async def test_the_tool_dialect_forced_on_the_bundled_merchant_fails_clearly(
        caplog: pytest.LogCaptureFixture) -> None:
    """Its card lists strabo's actions: forced all the same, with a warning; the
    merchant refuses the first tool it lacks, and that refusal is the reason."""
    caplog.set_level(logging.WARNING, "strabo.ucp")
    async with serve(create_app(ucp_version=versions.NEW)) as url:
        seen, _ = await checkout(url, a2a_dialect=TOOL, buying={})
    assert [i.name for i in seen] == ["Create", "Failed"], seen
    reason = seen[-1]["reason"]
    assert (reason["status"], reason["code"]) == (400, "unknown_action"), reason
    assert "no action 'update_customer_details'" in reason["message"], reason
    [warning] = [r.getMessage() for r in caplog.records if "forced" in r.getMessage()]
    assert "(an extension's params.actions lists create_checkout)" in warning, warning


def test_a_bad_dialect_is_refused_before_anything_runs() -> None:
    executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
    with pytest.raises(ValueError, match="must be one of auto, session, tool, not 'tools'"):
        business_proxy(executor, "http://127.0.0.1:9", transport="a2a", a2a_dialect="tools")
    with pytest.raises(ValueError, match="is for transport='a2a', not 'rest'"):
        business_proxy(executor, "http://127.0.0.1:9", a2a_dialect=TOOL)
    proxy = business_proxy(executor, "http://127.0.0.1:9", transport="a2a")
    assert proxy.a2a_dialect == "auto"
    with pytest.raises(ValueError, match="not 'Tool'"):
        proxy.a2a_dialect = "Tool"
    with pytest.raises(ValueError, match="not 'x'"):
        A2aCheckout("http://127.0.0.1:9/card", versions.OLD, dialect="x")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--a2a-dialect", "tools"], "strabo demo: argument --a2a-dialect: invalid choice: "
         "'tools' (choose from "),  # the choices, quoted or not by the Python version
        (["--a2a-dialect", "tool"], "strabo demo: --a2a-dialect is the dialect of an A2A "
         "agent: it goes with --transport a2a, not rest"),
        (["--transport", "mcp", "--a2a-dialect", "session"], "strabo demo: --a2a-dialect is "
         "the dialect of an A2A agent: it goes with --transport a2a, not mcp"),
    ],
)
def test_a_bad_dialect_on_the_command_line_is_one_line_and_status_2(
        args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(says) and err.count("\n") == 1, err


def test_the_demo_help_names_the_dialects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--a2a-dialect {auto,session,tool}" in out
    assert "default auto, as the agent card says" in out


async def test_the_demo_forces_the_dialect(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="goes with --transport a2a"):
        await demo("atomic", None, None, 30, a2a_dialect=TOOL)
    async with tool_agent(card=skill_less_card()) as agent:
        status = await demo("atomic", None, agent.url, 30, transport="a2a",
                            product="BISC-001", a2a_dialect=TOOL)
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "checkout over A2A, tool dialect (forced)" in out, out
    assert "(completed)" in out, out
    assert agent.actions()[0] == ["add_to_checkout"]


# ------------------------------------------------------------- the addresses


def test_a_profiles_card_url_is_rebased_by_the_cards_rule() -> None:
    old = {"ucp": {"services": {"dev.ucp.shopping": {"a2a": {
        "endpoint": "http://localhost:10999/.well-known/agent-card.json"}}}}}
    new = {"ucp": {"services": {"dev.ucp.shopping": [
        {"transport": "rest", "endpoint": "http://localhost:8182/"},
        {"transport": "a2a", "endpoint": "http://localhost:8182/ucp/a2a/card.json"}]}}}
    here = "http://127.0.0.1:4711"
    assert a2a_endpoint(old, here) == "http://127.0.0.1:4711/.well-known/agent-card.json"
    assert a2a_endpoint(new, here + "/") == "http://127.0.0.1:4711/ucp/a2a/card.json"
    assert a2a_endpoint(new) == "http://localhost:8182/ucp/a2a/card.json"  # nowhere given
    assert a2a_endpoint(new, "http://localhost:8182") == "http://localhost:8182/ucp/a2a/card.json"
    # an address is taken at its word; so is localhost in a profile read from elsewhere
    named = {"ucp": {"services": {"dev.ucp.shopping": {"a2a": {"endpoint": "http://10.1.2.3/c"}}}}}
    assert a2a_endpoint(named, here) == "http://10.1.2.3/c"
    assert a2a_endpoint(old, "https://shop.example") == (
        "http://localhost:10999/.well-known/agent-card.json")


async def test_a_profile_naming_localhost_elsewhere_is_followed_where_it_was_read() -> None:
    """Google's recorded profile as served (its card at localhost:10999), on
    another port: the card, and then the JSON-RPC endpoint, are found here."""
    async with tool_agent(profile=recorded("profile")) as agent:
        seen, _ = await checkout(agent.url, ucp_version=versions.OLD)
    assert [i.name for i in seen] == ["Create", "Created", "Complete", "Completed"], seen
    assert set(agent.posted) == {agent.url.removeprefix("http://")}


@pytest.mark.parametrize("version", [versions.OLD, versions.NEW])
async def test_the_bundled_merchant_written_for_another_port(version: str) -> None:
    """``strabo merchant --base-url http://localhost:1`` served elsewhere on
    loopback: its profile's card and the card's ``url`` name localhost:1."""
    app = create_app(ucp_version=version, base_url="http://localhost:1")
    sent: list[Any] = []
    async with serve(Recorder(app, sent)) as url:
        seen, proxy = await checkout(url, buying={})
    assert [i.name for i in seen] == ["Create", "Created", "Complete", "Completed"], seen
    assert proxy._mcp.card_url == url + A2A + "/.well-known/agent-card.json"
    assert proxy._mcp.endpoint == url + A2A
    assert len([p for _, p, _, _ in sent if p == A2A]) == proxy._mcp.calls >= 2


async def test_the_bundled_merchant_written_for_another_port_over_mcp() -> None:
    """The profile's MCP endpoint names localhost:1 too: it is read where the
    profile was, by the same rule as the agent card."""
    app = create_app(ucp_version=versions.NEW, base_url="http://localhost:1")
    sent: list[Any] = []
    async with serve(Recorder(app, sent)) as url:
        executor = LocalExecutor(SyncServer.embedded([load("atomic-ucp.lsh")], ROLES))
        proxy = business_proxy(executor, url, transport="mcp")
        platform, done = platform_agent(executor)
        async with proxy, platform:
            await asyncio.wait_for(done.wait(), 30)
            await platform.drain()
        seen = history(platform)
    assert [i.name for i in seen] == ["Create", "Created", "Complete", "Completed"], seen
    assert proxy._mcp is None or proxy._mcp.endpoint.startswith(url), proxy._mcp
    assert any(p.startswith("/ucp/mcp") for _, p, _, _ in sent), sent
