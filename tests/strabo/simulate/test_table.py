"""The report's Markdown table reads as a table in a terminal too."""

from __future__ import annotations

from strabo.simulate.report import MAX_WIDTH, markdown_table


def test_columns_are_padded_and_numbers_aligned_right() -> None:
    table = markdown_table(
        ["round", "seller", "price"],
        [{"round": 1, "seller": "steady", "price": 7}, {"round": 10, "seller": "cut|ter",
                                                         "price": 6.5}],
    )
    assert table.splitlines() == [
        "| round | seller   | price |",
        "|------:|----------|------:|",
        "|     1 | steady   |     7 |",
        "|    10 | cut\\|ter |   6.5 |",
    ]


def test_a_long_cell_runs_over_instead_of_widening_its_column() -> None:
    words = "w" * (MAX_WIDTH + 20)
    lines = markdown_table(["said"], [{"said": words}, {"said": "short"}]).splitlines()
    assert lines[1] == "|" + "-" * (MAX_WIDTH + 2) + "|"
    assert lines[2] == f"| {words} |" and lines[3] == "| " + "short".ljust(MAX_WIDTH) + " |"
