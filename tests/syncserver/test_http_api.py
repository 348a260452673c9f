"""The SyncServer HTTP API over real HTTP: status codes, error bodies, endpoints."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import PAYMENT_DATA, REASON, load
from tests.harness import Harness

SIMPLE = load("atomic-ucp.lsh")
INCREMENTAL = load("incremental-ucp.lsh")
AGENTS = {
    "platform": ["SimpleUCP:Platform"],
    "business": ["SimpleUCP:Business", "IncrementalUCP:Business"],
    "outsider": ["IncrementalUCP:Platform"],
}
BASE = "/mas/default/protocols/SimpleUCP"
CREATE = {
    "line_items": [],
    "currency": "USD",
    "payment_pref": {},
}


def body(*instances: tuple[str, dict[str, Any]], attempt_id: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"instances": [{"action": a, "bindings": b} for a, b in instances]}
    if attempt_id:
        data["attempt_id"] = attempt_id
    return data


def error(response: httpx.Response) -> dict[str, Any]:
    data = response.json()
    assert set(data) == {"error"}, data
    assert isinstance(data["error"]["code"], str) and data["error"]["message"], data
    return data["error"]


@pytest.fixture
async def api():
    async with (
        Harness("http", [SIMPLE, INCREMENTAL], AGENTS) as h,
        h.client("platform") as platform,
        h.client("business") as business,
    ):
        yield h, platform, business


async def create(client: httpx.AsyncClient, cid: str) -> httpx.Response:
    return await client.post(f"{BASE}/attempts", json=body(("Create", {"cid": cid, **CREATE})))


async def test_attempt_returns_the_finalized_batch(api) -> None:
    _, platform, _ = api
    response = await create(platform, "c1")
    assert response.status_code == 200
    data = response.json()
    # The caller's own instances are given by position; others (none here) in full.
    assert data == {"seq": 1, "attempt": [0], "size": 1}
    log = (await platform.get(f"{BASE}/log")).json()
    assert log["events"] == [
        {
            "seq": 1,
            "protocol": "SimpleUCP",
            "instances": [
                {"action": "Create", "bindings": {"cid": "c1", **CREATE}, "performer": "platform"}
            ],
        }
    ]


@pytest.mark.parametrize(
    ("instance", "status", "rule"),
    [
        (("Ghost", {"cid": "c1"}), 422, "unknown-action"),
        (("Create", {"cid": "c2", **CREATE, "color": "red"}), 422, "unknown-attribute"),
        (("Create", {"cid": "c2", "currency": "USD"}), 422, "missing-attribute"),
        (("Create", {**CREATE, "cid": None}), 422, "key"),
        (
            (
                "Created",
                {
                    "cid": "c1",
                    "Create": True,
                    "id": "x",
                    "totals": [],
                    "payment": {},
                },
            ),
            403,
            "role",
        ),
        (("Create", {"cid": "c1", **CREATE}), 409, "duplicate"),
        (
            (
                "Complete",
                {
                    "cid": "c9",
                    "Created": True,
                    "id": "x",
                    "payment_data": PAYMENT_DATA,
                    "risk_signals": {},
                },
            ),
            409,
            "dependency",
        ),
    ],
)
async def test_rejections_by_rule(api, instance, status: int, rule: str) -> None:
    _, platform, _ = api
    assert (await create(platform, "c1")).status_code == 200
    response = await platform.post(f"{BASE}/attempts", json=body(instance))
    assert response.status_code == status, response.text
    assert error(response)["rule"] == rule
    assert error(response)["code"] == rule


async def test_state_rejections_nono_sayso_bound(api) -> None:
    h, platform, business = api
    await create(platform, "c1")
    created = {
        "cid": "c1",
        "Create": True,
        "id": "chk",
        "totals": [],
        "payment": {},
    }
    assert (
        await business.post(f"{BASE}/attempts", json=body(("Created", created)))
    ).status_code == 200
    failed = await business.post(
        f"{BASE}/attempts", json=body(("Failed", {"cid": "c1", "Create": True, "reason": REASON}))
    )
    assert failed.status_code == 409 and error(failed)["rule"] == "nono"
    assert (
        error(failed)["message"]
        == "'Failed' and 'Created' exclude each other (nono), and 'Created' occurred"
    )
    cancel = await platform.post(
        f"{BASE}/attempts", json=body(("Cancel", {"cid": "c1", "Created": True, "id": "other"}))
    )
    assert cancel.status_code == 409
    assert error(cancel) | {} == {
        "code": "bound",
        "rule": "bound",
        "message": "'id' is already bound to 'chk' here, so 'Cancel' must carry that value, "
        "not 'other'",
        "action": "Cancel",
        "attribute": "id",
        "index": 0,
    }
    # sayso and nono, on IncrementalUCP (where 'outsider' is the Platform).
    inc = "/mas/default/protocols/IncrementalUCP/attempts"
    async with h.client("outsider") as outsider:
        ok = await outsider.post(
            inc,
            json=body(
                (
                    "Create",
                    {"eid": "e", "line_items": [], "currency": "USD", "payment": {}},
                )
            ),
        )
        assert ok.status_code == 200

        def complete() -> tuple[str, dict[str, Any]]:
            return (
                "Complete",
                {
                    "eid": "e",
                    "Create": True,
                    "id": "chk",
                    "payment_data": PAYMENT_DATA,
                    "risk_signals": {},
                },
            )

        # Before Created, nobody has bound id, and only Business may.
        sayso = await outsider.post(inc, json=body(complete()))
        assert sayso.status_code == 409 and error(sayso)["rule"] == "sayso"
        assert error(sayso)["attribute"] == "id"
        created = await business.post(
            inc,
            json=body(
                (
                    "Created",
                    {"eid": "e", "Create": True, "id": "chk", "payment_config": {}, "messages": []},
                )
            ),
        )
        assert created.status_code == 200
        cancel = await outsider.post(
            inc, json=body(("Cancel", {"eid": "e", "Created": True, "id": "chk"}))
        )
        assert cancel.status_code == 200
        # A checkout is completed or cancelled, once: Complete and Cancel exclude each other.
        nono = await outsider.post(inc, json=body(complete()))
        assert nono.status_code == 409 and error(nono)["rule"] == "nono"
        assert error(nono)["attribute"] == "Cancel"


async def test_authentication_and_authorization(api) -> None:
    h, _, _ = api
    async with h.client(None) as anonymous:
        response = await anonymous.post(
            f"{BASE}/attempts", json=body(("Create", {"cid": "x", **CREATE}))
        )
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert "missing bearer token" in error(response)["message"]
        wrong = await anonymous.get("/mas/default", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and error(wrong)["code"] == "unauthorized"
        basic = await anonymous.get("/mas/default", headers={"Authorization": "Basic abc"})
        assert basic.status_code == 401
        assert (await anonymous.get("/health")).json()["status"] == "ok"
    async with h.client("outsider") as outsider:
        forbidden = await outsider.post(
            f"{BASE}/attempts", json=body(("Create", {"cid": "x", **CREATE}))
        )
        assert forbidden.status_code == 403
        assert error(forbidden)["message"] == "agent 'outsider' plays no role in 'SimpleUCP'"
        stream = await outsider.get(f"{BASE}/log")
        assert stream.status_code == 403


async def test_unknown_things_and_bad_bodies(api) -> None:
    _, platform, _ = api
    unknown_mas = await platform.get("/mas/nowhere")
    assert unknown_mas.status_code == 404 and error(unknown_mas)["code"] == "unknown-mas"
    # Without a token of some MAS here, which MAS names exist stays unknown.
    async with api[0].client(None) as anonymous:
        for headers in ({}, {"Authorization": "Bearer nope"}):
            probe = await anonymous.get("/mas/nowhere", headers=headers)
            assert probe.status_code == 401, probe.text
    long = await platform.get("/mas/" + "x" * 5000)
    assert long.status_code == 404 and len(error(long)["message"]) < 200
    unknown_protocol = await platform.post("/mas/default/protocols/Nope/attempts", json={})
    assert unknown_protocol.status_code == 404
    assert error(unknown_protocol)["message"] == (
        "'default' hosts no protocol 'Nope' (SimpleUCP, IncrementalUCP)"
    )
    malformed = await platform.post(
        f"{BASE}/attempts", content=b'{"instances": [', headers={"content-type": "application/json"}
    )
    assert malformed.status_code == 400 and error(malformed)["code"] == "bad-json"
    for bad, message in [
        ({"instances": []}, "instances: List should have at least 1 item"),
        ({"instances": [{"action": "Create"}]}, "instances.0.bindings: Field required"),
        (
            {"instances": [{"action": "Create", "bindings": []}]},
            "instances.0.bindings: Input should be an object",
        ),
        ({"instances": [], "extra": 1}, "extra: Extra inputs are not permitted"),
        ([1, 2], "body: Input should be an object"),
    ]:
        response = await platform.post(f"{BASE}/attempts", json=bad)
        assert response.status_code == 400, bad
        assert error(response)["code"] == "bad-request"
        assert message in error(response)["message"], (bad, error(response))
    huge = await platform.post(f"{BASE}/attempts", content=b"x" * (1024 * 1024 + 1))
    assert huge.status_code == 413 and error(huge)["code"] == "too-large"
    nothing = await platform.get("/no/such/endpoint")
    assert nothing.status_code == 404 and error(nothing)["code"] == "not-found"
    method = await platform.delete(f"{BASE}/attempts")
    assert method.status_code == 405 and error(method)["code"] == "method-not-allowed"
    bad_after = await platform.get(f"{BASE}/log", params={"after": "soon"})
    assert bad_after.status_code == 400
    # None of this changed the state.
    assert (await platform.get(BASE)).json()["last_seq"] == 0


async def test_attempt_id_makes_retries_safe(api) -> None:
    _, platform, business = api
    once = body(("Create", {"cid": "c1", **CREATE}), attempt_id="a-1")
    first = await platform.post(f"{BASE}/attempts", json=once)
    again = await platform.post(f"{BASE}/attempts", json=once)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    log = (await platform.get(f"{BASE}/log")).json()
    assert [e["seq"] for e in log["events"]] == [1]
    # Attempt ids are each agent's own: the same id from another agent is another
    # attempt, and its retry answers with that agent's batch.
    created = body(
        ("Created", {"cid": "c1", "Create": True, "id": "x", "totals": [], "payment": {}}),
        attempt_id="a-1",
    )
    theirs = await business.post(f"{BASE}/attempts", json=created)
    retried = await business.post(f"{BASE}/attempts", json=created)
    assert theirs.status_code == retried.status_code == 200
    assert theirs.json() == retried.json() and theirs.json()["seq"] == 2
    assert (await platform.post(f"{BASE}/attempts", json=once)).json()["seq"] == 1


async def test_reading_state(api) -> None:
    _, platform, business = api
    await create(platform, "c1")
    await create(platform, "c2")
    info = (await platform.get("/mas/default")).json()
    assert info == {
        "mas": "default",
        "agent": "platform",
        "roles": {"SimpleUCP": ["Platform"]},
        "acts_for": {},
        "mandate": {},
        "protocols": ["SimpleUCP", "IncrementalUCP"],
        "policy": "instant",
    }
    proto = (await platform.get(BASE)).json()
    assert proto["last_seq"] == 2 and proto["enactments"] == 2 and proto["root_keys"] == ["cid"]
    assert proto["actions"]["Create"]["actor"] == "Platform"
    listing = (await business.get(f"{BASE}/enactments")).json()
    assert listing == {
        "total": 2,
        "offset": 0,
        "enactments": [
            {"keys": {"cid": "c1"}, "complete": False},
            {"keys": {"cid": "c2"}, "complete": False},
        ],
    }
    state = (await business.get(f"{BASE}/enactment", params={"cid": "c1"})).json()
    assert state["complete"] is False
    assert [i["action"] for i in state["instances"]] == ["Create"]
    assert [e["action"] for e in state["enabled"]["Business"]] == ["Created", "Failed"]
    assert state["enabled"]["Platform"] == []
    missing = await business.get(f"{BASE}/enactment", params={"cid": "nope"})
    assert missing.status_code == 404
    no_keys = await business.get(f"{BASE}/enactment")
    assert no_keys.status_code == 400 and "?cid=..." in error(no_keys)["message"]
    page = (await business.get(f"{BASE}/log", params={"after": 1, "limit": 5})).json()
    assert [e["seq"] for e in page["events"]] == [2] and page["last_seq"] == 2
    assert json.loads(json.dumps(page))["events"][0]["instances"][0]["performer"] == "platform"


async def test_agents_listing_shows_roles_streams_and_attempts(api) -> None:
    h, platform, business = api
    listing = (await platform.get("/mas/default/agents")).json()
    assert listing["mas"] == "default"
    assert [a["name"] for a in listing["agents"]] == ["business", "outsider", "platform"]
    before = {a["name"]: a for a in listing["agents"]}
    assert before["business"]["roles"] == {
        "IncrementalUCP": ["Business"],
        "SimpleUCP": ["Business"],
    }
    assert before["platform"] == {
        "name": "platform",
        "roles": {"SimpleUCP": ["Platform"]},
        "acts_for": {},
        "url": None,
        "connected": False,
        "streams": {},
        "connected_since": None,
        "last_attempt": None,
    }
    assert (await create(platform, "listed")).status_code == 200
    async with business.stream("GET", f"{BASE}/events") as events:
        assert events.status_code == 200
        lines = events.aiter_lines()
        assert await anext(lines) == ": connected"  # the server has counted the stream
        listed = (await platform.get("/mas/default/agents")).json()["agents"]
        agents = {a["name"]: a for a in listed}
    assert agents["business"]["connected"] is True
    assert agents["business"]["streams"] == {"SimpleUCP": 1}
    assert agents["business"]["connected_since"].endswith("Z")
    assert agents["platform"]["connected"] is False
    assert agents["platform"]["last_attempt"].endswith("Z")
    assert agents["business"]["last_attempt"] is None
    async with h.client(None) as anonymous:
        assert (await anonymous.get("/mas/default/agents")).status_code == 401


async def test_an_enactment_answer_is_paged(api) -> None:
    _, platform, business = api
    await create(platform, "c1")
    created = {"cid": "c1", "Create": True, "id": "x", "totals": [], "payment": {}}
    assert (await business.post(f"{BASE}/attempts", json=body(("Created", created)))).is_success
    url = f"{BASE}/enactment"
    whole = (await business.get(url, params={"cid": "c1"})).json()
    assert [i["seq"] for i in whole["instances"]] == [1, 2] and whole["next_after"] is None
    first = (await business.get(url, params={"cid": "c1", "limit": 1})).json()
    assert [i["seq"] for i in first["instances"]] == [1] and first["next_after"] == 1
    rest = (await business.get(url, params={"cid": "c1", "after": first["next_after"]})).json()
    assert [i["seq"] for i in rest["instances"]] == [2] and rest["next_after"] is None
    # The enabled actions: counted whole, listed up to the limit, for one role if asked.
    assert whole["enabled_total"]["Platform"] == len(whole["enabled"]["Platform"]) >= 2
    one = (await business.get(url, params={"cid": "c1", "limit": 1, "role": "Platform"})).json()
    assert set(one["enabled"]) == {"Platform"} and len(one["enabled"]["Platform"]) == 1
    assert one["enabled_total"] == {"Platform": whole["enabled_total"]["Platform"]}
    unknown = await business.get(url, params={"cid": "c1", "role": "Nobody"})
    assert unknown.status_code == 400 and "Platform" in error(unknown)["message"]
    listing = (await business.get(f"{BASE}/enactments", params={"offset": 0, "limit": 1})).json()
    assert listing == {
        "total": 1,
        "offset": 0,
        "enactments": [{"keys": {"cid": "c1"}, "complete": False}],
    }


async def test_an_enactment_read_again_shows_what_committed_since(api) -> None:
    _, platform, business = api
    await create(platform, "c1")
    url = f"{BASE}/enactment"
    before = (await business.get(url, params={"cid": "c1"})).json()
    assert [e["action"] for e in before["enabled"]["Business"]] == ["Created", "Failed"]
    created = {"cid": "c1", "Create": True, "id": "x", "totals": [], "payment": {}}
    assert (await business.post(f"{BASE}/attempts", json=body(("Created", created)))).is_success
    after = (await business.get(url, params={"cid": "c1"})).json()
    assert [i["action"] for i in after["instances"]] == ["Create", "Created"]
    assert after["enabled"]["Business"] == []
    assert "Complete" in [e["action"] for e in after["enabled"]["Platform"]]


async def test_a_log_page_ends_once_its_batches_pass_its_bytes(
    api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Built whole and read whole, a page is bounded in bytes as well as in
    # batches; one batch larger than the bound still comes, alone.
    from syncserver import app as app_module

    _, platform, business = api
    for i in range(3):
        bulky = {**CREATE, "payment_pref": {"memo": "X" * 60_000}}
        answer = await platform.post(
            f"{BASE}/attempts", json=body(("Create", {"cid": f"big{i}", **bulky})))
        assert answer.status_code == 200, answer.text
    monkeypatch.setattr(app_module, "LOG_PAGE_BYTES", 100_000)
    seqs: list[list[int]] = []
    after = 0
    while True:
        page = (await business.get(f"{BASE}/log", params={"after": after, "limit": 50})).json()
        if not page["events"]:
            break
        seqs.append([e["seq"] for e in page["events"]])
        after = seqs[-1][-1]
    assert seqs == [[1], [2], [3]] and page["last_seq"] == 3
    monkeypatch.setattr(app_module, "LOG_PAGE_BYTES", 50_000)  # under one batch
    page = (await business.get(f"{BASE}/log", params={"after": 0, "limit": 50})).json()
    assert [e["seq"] for e in page["events"]] == [1]
