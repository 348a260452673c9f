"""``strabo demo``'s rough edges, each once found by reading its help and its
output: no examples in the help, a malformed URL taken for a failed checkout, a
merchant's silence said as ``(ReadTimeout: )``, a checkout that ended ``Failed``
(or a Platform profile nobody can read) waited out to the whole ``--timeout``,
and a long event id pushing the trace out of its columns."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from strabo import demo, serve
from strabo.serving import free_port
from strabo.ucp.profile import platform_profile
from tests.conftest import ROOT

# A demo that is not over in this many seconds waited for what could not come
# (the demo itself is given far more: the test fails here, not at its timeout).
PROMPT = 15.0


def strabo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strabo.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_the_help_gives_examples() -> None:
    out = strabo("demo", "--help").stdout
    examples = out.split("Examples:\n", 1)[1].split("\n\n", 1)[0]
    commands = [line.split("#")[0].strip() for line in examples.splitlines()]
    assert commands == ["strabo demo", "strabo demo --transport mcp",
                        "strabo demo --merchant http://127.0.0.1:8182",
                        "strabo demo --executor peer"]
    assert out.index("Examples:") < out.index("options:")  # as syncserver's: before options


@pytest.mark.parametrize(("args", "says"), [
    (["--merchant", "notaurl"],
     "--merchant 'notaurl' is not an http:// or https:// URL (e.g. http://127.0.0.1:8182)"),
    (["--merchant", "http://127.0.0.1:port"], "--merchant 'http://127.0.0.1:port' is not a URL"),
    (["--platform-profile", "ftp://example.com/p"],
     "--platform-profile 'ftp://example.com/p' is not an http:// or https:// URL"),
])
def test_a_malformed_url_is_a_usage_error(args: list[str], says: str) -> None:
    done = strabo("demo", *args)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # refused before anything starts
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"strabo demo: {says}"), done.stderr


async def test_a_malformed_url_is_a_value_error_of_the_function() -> None:
    with pytest.raises(ValueError, match="--merchant 'notaurl' is not"):
        await demo.demo("atomic", None, "notaurl", 5.0)


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    """A server that takes connections and never answers on them."""
    hush = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await hush.wait()
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        hush.set()
        server.close()
        await server.wait_closed()


async def test_a_merchant_that_never_answers_is_said_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    async with silent_server() as url:
        code = await demo.demo("atomic", None, url, 1.0)
    err = capsys.readouterr().err
    assert code == 1
    assert err == (f"strabo demo: the merchant at {url} did not answer GET "
                   "/.well-known/ucp within 1 s\n")


async def test_a_failed_checkout_ends_the_demo_at_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The tool dialect forced on the bundled merchant: its 400 ends Create
    ``Failed``, an ending; the order stage must not be waited for."""
    code = await asyncio.wait_for(
        demo.demo("atomic", None, None, 4 * PROMPT, transport="a2a", a2a_dialect="tool",
                  ucp_version="2026-04-08"), PROMPT)
    out, err = capsys.readouterr()
    assert code == 1
    assert re.search(r"#2 +Failed +by business", out), out
    assert "within" not in err, err  # nothing timed out
    assert err.endswith("The checkout did not complete:\n  the checkout ended Failed: no action "
                        "'update_customer_details' (actions: create_checkout, get_checkout, "
                        "update_checkout, complete_checkout, cancel_checkout, "
                        "add_to_checkout)\n"), err


async def test_a_platform_profile_nobody_answers_at_ends_the_demo_at_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/profile"  # nothing listens there
    code = await asyncio.wait_for(
        demo.demo("atomic", None, None, 4 * PROMPT, platform_profile=url), PROMPT)
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"strabo demo: no Platform profile answers at {url} (ConnectError")
    assert len(err.splitlines()) == 1


async def _profile_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A published Platform profile (what the proxy would serve)."""
    import json

    body = json.dumps(platform_profile("2026-01-11")).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


async def test_a_published_platform_profile_does_not_wait_for_webhooks(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The merchant reads the published profile, which cannot name this run's
    webhook receiver: the checkout completes, and no order stage waits for
    webhooks that cannot come."""
    async with serve(_profile_app, lifespan="off") as base:
        code = await asyncio.wait_for(
            demo.demo("atomic", None, None, 4 * PROMPT,
                      platform_profile=base + "/ucp-profile"), PROMPT)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "UCPOrder" not in out and "Summary" in out


async def test_the_trace_keeps_its_columns(capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled merchant's shipment event id is a whole UUID, the complete
    path a session id and more: neither pushes the next column."""
    code = await demo.demo("atomic", None, None, 30.0)
    out = capsys.readouterr().out
    assert code == 0, out
    seen = [line for line in out.splitlines() if line.endswith(" seen by the Platform")]
    assert [line.split()[0] for line in seen] == ["Placed", "Shipped", "Delivered"], out
    assert len({line.index(" seen by the Platform") for line in seen}) == 1, out
    shipped = next(line for line in seen if line.split()[0] == "Shipped")
    assert "(shipped evt_" in shipped and "...)" in shipped  # cut, not dropped
    http = [line for line in out.splitlines() if line.startswith("       HTTP ")]
    assert any("/complete " in line for line in http), out
    columns = {re.search(r" (\d{3})  [\d.]+ ms$", line).start() for line in http}  # type: ignore[union-attr]
    assert len(columns) == 1, out
