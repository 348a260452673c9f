"""The dashboard's server side over real HTTP: /ui only when enabled, its
headers, the viewer token (reads everything, attempts nothing), the refusals
ring and the figures. The page itself runs in a browser in
test_dashboard_browser.py."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from importlib import resources
from typing import Any

import httpx
import pytest

from peach import ActionRejected, FeasibleAction
from syncserver._figures import Figures, _Counters
from syncserver.config import ConfigError, build_config
from tests.conftest import load
from tests.harness import CLIENT_LIMITS, Harness, until

PURCHASE = load("purchase.lsh")
SIMPLE = load("atomic-ucp.lsh")
AGENTS = {
    "buyer": ["Purchase:Buyer"],
    "seller": ["Purchase:Seller"],
    "platform": ["SimpleUCP:Platform"],
}
VIEWER = "viewer-secret"
P = "/mas/default/protocols/Purchase"


@contextlib.asynccontextmanager
async def served(dashboard: bool = True, viewer: str | None = VIEWER) -> AsyncIterator[Harness]:
    h = Harness("http", [PURCHASE, SIMPLE], AGENTS)
    h.server.config = replace(h.server.config, dashboard=dashboard, viewer_token=viewer)
    async with h:
        yield h


def client(h: Harness, token: str | None) -> httpx.AsyncClient:
    assert h.url is not None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=h.url, headers=headers, timeout=10, limits=CLIENT_LIMITS)


def rfq(id_: str, item: str = "pen") -> dict[str, Any]:
    return {"instances": [{"action": "RFQ", "bindings": {"ID": id_, "item": item, "budget": 10}}]}


# /ui ------------------------------------------------------------------------------


async def test_ui_is_404_unless_the_configuration_enables_it() -> None:
    async with served(dashboard=False) as h, client(h, None) as anyone:
        for path in ("/ui", "/ui/dashboard.js", "/ui/index.html"):
            response = await anyone.get(path)
            assert response.status_code == 404, path
            assert response.json()["error"]["code"] == "not-found"


async def test_ui_serves_its_three_files_with_a_strict_policy() -> None:
    async with served() as h, client(h, None) as anyone:
        kinds = {"/ui": "text/html", "/ui/dashboard.js": "text/javascript",
                 "/ui/dashboard.css": "text/css"}
        for path, kind in kinds.items():
            response = await anyone.get(path)
            assert response.status_code == 200, path
            assert response.headers["content-type"].startswith(kind)
            csp = response.headers["content-security-policy"]
            assert "default-src 'self'" in csp and "connect-src 'self'" in csp
            assert "script-src 'self'" in csp and "unsafe" not in csp
            assert response.headers["x-content-type-options"] == "nosniff"
        page = (await anyone.get("/ui")).text
        assert 'src="ui/dashboard.js"' in page and 'href="ui/dashboard.css"' in page
        # Nothing else under /ui, and no way out of the folder.
        for path in ("/ui/x.js", "/ui/..%2Fapp.py", "/ui/%2E%2E/app.py"):
            assert (await anyone.get(path)).status_code == 404, path
        # /ui/ leads to /ui, where the relative asset paths resolve.
        response = await anyone.get("/ui/", follow_redirects=False)
        assert response.status_code in (301, 307) and response.headers["location"].endswith("/ui")


def test_the_page_has_no_inline_code_no_third_party_code_and_no_html_sinks() -> None:
    files = resources.files("syncserver") / "ui"
    html = (files / "index.html").read_text()
    js = (files / "dashboard.js").read_text()
    css = (files / "dashboard.css").read_text()
    # Every script is a file of this origin; no inline handler or style.
    assert re.findall(r"<script[^>]*>", html) == ['<script src="ui/dashboard.js" defer>']
    assert not re.search(r"\son[a-z]+=", html) and " style=" not in html
    for text in (html, js, css):
        assert "http://" not in text and "https://" not in text and "//cdn" not in text
    # Data reaches the page through textContent only: no HTML parsing sink.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "new EventSource"):
        assert sink not in js, sink
    # Read-only: the page sends no method but GET.
    assert not re.search(r"method\s*:", js)


# The viewer token ----------------------------------------------------------------


async def test_the_viewer_reads_every_protocol_and_attempts_nothing() -> None:
    async with (
        served() as h,
        client(h, VIEWER) as viewer,
        client(h, "buyer-token") as buyer,
    ):
        assert (await buyer.post(f"{P}/attempts", json=rfq("1"))).status_code == 200
        assert (await viewer.get("/mas")).json() == {"mas": ["default"], "viewer": True}
        assert (await buyer.get("/mas")).json() == {"mas": ["default"], "viewer": False}
        info = (await viewer.get("/mas/default")).json()
        assert info["agent"] == "(viewer)" and set(info["roles"]) == {"Purchase", "SimpleUCP"}
        for path in (P, f"{P}/enactments", f"{P}/log", f"{P}/enactment?ID=1",
                     "/mas/default/protocols/SimpleUCP/enactments", "/mas/default/agents"):
            assert (await viewer.get(path)).status_code == 200, path
        # An agent reads only the protocols it plays; the viewer all of them.
        assert (await buyer.get("/mas/default/protocols/SimpleUCP")).status_code == 403
        assert (await viewer.get(f"{P}/enactment?ID=1")).json()["enabled_total"]["Seller"] == 1
        # Attempts and channels need an agent: the viewer is refused, and nothing
        # is finalized.
        refused = await viewer.post(f"{P}/attempts", json=rfq("2"))
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
        channel = await viewer.get(
            f"{P}/channel", headers={"Connection": "Upgrade", "Upgrade": "strabo-channel/1"}
        )
        assert channel.status_code == 403 and channel.json()["error"]["code"] == "read-only"
        assert (await viewer.get(f"{P}/enactments")).json()["total"] == 1


async def test_without_a_viewer_token_none_is_accepted() -> None:
    async with served(viewer=None) as h, client(h, VIEWER) as stranger, client(h, "") as no:
        assert (await stranger.get("/mas")).status_code == 401
        assert (await stranger.get("/mas/default")).status_code == 401
        assert (await no.get("/mas")).status_code == 401


async def test_the_viewer_stream_follows_every_batch() -> None:
    async with (
        served() as h,
        client(h, VIEWER) as viewer,
        client(h, "buyer-token") as buyer,
        viewer.stream("GET", f"{P}/events") as stream,
    ):
        lines = stream.aiter_lines()
        assert (await buyer.post(f"{P}/attempts", json=rfq("7"))).status_code == 200
        async with asyncio.timeout(5):
            async for line in lines:
                if line.startswith("data:"):
                    assert '"ID":"7"' in line
                    break
        stats = (await viewer.get("/mas/default/stats")).json()
        assert stats["streams"] == 1 and stats["agents_connected"] == 0


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ({"viewer_token": "v", "viewer_token_env": "V"}, "at most one of"),
        ({"viewer_token_env": "UNSET_VIEWER"}, "UNSET_VIEWER is not set"),
        ({"viewer_token": "b"}, "is an agent's token"),
        ({"viewer_token": ""}, "must be a non-empty string"),
        ({"dashboard": "yes"}, "server.dashboard: must be true or false"),
    ],
)
def test_configuration_mistakes_are_located(server: dict[str, Any], message: str) -> None:
    data = {
        "server": server,
        "mas": {"m": {"protocols": ["purchase"],
                      "agents": {"b": {"roles": ["Buyer"], "token": "b"}}}},
    }
    with pytest.raises(ConfigError) as caught:
        build_config(data, environ={})
    assert message in str(caught.value)


def test_the_options_load_from_the_environment() -> None:
    data = {
        "server": {"dashboard": True, "viewer_token_env": "VIEWER"},
        "mas": {"m": {"protocols": ["purchase"],
                      "agents": {"b": {"roles": ["Buyer"], "token": "b"}}}},
    }
    config = build_config(data, environ={"VIEWER": "s3cret"})
    assert config.dashboard is True and config.viewer_token == "s3cret"
    default = build_config({"mas": data["mas"]})
    assert default.dashboard is False and default.viewer_token is None


# Refusals and figures ---------------------------------------------------------------


async def test_refusals_are_kept_with_their_rule_and_shown_to_whom_they_concern() -> None:
    async with (
        served() as h,
        client(h, VIEWER) as viewer,
        client(h, "buyer-token") as buyer,
        client(h, "seller-token") as seller,
    ):
        assert (await buyer.post(f"{P}/attempts", json=rfq("1"))).status_code == 200
        assert (await buyer.post(f"{P}/attempts", json=rfq("1"))).status_code == 409
        quote = {"instances": [{"action": "RFQ", "bindings": {"ID": "9", "item": "x",
                                                              "budget": 1}}]}
        assert (await seller.post(f"{P}/attempts", json=quote)).status_code == 403
        # Over a channel too (the SyncExecutor attempts on one).
        adapter = h.adapter("seller", "Seller")
        async with adapter:
            await adapter.sync()
            [fa] = [f for f in adapter.enabled() if f.action.name == "Quote"]
            await adapter.attempt([fa.bind(price=3, qid="q1")])
            with pytest.raises(ActionRejected):
                await adapter.attempt([fa.bind(price=4, qid="q1")])
        everyone = (await viewer.get("/mas/default/refusals")).json()["refusals"]
        assert [(r["agent"], r["rule"], r["action"]) for r in everyone] == [
            ("seller", "duplicate", "Quote"),
            ("seller", "role", "RFQ"),
            ("buyer", "duplicate", "RFQ"),
        ]
        assert all(r["protocol"] == "Purchase" and r["message"] and r["time"].endswith("Z")
                   for r in everyone)
        mine = (await buyer.get("/mas/default/refusals")).json()["refusals"]
        assert [r["agent"] for r in mine] == ["buyer"]
        stats = (await viewer.get("/mas/default/stats")).json()
        assert stats["attempts"] == 5 and stats["refused"] == 3 and stats["agents"] == 3


def test_the_refusal_ring_is_bounded_newest_first() -> None:
    from langshaw import Violation
    from syncserver.errors import Rejected

    figures = Figures(refusals=3)
    for n in range(5):
        figures.refused("m", "P", "a", Rejected(Violation("nono", "x" * 900 + str(n))))
    kept = figures.refusals("m")
    assert [r["message"][-3:] for r in kept] == ["..."] * 3 and len(kept) == 3
    assert all(len(r["message"]) == 500 for r in kept)
    assert figures.refusals("other") == [] and figures.refusals("m", "b") == []


def test_rates_and_latency_come_from_the_last_whole_seconds() -> None:
    counters = _Counters()
    for _ in range(30):
        counters.add(1000.2, 0.002, False)  # 30 attempts in second 1000, 2 ms each
    counters.add(1001.5, 0.010, True)  # one refused in second 1001, 10 ms
    counters.add(1002.1, 0.5, False)  # second 1002 is under way: not counted yet
    window = counters.window(1002.3, 10)
    assert window["attempts_per_second"] == 3.1 and window["refused_per_second"] == 0.1
    assert window["latency_ms"] == {"mean": round(0.07 / 31 * 1000, 3), "max": 10.0}
    # A bucket reused a ring later starts again.
    counters.add(1000.2 + 64, 0.001, False)
    assert counters.window(1065.0, 10)["attempts_per_second"] == 0.1
    assert counters.total == 33 and counters.total_refused == 1
    assert _Counters().window(5.0, 10)["latency_ms"] == {"mean": None, "max": None}


async def test_stats_count_streams_and_attempts_per_second() -> None:
    async with served() as h, client(h, VIEWER) as viewer:
        buyer, seller = h.adapter("buyer", "Buyer"), h.adapter("seller", "Seller")
        quoted = asyncio.Event()
        done: set[str] = set()
        finalized: list[str] = []

        @seller.on_enabled("Quote")
        async def quote(fa: FeasibleAction) -> None:
            if fa.keys["ID"] not in done:
                done.add(fa.keys["ID"])
                await seller.attempt([fa.bind(price=5, qid=f"q{fa.keys['ID']}")])
                finalized.append(fa.keys["ID"])
                quoted.set()

        async with buyer, seller:
            for n in range(3):
                await buyer.attempt([buyer.initiating()[0].bind(ID=str(n), item="i", budget=9)])
            await until(lambda: len(finalized) == 3, quoted)
            await seller.sync()
            stats = (await viewer.get("/mas/default/stats")).json()
            agents = (await viewer.get("/mas/default/agents")).json()["agents"]
        assert stats["attempts"] == 6 and stats["refused"] == 0
        assert stats["streams"] >= 2 and stats["agents_connected"] == 2
        assert {a["name"]: a["connected"] for a in agents} == {
            "buyer": True, "platform": False, "seller": True,
        }
