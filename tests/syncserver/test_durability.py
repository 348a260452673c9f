"""Acknowledged actions survive kill -9; agents reconnect and go on."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from langshaw import ActionInstance
from peach import FeasibleAction, PeachAdapter, SyncExecutor
from syncserver import SyncServer
from syncserver.errors import ServiceError
from tests.conftest import PROTOCOLS, SIMPLE_CREATE, load
from tests.harness import until
from tests.processes import LISTENING, spawn, strabo

SIMPLE = load("atomic-ucp.lsh")
CREATE = SIMPLE_CREATE


def write_config(tmp_path) -> Any:
    config = tmp_path / "mas.toml"
    config.write_text(
        f'[mas.shop]\nprotocols = ["{PROTOCOLS / "atomic-ucp.lsh"}"]\n'
        '[mas.shop.agents.platform]\nroles = ["Platform"]\ntoken = "p-token"\n'
        '[mas.shop.agents.business]\nroles = ["Business"]\ntoken = "b-token"\n'
    )
    return config


async def test_in_process_restart_keeps_the_log(tmp_path) -> None:
    db = tmp_path / "log.db"
    agents = {"platform": ["Platform"]}
    async with SyncServer.embedded([SIMPLE], agents, store=str(db)) as server:
        agent = server.agent("default", "platform")
        for i in range(5):
            await server.attempt(
                "default",
                "SimpleUCP",
                agent,
                [ActionInstance(SIMPLE.action("Create"), {"cid": f"c{i}", **CREATE})],
            )
    async with SyncServer.embedded([SIMPLE], agents, store=str(db)) as again:
        ledger = again.ledgers[("default", "SimpleUCP")]
        assert ledger.committed_seq == 5 and len(ledger.state) == 5
        batch = await again.attempt(
            "default",
            "SimpleUCP",
            again.agent("default", "platform"),
            [ActionInstance(SIMPLE.action("Create"), {"cid": "c5", **CREATE})],
        )
        assert batch.seq == 6


async def test_kill_9_loses_no_acknowledged_action_and_agents_resume(tmp_path) -> None:
    config, db = write_config(tmp_path), tmp_path / "shop.db"
    async with spawn(
        strabo("syncserver", "--config", str(config), "--db", str(db), "--port", "0"), "syncserver"
    ) as first:
        url = (await first.line_matching(LISTENING)).group(1)
        port = url.rsplit(":", 1)[1]
        platform = PeachAdapter(
            "platform", SIMPLE, "Platform", SyncExecutor(url, "p-token", mas="shop")
        )
        completable: set[str] = set()
        changed = asyncio.Event()

        @platform.on_enabled("Complete")
        async def on_complete(fa: FeasibleAction) -> None:
            completable.add(fa.keys["cid"])
            changed.set()

        await platform.start()
        acknowledged = []
        for _ in range(20):
            [done] = await platform.attempt([platform.initiating()[0].bind(**CREATE)])
            acknowledged.append(done["cid"])
        first.kill()  # SIGKILL: no shutdown, no flush
        await first.proc.wait()

        # Same port, same file. The platform's stream reconnects by itself.
        async with spawn(
            strabo("syncserver", "--config", str(config), "--db", str(db), "--port", port),
            "syncserver",
        ) as second:
            await second.line_matching(LISTENING)
            await platform.sync()
            assert sorted(platform.enactments()) == sorted((c,) for c in acknowledged)
            [late] = await platform.attempt([platform.initiating()[0].bind(**CREATE)])
            # A business process starting now answers every checkout still waiting.
            business = PeachAdapter(
                "business",
                SIMPLE,
                "Business",
                SyncExecutor(url.rsplit(":", 1)[0] + ":" + port, "b-token", mas="shop"),
            )

            @business.on_enabled("Created")
            async def answer(fa: FeasibleAction) -> None:
                await business.attempt(
                    [
                        fa.bind(
                            id=f"chk-{fa.keys['cid']}",
                            totals=[],
                            payment={},
                        )
                    ]
                )

            async with business:
                await until(lambda: len(completable) == 21, changed, seconds=30)
            assert completable == {*acknowledged, late["cid"]}
            await platform.stop()


async def test_a_value_no_log_can_hold_is_refused_in_process_too(tmp_path) -> None:
    """The SyncServer refuses NaN and the infinities however the attempt comes
    (over HTTP the body check says so first): written, the log would not be JSON."""

    async with SyncServer.embedded(
        [SIMPLE], {"platform": ["Platform"]}, store=str(tmp_path / "log.db")
    ) as server:
        agent = server.agent("default", "platform")
        bad = ActionInstance(
            SIMPLE.action("Create"), {**CREATE, "cid": "c0", "line_items": [math.nan]}
        )
        with pytest.raises(ServiceError) as caught:
            await server.attempt("default", "SimpleUCP", agent, [bad])
        assert (caught.value.status, caught.value.code) == (400, "bad-json")
        assert "instances[0].bindings.line_items[0] is nan" in caught.value.message
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == 0
