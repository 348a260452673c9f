"""Attempt ids are each agent's own, and every 200 names instances in the log.

Regression: the server keyed attempts in flight by the attempt id alone, so an
agent that sent another's id was told its attempt succeeded while the attempt
vanished.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.hostile._support import SIMPLE, create, guarded

AGENTS = {"p1": ["Platform"], "p2": ["Platform"], "p3": ["Platform"]}
PATH = "/mas/default/protocols/SimpleUCP"


async def log_entries(client: httpx.AsyncClient) -> dict[int, list[dict[str, Any]]]:
    response = await client.get(f"{PATH}/log", params={"limit": 5000})
    return {e["seq"]: e["instances"] for e in response.json()["events"]}


@pytest.mark.parametrize(
    "options",
    [
        {"policy": "batched", "batch_window_ms": 5},
        {"policy": "instant"},
        {"policy": "instant", "synchronous": "full"},
        {"policy": "batched", "batch_window_ms": 5, "synchronous": "full"},
    ],
    ids=["batched", "instant", "instant-full", "batched-full"],
)
async def test_shared_ids_across_agents_never_lose_an_attempt(tmp_path, options) -> None:
    store = str(tmp_path / "log.db") if "synchronous" in options else ":memory:"
    async with guarded([SIMPLE], AGENTS, store=store, **options) as (_, url):
        clients = {
            a: httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {a}-token"})
            for a in AGENTS
        }
        try:

            async def send(agent: str, n: int) -> tuple[str, int, httpx.Response]:
                body = {"instances": [create(f"{agent}-{n}")], "attempt_id": f"id-{n}"}
                return agent, n, await clients[agent].post(f"{PATH}/attempts", json=body)

            answers = await asyncio.gather(
                *(send(agent, n) for n in range(50) for agent in AGENTS)
            )
            log = await log_entries(clients["p1"])
        finally:
            for client in clients.values():
                await client.aclose()
    assert all(r.status_code == 200 for _, _, r in answers), [
        r.text for _, _, r in answers if r.status_code != 200
    ]
    for agent, n, response in answers:
        data = response.json()
        [position] = data["attempt"]
        entry = log[data["seq"]][position]
        assert entry["performer"] == agent
        assert entry["bindings"]["cid"] == f"{agent}-{n}"
    assert sum(len(entries) for entries in log.values()) == 150


async def test_a_resent_id_with_other_instances_is_refused() -> None:
    async with guarded([SIMPLE], AGENTS) as (_, url), httpx.AsyncClient(
        base_url=url, headers={"Authorization": "Bearer p1-token"}
    ) as client:
        first = await client.post(
            f"{PATH}/attempts", json={"instances": [create("a")], "attempt_id": "x"}
        )
        again = await client.post(
            f"{PATH}/attempts", json={"instances": [create("a")], "attempt_id": "x"}
        )
        changed = create("a")
        changed["bindings"]["currency"] = "EUR"
        other = await client.post(
            f"{PATH}/attempts", json={"instances": [changed], "attempt_id": "x"}
        )
    assert first.status_code == 200 and again.json() == first.json()
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "attempt-id-reused"


async def test_a_batched_answer_without_id_names_only_that_attempt() -> None:
    async with (
        guarded([SIMPLE], AGENTS, policy="batched", batch_window_ms=20) as (_, url),
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer p1-token"}) as client,
    ):
        answers = await asyncio.gather(
            *(
                client.post(f"{PATH}/attempts", json={"instances": [create(f"c{i}")]})
                for i in range(4)
            )
        )
        log = await log_entries(client)
    seqs = {r.json()["seq"] for r in answers}
    assert any(len(log[s]) > 1 for s in seqs), "the window held only one attempt"
    for i, response in enumerate(answers):
        data = response.json()
        [position] = data["attempt"]
        assert log[data["seq"]][position]["bindings"]["cid"] == f"c{i}"
        assert len(data["others"]) == len(log[data["seq"]]) - 1
