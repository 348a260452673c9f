"""The dashboard under attack: each test here failed before the fix it names.

Over real HTTP (and, for the page, headless Chromium through the fixtures of
test_dashboard_browser.py): an agent whose name is the viewer's, attempts
carrying huge action and attribute names, the page served at a path that a
front proxy normalised (``//evil.invalid/ui``), and ``/ui/index.html``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from syncserver import create_app, uvicorn_options
from syncserver._figures import MAX_MESSAGE
from syncserver.config import ConfigError
from syncserver.serving import serve
from tests.harness import Harness
from tests.syncserver.test_dashboard import PURCHASE, VIEWER, P, client, served


async def test_no_agent_may_be_named_like_the_viewer() -> None:
    """The viewer's reads, streams and presence go by the name "(viewer)": an
    agent of that name read every agent's refusals (the refusals are now chosen
    by the token) and shared the viewer's stream quota. The configuration now
    refuses the name, at its place."""
    with pytest.raises(ConfigError) as error:
        Harness("http", [PURCHASE], {"buyer": ["Purchase:Buyer"], "(viewer)": ["Purchase:Seller"]})
    assert "agents.(viewer): '(viewer)' is the name of the dashboard's viewer" in str(error.value)


async def test_the_refusal_ring_keeps_a_bounded_size_whatever_an_agent_sends() -> None:
    """Fixed in _figures.Figures.refused: the action and attribute names an agent
    sent were kept whole (100 refusals of a 1 MB name each: 100 MB per MAS)."""
    huge = "A" * 100_000
    async with served() as h, client(h, "buyer-token") as buyer:
        for instance in ({"action": huge, "bindings": {}},
                         {"action": "RFQ", "bindings": {"ID": "1", huge: 1}}):
            answer = await buyer.post(f"{P}/attempts", json={"instances": [instance]})
            assert answer.status_code == 422, answer.text
        kept = (await buyer.get("/mas/default/refusals")).json()["refusals"]
        assert [r["rule"] for r in kept] == ["unknown-attribute", "unknown-action"]
        for refusal in kept:
            for name, value in refusal.items():
                assert value is None or len(value) <= MAX_MESSAGE, (name, len(value))
        assert kept[0]["attribute"].startswith("AAA") and kept[1]["action"].endswith("...")


async def test_ui_index_html_is_not_a_second_broken_copy_of_the_page() -> None:
    """Fixed in _dashboard.routes: /ui/index.html served the page, whose relative
    paths (ui/dashboard.js) then pointed to /ui/ui/...: a form without its code."""
    async with served() as h, client(h, None) as anyone:
        assert (await anyone.get("/ui")).status_code == 200
        response = await anyone.get("/ui/index.html")
        assert response.status_code == 404
        assert "/ui" in response.json()["error"]["message"]


class MergeSlashes:
    """A front that drops a path's first segment, as a prefix-routing proxy may
    (``/tenant/ui`` -> ``/ui``): here a leading ``//<host>``, so the page is served
    at a URL whose path starts with ``//``. SyncServer alone answers 404 there:
    the test stands for a deployment behind such a front."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("//"):
            path = re.sub(r"^//[^/]+", "", scope["path"]) or "/"
            scope = {**scope, "path": path, "raw_path": path.encode()}
        await self.app(scope, receive, send)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """test_dashboard_browser.py's headless Chromium (skipped, saying why, without it)."""
    from tests.syncserver import test_dashboard_browser as page  # skips without Chromium

    options = page.webdriver.ChromeOptions()
    options.binary_location = str(page.CHROMIUM)
    for flag in [*page.FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(flag)
    service = page.webdriver.chrome.service.Service(str(page.CHROMEDRIVER))
    driver = page.webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()


async def test_the_page_sends_its_token_to_its_own_origin_whatever_its_path(
    browser: Any,
) -> None:
    """Fixed in dashboard.js: the page took its API's base from its path, so at
    ``http://server//evil.invalid/ui`` it sent the token to ``//evil.invalid/mas``
    (a protocol-relative URL: another host), stopped only by the CSP."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.syncserver.test_dashboard_browser import WAIT

    h = Harness("direct", [PURCHASE], {"buyer": ["Buyer"]})
    h.server.config = replace(h.server.config, dashboard=True, viewer_token=VIEWER)
    app = MergeSlashes(create_app(h.server))
    async with serve(app, **uvicorn_options(h.server.config.limits)) as url:

        def sign_in() -> str:
            browser.get(f"{url}//evil.invalid/ui")
            field = WebDriverWait(browser, WAIT).until(
                lambda d: d.find_element(By.ID, "token").is_displayed()
                and d.find_element(By.ID, "token")
            )
            field.send_keys(VIEWER)
            browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
            # Either the board (signed in) or the form again, saying what failed.
            text: str = WebDriverWait(browser, WAIT).until(
                lambda d: d.find_element(By.ID, "who").text
                or d.find_element(By.ID, "login-error").text,
                "the page never answered",
            )
            return text

        shown = await asyncio.to_thread(sign_in)
        assert shown == "MAS default as (viewer)", shown


async def test_markup_and_direction_overrides_anywhere_show_as_text(browser: Any) -> None:
    """Not a bug (kept as a guard): an agent's name, an action it made up, a
    refusal's message and a binding, each holding markup or a right-to-left
    override, are shown as text in their own cell: nothing runs, no element is
    made of them, and the override stays inside its value."""
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.syncserver.test_dashboard_browser import WAIT, waiting

    evil_agent = "<img src=x onerror=alert(1)>"
    evil_action = "<script>alert(2)</script>\u202e"
    h = Harness("http", [PURCHASE], {"buyer": ["Buyer"], evil_agent: ["Seller"]})
    h.server.config = replace(h.server.config, dashboard=True, viewer_token=VIEWER)
    async with h, client(h, f"{evil_agent}-token") as agent:
        rfq = {"ID": "\u202e1", "item": "<b onmouseover=alert(3)>x</b>\u202e", "budget": 1}
        async with client(h, "buyer-token") as buyer:
            assert (await buyer.post(f"{P}/attempts", json={"instances": [
                {"action": "RFQ", "bindings": rfq}]})).status_code == 200
        refused = await agent.post(f"{P}/attempts", json={"instances": [
            {"action": evil_action, "bindings": {}}]})
        assert refused.status_code == 422

        def look() -> dict[str, Any]:
            browser.get(f"{h.url}/ui")
            field = WebDriverWait(browser, WAIT).until(
                lambda d: d.find_element(By.ID, "token").is_displayed()
                and d.find_element(By.ID, "token")
            )
            field.send_keys(VIEWER)
            browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
            waiting(browser, '.step[data-action="RFQ"]')()
            waiting(browser, "#refusals td.rule", "unknown-action")()
            cells = browser.find_elements(By.CSS_SELECTOR, "#refusals tbody tr:first-child td")
            return {
                "refusal": [c.get_attribute("textContent") for c in cells],
                "agent": browser.find_element(
                    By.CSS_SELECTOR, "#agents tbody tr:first-child td").get_attribute(
                    "textContent"),
                "item": [e.get_attribute("textContent")
                         for e in browser.find_elements(By.CSS_SELECTOR, ".bindings dd")],
                "performer": browser.find_element(By.CSS_SELECTOR, ".performer").text,
                "made": browser.execute_script(
                    "return document.querySelectorAll('img, b, script').length"),
            }

        seen = await asyncio.to_thread(look)
        assert seen["refusal"][1:3] == [evil_agent, "Purchase"]
        assert seen["refusal"][4] == evil_action
        assert seen["agent"] == evil_agent  # sorted first: '<' before 'b'
        assert rfq["item"] in seen["item"] and "\u202e1" in seen["item"]
        assert seen["performer"] == "by buyer · #1"  # an override inside no other value
        assert seen["made"] == 1  # the page's own dashboard.js
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018
