"""The shipped market scenario, run to completion: its report, table and chart."""

from __future__ import annotations

import csv
import json
import re

from strabo.simulate import load_scenario, simulate, write_report
from strabo.simulate.report import chart_size, outcome_rows
from tests.conftest import PROTOCOLS

SCENARIO = PROTOCOLS / "patterns" / "market.toml"
SELLERS = ["steady", "cutter", "rival"]
ROUNDS = 12


async def test_the_market_scenario_reports_every_round_of_every_seller(tmp_path) -> None:
    # Imported here, not at the top: numpy and matplotlib take half a second to
    # import, which every pytest-xdist worker would pay at collection for this one test.
    import numpy as np
    from matplotlib import image

    scenario = load_scenario(SCENARIO)
    result = await simulate(scenario)
    assert (result.reason, result.rounds_ended) == ("complete", ROUNDS), result.detail
    written = write_report(result, tmp_path / "report")
    assert sorted(written) == ["chart", "csv", "report", "table", "trace"]

    # The trace: every finalized action, in log order.
    lines = written["trace"].read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == len(result.trace)
    assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)
    assert records[0]["action"] == "Open" and records[-1]["action"] == "Closed"

    # The table: one row per round per seller.
    with written["csv"].open() as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == ROUNDS * len(SELLERS)
    assert sorted((int(r["round"]), r["seller"]) for r in rows) == sorted(
        (n, s) for n in range(1, ROUNDS + 1) for s in SELLERS)
    markdown = written["table"].read_text().splitlines()
    assert markdown[0] == "| round | seller | price | units | revenue | profit | balance |"
    assert len(markdown) == 2 + ROUNDS * len(SELLERS)

    # The numbers add up: every buyer within reach of the cheapest price bought
    # from a cheapest seller, and balances are running sums of profits.
    table = outcome_rows(result)
    buyers = [3.0 + 9.0 * i / 11 for i in range(12)]  # reservation values: low..high
    for n in range(1, ROUNDS + 1):
        this = [r for r in table if r["round"] == n]
        low = min(r["price"] for r in this)
        assert sum(r["units"] for r in this) == sum(1 for b in buyers if b >= low)
        assert all(r["units"] == 0 for r in this if r["price"] > low)
    for seller in SELLERS:
        mine = [r for r in table if r["seller"] == seller]
        running = 0.0
        for r in mine:
            assert r["profit"] == round(r["units"] * (r["price"] - 2.0), 2)
            running = round(running + r["profit"], 2)
            assert r["balance"] == running
    closed = result.trace[-1]
    assert closed["balances"] == {s: [r for r in table if r["seller"] == s][-1]["balance"]
                                  for s in SELLERS}
    # The undercutters cycle: down to their floors, then up again.
    cutter = [r["price"] for r in table if r["seller"] == "cutter"]
    assert cutter[:7] == [10.0, 6.0, 5.5, 4.5, 4.0, 3.0, 10.0]

    # The chart: a PNG of the expected size, with lines drawn on it.
    png = written["chart"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(written["chart"])
    width, height = chart_size(2)
    assert pixels.shape[:2] == (height, width) == (700, 800)
    colours = np.unique(pixels.reshape(-1, pixels.shape[2]), axis=0)
    assert len(colours) > 50  # not a blank canvas: antialiased lines and text
    # The three sellers' default line colours (tab:blue, tab:orange, tab:green) are there.
    rgb = (pixels[..., :3] * 255).round().astype(int).reshape(-1, 3)
    present = {tuple(c) for c in rgb}
    assert {(31, 119, 180), (255, 127, 14), (44, 160, 44)} <= present

    # The summary links it all.
    summary = written["report"].read_text()
    assert "- ended: **complete**" in summary
    assert "![Market: three sellers, twelve buyers](chart.png)" in summary
    assert "| 12 | cutter | 3 |" in re.sub(" +", " ", summary)  # cells are padded
