"""Attempt ids are each agent's own, every 200 names instances in the log, and
an id is bound to the instances it was first finalized with.

Regressions: the server keyed attempts in flight by the attempt id alone, so an
agent that sent another's id was told its attempt succeeded while the attempt
vanished; and it checked a resent id only when the attempt was rejected, so an
id reused for other instances that were legal was finalized again (one id, three
different Creates, and a channel sent two 200 answers with that id).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from langshaw import ActionInstance
from peach import LocalExecutor, PeachAdapter, SyncExecutor
from peach.errors import ExecutorError
from syncserver import SyncServer
from tests.hostile._support import SIMPLE, create, guarded
from tests.hostile.test_channel_sink import attempt, channel

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
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "id-reused"


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
        # Only the size of the batch: its other entries are on the stream.
        assert data["size"] == len(log[data["seq"]]) and "others" not in data


POLICIES = [{"policy": "instant"}, {"policy": "batched", "batch_window_ms": 5}]


def refused_as_reused(data: dict[str, Any], ident: str) -> None:
    """The body of a 409 for an id reused: a code, no protocol rule, and words
    that say what to do."""
    error = data["error"]
    assert error["code"] == "id-reused" and "rule" not in error, error
    assert error["attempt_id"] == ident
    assert f"attempt id {ident!r} of agent 'p1'" in error["message"]
    assert "use a new id for a new attempt" in error["message"]


@pytest.mark.parametrize("options", POLICIES, ids=["instant", "batched"])
async def test_an_id_reused_for_other_legal_instances_is_refused_over_http(
    tmp_path: Any, options: dict[str, Any]
) -> None:
    """One id, three different Creates, each legal on its own: the first is
    finalized, the others refused (409 id-reused), a resend of the first gets
    its answer again; and so after a restart from the same SQLite log."""
    store = str(tmp_path / "log.db")

    async def post(client: httpx.AsyncClient, cid: str) -> httpx.Response:
        body = {"instances": [create(cid)], "attempt_id": "x"}
        return await client.post(f"{PATH}/attempts", json=body)

    headers = {"Authorization": "Bearer p1-token"}
    async with (
        guarded([SIMPLE], AGENTS, store=store, **options) as (_, url),
        httpx.AsyncClient(base_url=url, headers=headers) as client,
    ):
        first = await post(client, "c1")
        assert first.status_code == 200, first.text
        for cid in ("c2", "c3"):
            other = await post(client, cid)
            assert other.status_code == 409, other.text
            refused_as_reused(other.json(), "x")
        again = await post(client, "c1")
        assert again.status_code == 200 and again.json() == first.json()
        log = await log_entries(client)
        assert [i["bindings"]["cid"] for entries in log.values() for i in entries] == ["c1"]
    async with (
        guarded([SIMPLE], AGENTS, store=store, **options) as (_, url),
        httpx.AsyncClient(base_url=url, headers=headers) as client,
    ):
        assert (await post(client, "c4")).status_code == 409
        assert (await post(client, "c1")).json() == first.json()


@pytest.mark.parametrize("options", POLICIES, ids=["instant", "batched"])
async def test_two_attempts_at_once_under_one_id_finalize_one(
    tmp_path: Any, options: dict[str, Any]
) -> None:
    """Two POSTs at once, one id, other instances: one is finalized, the other
    refused, whichever arrives first."""
    headers = {"Authorization": "Bearer p1-token"}
    async with (
        guarded([SIMPLE], AGENTS, store=str(tmp_path / "log.db"), **options) as (server, url),
        httpx.AsyncClient(base_url=url, headers=headers) as client,
    ):
        answers = await asyncio.gather(
            *(
                client.post(f"{PATH}/attempts", json={"instances": [create(c)], "attempt_id": "y"})
                for c in ("c1", "c2")
            )
        )
        assert sorted(r.status_code for r in answers) == [200, 409], [r.text for r in answers]
        [refused] = [r for r in answers if r.status_code == 409]
        refused_as_reused(refused.json(), "y")
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == 1


@pytest.mark.parametrize("options", POLICIES, ids=["instant", "batched"])
async def test_an_id_reused_for_other_legal_instances_is_refused_over_a_channel(
    tmp_path: Any, options: dict[str, Any]
) -> None:
    """The same on a channel: one 200 answer under the id (the first attempt's,
    again for its resend), a 409 for each other Create."""
    async with guarded([SIMPLE], AGENTS, store=str(tmp_path / "log.db"), **options) as (
        server,
        url,
    ):
        wire = await channel(url, "p1-token")
        answers = []
        for cid in ("c1", "c2", "c3", "c1"):
            wire.writer.write(attempt(cid, "x"))
            kind, data = await wire.event()
            assert kind == "answer" and data["id"] == "x", (kind, data)
            answers.append(data)
        wire.close()
        assert [a["status"] for a in answers] == [200, 409, 409, 200]
        for refused in answers[1:3]:
            refused_as_reused(refused, "x")
        assert answers[3] == answers[0]
        assert server.ledgers[("default", "SimpleUCP")].committed_seq == 1


@pytest.mark.parametrize("way", ["channel", "post", "local"])
async def test_the_executors_surface_a_reused_id_as_an_error_not_a_retry(way: str) -> None:
    """An agent whose ids repeat (a second executor with the first one's id
    prefix, as an agent restarted with a fixed id source would have) gets an
    ExecutorError for the id reused: status 409, code id-reused, not
    retryable, after one try."""

    async def two_executors(make: Any) -> None:
        first, second = make(), make()
        second._attempt_prefix = first._attempt_prefix
        creates = [ActionInstance(SIMPLE.action("Create"), create(c)["bindings"]) for c in "ab"]
        async with PeachAdapter("p1", SIMPLE, "Platform", first) as adapter:
            await adapter.attempt([creates[0]])
        tries = 0
        send = second._send

        async def counted(*args: Any) -> Any:
            nonlocal tries
            tries += 1
            return await send(*args)

        second._send = counted  # type: ignore[method-assign]
        async with PeachAdapter("p1", SIMPLE, "Platform", second) as adapter:
            if way == "channel":
                await second.connected("SimpleUCP")
                assert second._lines  # type: ignore[attr-defined]
            with pytest.raises(ExecutorError) as raised:
                await adapter.attempt([creates[1]])
        assert (raised.value.status, raised.value.code) == (409, "id-reused")
        assert not raised.value.retryable and tries == 1
        assert "already names an attempt with other instances" in str(raised.value)

    if way == "local":
        server = SyncServer.embedded([SIMPLE], AGENTS)
        await two_executors(lambda: LocalExecutor(server))
        return
    async with guarded([SIMPLE], AGENTS) as (_, url):
        await two_executors(lambda: SyncExecutor(url, "p1-token", channel=way == "channel"))
