"""Shared fixtures: paths to the shipped protocols and loaded protocol objects."""

from __future__ import annotations

from pathlib import Path

import pytest

from langshaw import LangshawProtocol

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ROOT / "protocols"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# Create bindings for SimpleUCP tests that only need some checkout to exist.
SIMPLE_CREATE = dict(
    line_items=[],
    currency="USD",
    buyer=None,
    payment_pref={},
    discount_codes=None,
    fulfillment_pref=None,
)


def load(name: str) -> LangshawProtocol:
    return LangshawProtocol.load(PROTOCOLS / name)


@pytest.fixture(scope="session")
def simple_ucp() -> LangshawProtocol:
    return load("atomic-ucp.lsh")


@pytest.fixture(scope="session")
def incremental_ucp() -> LangshawProtocol:
    return load("incremental-ucp.lsh")


@pytest.fixture(scope="session")
def purchase() -> LangshawProtocol:
    return load("purchase.lsh")
