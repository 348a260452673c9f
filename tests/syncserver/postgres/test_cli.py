"""``strabo syncserver --db postgresql://...`` as a command."""

from __future__ import annotations

from pathlib import Path

import pytest

from strabo.serving import free_port
from syncserver import load_config
from tests.conftest import PROTOCOLS
from tests.processes import LISTENING, spawn, strabo


def config_file(directory: Path, server: str = "") -> Path:
    path = directory / "mas.toml"
    path.write_text(
        f"{server}\n"
        f'[mas.shop]\nprotocols = ["{PROTOCOLS / "atomic-ucp.lsh"}"]\n'
        '[mas.shop.agents.platform]\nroles = ["Platform"]\ntoken = "p-token"\n'
    )
    return path


async def test_a_postgresql_url_serves_and_hides_its_password(tmp_path: Path, pg_url: str) -> None:
    # The test cluster trusts every local user: any password is accepted, and must
    # not be printed.
    url = pg_url.replace("postgresql://strabo@", "postgresql://strabo:hunter2@")
    config = config_file(tmp_path)
    async with spawn(
        strabo("syncserver", "--config", str(config), "--db", url, "--port", "0"), "syncserver"
    ) as server:
        await server.line_matching(LISTENING)
        [line] = server.lines
        assert "store postgresql://strabo:***@127.0.0.1:" in line and "hunter2" not in line


async def test_an_unreachable_database_is_refused_at_start(tmp_path: Path) -> None:
    url = f"postgresql://strabo:hunter2@127.0.0.1:{free_port()}/nothing"
    async with spawn(
        strabo("syncserver", "--config", str(config_file(tmp_path)), "--db", url, "--port", "0"),
        "syncserver",
    ) as server:
        status, out, err = await server.finish()
    assert status == 2 and "listening" not in out
    assert "cannot open the database" in err and "hunter2" not in err, err


@pytest.mark.parametrize(
    ("url", "fault"),
    [
        ("postgresql://x:hunter2@[::1", "Invalid IPv6 URL"),
        ("postgresql://u:hunter2@127.0.0.1:notaport/db", "'notaport'"),
        ("postgresql://u:hunter2/x@127.0.0.1:5432/db", "percent-encode the password's /"),
    ],
    ids=["unclosed-bracket", "port-not-a-number", "unencoded-slash"],
)
async def test_a_malformed_url_is_one_line_and_exit_2(tmp_path: Path, url: str, fault: str) -> None:
    async with spawn(
        strabo("syncserver", "--config", str(config_file(tmp_path)), "--db", url, "--port", "0"),
        "syncserver",
    ) as server:
        status, out, err = await server.finish()
    assert status == 2 and "listening" not in out, (status, err)
    [line] = err.strip().splitlines()
    assert line.startswith("strabo syncserver: postgresql://") and ":***@" in line, line
    assert "not a valid PostgreSQL URL" in line and fault in line and "hunter2" not in line, line


def test_a_url_in_the_configuration_is_not_a_path(tmp_path: Path) -> None:
    url = "postgresql://strabo@db.internal:5432/strabo?synchronous_commit=off"
    config = load_config(config_file(tmp_path, f'[server]\ndb = "{url}"'))
    assert config.db == url
    assert load_config(config_file(tmp_path, '[server]\ndb = "log.db"')).db == str(
        (tmp_path / "log.db").resolve()
    )
