"""What happens while an action's answer is on its way is not lost to
``wait_event``: the answer's ``seq`` is the action's own sequence number, so
waiting after it reports what others did meanwhile (a Quote that came during
the RFQ's after hook, here), which waiting after the enactment's ``last_seq``
(already past the Quote) would never report."""

from __future__ import annotations

import asyncio

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from peach.llm import Hooks
from peach.mcp import RoleServer
from samples.llm import counterparts
from syncserver import SyncServer
from tests.conftest import PROTOCOLS


async def test_waiting_after_the_actions_seq_reports_what_came_meanwhile():
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    agents = {"buyer": ["Buyer"], "seller": ["Seller"], "shipper": ["Shipper"]}
    async with SyncServer.embedded([protocol], agents) as server:
        seller = counterparts.seller(
            PeachAdapter("seller", protocol, "Seller", LocalExecutor(server)), {"pen": 4})
        buyer = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
        quoted = asyncio.Event()
        buyer.listeners.append(
            lambda batch, _: quoted.set() if any(
                e.instance.name == "Quote" for e in batch.entries) else None)
        hooks = Hooks()

        @hooks.after("RFQ")
        async def slow_answer(instance, error):  # the Quote lands before the answer leaves
            await asyncio.wait_for(quoted.wait(), 10)

        async with seller, RoleServer(buyer, hooks=hooks) as role:
            done = await role.call("RFQ", {"item": "pen", "budget": 10})
            assert done["enactment"]["last"] == "Quote by seller"  # it came meanwhile
            assert done["seq"] < done["enactment"]["last_seq"]
            got = await role.call("wait_event", {"after": done["seq"], "timeout": 5})
            assert not got["timed_out"]
            assert [e["action"] for e in got["events"] if e["kind"] == "action"] == ["Quote"]
            # What the seq prevents: after last_seq, the Quote is never reported.
            late = await role.call("wait_event", {"after": done["enactment"]["last_seq"],
                                                  "timeout": 0})
            assert late["timed_out"] and not late["events"]
