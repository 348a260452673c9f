"""The dashboard in a real headless browser (Chromium through chromedriver),
against a real SyncServer on a loopback port while agents enact Purchase.

It checks what only a browser can: the page signs in with the viewer token,
shows an enactment as a sequence chart, adds each new action as it is
finalized (no reload), shows a binding holding markup as text (no script runs:
the page escapes it, and its CSP would block it anyway), and lists agents and
refusals. With STRABO_SCREENSHOTS=1 it saves docs/images/dashboard.png.

Needs /usr/bin/chromium and /usr/bin/chromedriver (Debian: chromium,
chromium-driver; scripts/install_browser.sh installs them) and the selenium
package (the dev extras); skipped, saying so, without them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from peach import FeasibleAction
from tests.conftest import load
from tests.harness import Harness

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "dashboard.png"
FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1400,1100",
]

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        f"needs Chromium and chromedriver ({CHROMIUM}, {CHROMEDRIVER}): run "
        "scripts/install_browser.sh (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip(
    "selenium.webdriver", reason="needs selenium (pip install -e '.[dev]')"
)
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

PURCHASE = load("purchase.lsh")
AGENTS = {"buyer": ["Buyer"], "seller": ["Seller"], "shipper": ["Shipper"]}
VIEWER = "viewer-secret"
EVIL = "<script>alert(1)</script>"
WAIT = 20  # seconds a condition may take on a loaded machine; met in well under one


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def waiting(driver: Any, css: str, text: str | None = None) -> Callable[[], Any]:
    """A blocking wait (run in a thread: the server shares the test's loop)
    until an element matching ``css`` (containing ``text``) is on the page."""

    def found(d: Any) -> Any:
        for element in d.find_elements(By.CSS_SELECTOR, css):
            if text is None or text in element.text:
                return element
        return False

    return lambda: WebDriverWait(driver, WAIT).until(found, f"no {css} with {text!r}")


async def test_the_dashboard_follows_an_enactment_live_and_shows_bindings_as_text(
    browser: Any,
) -> None:
    h = Harness("http", [PURCHASE], AGENTS)
    h.server.config = replace(h.server.config, dashboard=True, viewer_token=VIEWER)
    async with h:
        buyer, seller = h.adapter("buyer", "Buyer"), h.adapter("seller", "Seller")
        shipper = h.adapter("shipper", "Shipper")
        quoted = asyncio.Event()

        @seller.on_enabled("Quote")
        async def quote(fa: FeasibleAction) -> None:
            if not any(i.name == "Quote" for _, i, _ in seller.history(fa.keys)):
                await seller.attempt([fa.bind(qid=f"q-{fa.keys['ID']}", price=7)])
                quoted.set()

        @seller.on_enabled("Ship")
        async def ship(fa: FeasibleAction) -> None:
            await seller.attempt([fa.bind(delivery_date="monday")])

        @shipper.on_enabled("Deliver")
        async def deliver(fa: FeasibleAction) -> None:
            await shipper.attempt([fa.bind(outcome="delivered")])

        @buyer.on_enabled("Completed")
        async def confirm(fa: FeasibleAction) -> None:
            await buyer.attempt([fa.bind(satisfaction="good")])

        async with buyer, seller, shipper:
            [rfq] = await buyer.attempt(
                [buyer.initiating()[0].bind(ID="e1", item=EVIL, budget=10)]
            )
            await asyncio.wait_for(quoted.wait(), WAIT)

            def sign_in() -> int:
                browser.get(f"{h.url}/ui")
                field = WebDriverWait(browser, WAIT).until(
                    lambda d: d.find_element(By.ID, "token").is_displayed()
                    and d.find_element(By.ID, "token")
                )
                field.send_keys(VIEWER)
                browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
                waiting(browser, '.step[data-action="Quote"]')()
                browser.execute_script("window.stillTheSamePage = true")
                count: int = browser.execute_script(
                    "return document.querySelectorAll('script').length"
                )
                return count

            scripts = await asyncio.to_thread(sign_in)
            assert scripts == 1  # the page's own dashboard.js

            # A new action shows up without a reload, then the rest of the
            # enactment, and the server's word that it is complete.
            accept = next(f for f in buyer.enabled(rfq.keys) if f.name == "Accept")
            await buyer.attempt([accept.bind(chosen="q-e1", price=7, address="1 Main St")])
            await asyncio.to_thread(waiting(browser, '.step[data-action="Accept"]', "1 Main St"))
            await asyncio.to_thread(waiting(browser, 'article[data-complete="true"]'))
            # The agents' table and a refusal with its rule.
            cancel = {"ID": "e1", "Accept": True, "reason": "late"}
            async with h.client("buyer") as raw:
                refused = await raw.post(
                    "/mas/default/protocols/Purchase/attempts",
                    json={"instances": [{"action": "Cancel", "bindings": cancel}]},
                )
            assert refused.status_code == 409, refused.text
            await asyncio.to_thread(waiting(browser, "#refusals td.rule", "nono"))
            await asyncio.to_thread(waiting(browser, 'tr[data-agent="shipper"] td.on'))
            await buyer.attempt([buyer.initiating()[0].bind(ID="e2", item="ink", budget=3)])
            await asyncio.to_thread(waiting(browser, '.step[data-action="Quote"]', "q-e2"))
            # What is enabled now, and for whom, on opening an enactment's details.
            e2 = 'article[data-enactment=\'["e2"]\']'
            await asyncio.to_thread(
                lambda: browser.find_element(By.CSS_SELECTOR, f"{e2} details summary").click()
            )
            await asyncio.to_thread(waiting(browser, f"{e2} .enabled p", "Buyer: Accept"))

            def look() -> dict[str, Any]:
                return {
                    "same": browser.execute_script("return window.stillTheSamePage === true"),
                    "scripts": browser.execute_script(
                        "return document.querySelectorAll('script').length"
                    ),
                    "evil": [
                        e.text for e in browser.find_elements(By.CSS_SELECTOR, ".bindings dd")
                        if "alert" in e.text
                    ],
                    "steps": [
                        e.get_attribute("data-action")
                        for e in browser.find_elements(
                            By.CSS_SELECTOR, 'article[data-enactment=\'["e1"]\'] .step'
                        )
                    ],
                }

            seen = await asyncio.to_thread(look)
            assert seen["same"] is True and seen["scripts"] == scripts
            # The markup bound to item is shown as text, in RFQ, Quote and Ship.
            assert seen["evil"] == [EVIL] * 3
            assert seen["steps"] == ["RFQ", "Quote", "Accept", "Ship", "Deliver", "Completed"]
            with pytest.raises(NoAlertPresentException):
                browser.switch_to.alert.text  # noqa: B018
            if os.environ.get("STRABO_SCREENSHOTS") == "1":
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                await asyncio.to_thread(browser.save_screenshot, str(SCREENSHOT))


DIAGRAM = Path(__file__).resolve().parents[2] / "docs" / "diagrams" / "purchase.svg"
DIAGRAM_SHOT = SCREENSHOT.parent / "diagram-purchase.png"


def test_a_protocol_diagram_renders_in_the_browser(browser: Any, tmp_path: Path) -> None:
    """The SVG `strabo check --diagram` writes, as a browser draws it: it parses
    (an XML error page otherwise), and shows each role and action as text."""
    from langshaw import LangshawProtocol
    from langshaw.diagrams import protocol_diagram
    from syncserver.bundled import path

    purchase = LangshawProtocol.load(path("purchase"))
    svg = tmp_path / "purchase.svg"
    svg.write_text(protocol_diagram(purchase, "svg"))
    browser.get(svg.as_uri())
    texts = browser.execute_script(
        "return Array.from(document.querySelectorAll('text'), t => t.textContent)"
        " .concat([document.documentElement.nodeName,"
        " String(document.querySelector('parsererror') !== null)])"
    )
    *shown, root, broken = texts
    assert root == "svg" and broken == "false", texts[-5:]
    for name in [*purchase.roles, *purchase.actions]:
        assert any(name in t for t in shown), name
    if os.environ.get("STRABO_SCREENSHOTS") == "1":
        browser.set_window_size(1400, 1000)
        browser.get(DIAGRAM.as_uri())
        browser.save_screenshot(str(DIAGRAM_SHOT))
