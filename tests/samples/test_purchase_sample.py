"""The Purchase sample: three agents, three processes, one SyncServer process."""

from __future__ import annotations

import signal

from tests.conftest import ROOT
from tests.processes import LISTENING, module, spawn, strabo


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
