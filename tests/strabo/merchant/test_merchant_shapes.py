"""The shape comparison used by the conformance test, and the replay failing when it should."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from strabo.serving import serve

from .conftest import MockAgent
from .shapes import differences, signature
from .test_merchant_conformance import Replay
from .traces import TRACE_FILES, load_trace


def test_values_do_not_matter_kinds_do():
    assert differences({"id": "a", "amount": 1}, {"id": "b", "amount": 99}) == []
    assert differences({"amount": 1}, {"amount": 1.5}) == ["$.amount: expected integer, got float"]
    assert differences({"ok": True}, {"ok": 1}) == ["$.ok: expected boolean, got integer"]
    assert differences(None, {}) == ["$: expected null, got object"]


def test_keys_must_match_exactly_a_null_member_being_no_member():
    assert differences({"a": 1, "b": 2}, {"a": 1}) == ["$: missing keys ['b']"]
    assert differences({"a": 1, "b": None}, {"a": 1}) == []
    assert differences({"a": 1}, {"a": 1, "b": None}) == []
    assert differences({"x": None}, {"x": {}}) == ["$: unexpected keys ['x']"]
    assert signature([{"a": 1, "b": None}]) == signature([{"a": 2}])
    assert differences({"a": 1}, {"a": 1, "c": 2}) == ["$: unexpected keys ['c']"]
    assert differences({"a": {"b": 1}}, {"a": {"c": 1}}) == [
        "$.a: missing keys ['b']",
        "$.a: unexpected keys ['c']",
    ]


def test_arrays_compare_by_their_set_of_element_shapes():
    three = [{"code": "A", "amount": 1}] * 3
    assert differences(three, [{"code": "B", "amount": 2}]) == []
    assert differences([], []) == []
    assert differences([1], []) == ["$: expected non-empty array, got empty"]
    assert differences([], [1]) == ["$: expected empty array, got non-empty"]
    assert differences([{"a": 1}], [{"a": 1}, {"a": 1, "b": 2}]) == [
        "$[*]: unexpected keys ['b']"
    ]
    assert signature([1, 2]) == signature([3]) != signature(["x"])


async def test_the_replay_reports_a_merchant_that_answers_differently():
    async def stub(request):
        return JSONResponse({"detail": "stub"})

    app = Starlette(routes=[Route("/{path:path}", stub, methods=["GET", "POST", "PUT"])])
    cases = load_trace(TRACE_FILES[0])[:6]
    async with serve(app) as base, httpx.AsyncClient(base_url=base) as client:
        replay = Replay(client, base, MockAgent(url="http://127.0.0.1:9"))
        reports = [await replay.check(case) for case in cases]

    assert all(reports), reports
    assert any("status 200, recorded 422" in line for line in reports[1])
    assert any("missing keys" in line for line in reports[0])
