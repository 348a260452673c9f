"""The Purchase sample: three agents, three processes, one SyncServer process;
or three processes peer to peer, with no SyncServer."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from peach.peer import Directory
from strabo.serving import free_port
from tests.conftest import ROOT
from tests.processes import LISTENING, module, spawn, strabo

CONFIG = ROOT / "samples" / "purchase" / "mas.toml"


async def test_three_processes_complete_purchases(tmp_path) -> None:
    config = ROOT / "samples" / "purchase" / "mas.toml"
    async with spawn(
        strabo(
            "syncserver", "--config", str(config), "--db", str(tmp_path / "p.db"), "--port", "0"
        ),
        "syncserver",
    ) as server:
        url = (await server.line_matching(LISTENING)).group(1)
        async with (
            spawn(module("samples.purchase.seller", "--url", url), "seller") as seller,
            spawn(module("samples.purchase.shipper", "--url", url), "shipper") as shipper,
        ):
            await seller.line_matching("open for business")
            await shipper.line_matching("ready")
            async with spawn(
                module("samples.purchase.buyer", "--url", url, "--count", "3"), "buyer"
            ) as buyer:
                code, out, err = await buyer.finish(seconds=60)
            assert code == 0, err
            completed = [line for line in out.splitlines() if "complete:" in line]
            assert len(completed) == 3
            assert all(
                line.endswith("RFQ -> Quote -> Accept -> Ship -> Deliver -> Completed")
                for line in completed
            )
            for agent in (seller, shipper):
                agent.kill(signal.SIGTERM)
                code, _, err = await agent.finish()
                assert code == 0 and "Traceback" not in err, err


async def test_an_agent_with_a_wrong_token_says_so(tmp_path) -> None:
    config = ROOT / "samples" / "purchase" / "mas.toml"
    async with spawn(
        strabo("syncserver", "--config", str(config), "--db", ":memory:", "--port", "0"),
        "syncserver",
    ) as server:
        url = (await server.line_matching(LISTENING)).group(1)
        async with spawn(
            module("samples.purchase.buyer", "--url", url, "--token", "wrong"), "buyer"
        ) as buyer:
            code, _, err = await buyer.finish()
        assert code == 1
        assert "401 this token is not valid for 'purchase'" in err and "Traceback" not in err


def directory_on_free_ports(tmp_path: Path) -> Path:
    """The sample's mas.toml with each agent's url on a free loopback port (the
    shipped 8401-8403 may be taken where the tests run)."""
    text = re.sub(
        r'url = "http://127\.0\.0\.1:84\d\d"',
        lambda _: f'url = "http://127.0.0.1:{free_port()}"',
        CONFIG.read_text(),
    )
    path = tmp_path / "mas.toml"
    path.write_text(text)
    return path


def test_the_shipped_directory_gives_every_agent_a_url() -> None:
    directory = Directory.load(CONFIG)
    assert directory.mas == "purchase"
    assert {n: p.url for n, p in directory.peers.items()} == {
        "buyer": "http://127.0.0.1:8401",
        "seller": "http://127.0.0.1:8402",
        "shipper": "http://127.0.0.1:8403",
    }


async def test_three_processes_complete_purchases_peer_to_peer(tmp_path) -> None:
    """No SyncServer: each agent serves its own endpoint and keeps its own SQLite log."""
    config = str(directory_on_free_ports(tmp_path))

    def agent(name: str, *args: str) -> list[str]:
        store = str(tmp_path / f"{name}.db")
        peer = ("--peer", "--directory", config, "--store", store)
        return module(f"samples.purchase.{name}", *peer, *args)

    async with (
        spawn(agent("seller"), "seller") as seller,
        spawn(agent("shipper"), "shipper") as shipper,
    ):
        await seller.line_matching("open for business")
        await shipper.line_matching("ready")
        async with spawn(agent("buyer", "--count", "3"), "buyer") as buyer:
            code, out, err = await buyer.finish(seconds=60)
        assert code == 0, err
        assert "Traceback" not in err and "not acknowledged" not in err, err
        completed = [line for line in out.splitlines() if "complete:" in line]
        assert len(completed) == 3
        assert all(
            line.endswith("RFQ -> Quote -> Accept -> Ship -> Deliver -> Completed")
            for line in completed
        )
        for process in (seller, shipper):
            process.kill(signal.SIGTERM)
            code, _, err = await process.finish()
            assert code == 0 and "Traceback" not in err, err
    # Each agent kept its own log: no file of a SyncServer's anywhere.
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["buyer.db", "seller.db", "shipper.db"]


async def test_peer_mode_refuses_a_syncserver_url() -> None:
    async with spawn(
        module("samples.purchase.buyer", "--peer", "--url", "http://127.0.0.1:8300"), "buyer"
    ) as buyer:
        code, _, err = await buyer.finish()
    assert code == 2
    assert "--url and --token are for a SyncServer" in err and "Traceback" not in err
