"""Shared fixtures: paths to the shipped protocols and loaded protocol objects."""

from __future__ import annotations

import gc
import signal
from pathlib import Path

import pytest

from langshaw import LangshawProtocol

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ROOT / "protocols"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# A run started in the background by a shell without job control (`make test &`
# in a script, some CI runners) inherits SIGINT ignored, and so would every
# process the tests start: the tests that interrupt one with SIGINT (Ctrl-C)
# would fail. Each test process (and each pytest-xdist worker) restores it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Once the tests are collected, what the imports and the collection made
    (some 400,000 objects: modules, classes, the SDKs' models, the test items)
    is moved out of the garbage collector's sight (``gc.freeze``): it lives to
    the end of the session anyway, and each full collection walked all of it,
    0.3 s of CPU and more, in every worker, many times over a run (the tests
    that call ``gc.collect()`` to find a socket left open paid it each time).
    What the tests make is collected as before: a socket a test drops is still
    found. Hypothesis is imported first: on its import it registers trio's
    Random, and it warns when it cannot see who holds it (a frozen module)."""
    import hypothesis  # noqa: F401

    gc.collect()
    gc.freeze()


# SimpleUCP bindings for tests that only need some checkout to exist: the
# least that fits the UCP types (buyer, discount codes and shipping are left
# absent; they are optional).
LINE_ITEMS = [{"item": {"id": "roses", "title": "Roses"}, "quantity": 1}]
SIMPLE_CREATE = dict(line_items=LINE_ITEMS, currency="USD", payment_pref={})
SIMPLE_CREATED = dict(totals=[{"type": "total", "amount": 0}], payment={})
PAYMENT_DATA = {
    "id": "instr_1",
    "handler_id": "mock_payment_handler",
    "type": "card",
    "credential": {"type": "token", "token": "success_token"},
}
SIMPLE_COMPLETE = dict(payment_data=PAYMENT_DATA, risk_signals={})
ORDER = {"id": "o1", "permalink_url": "https://shop.example/orders/o1"}
REASON = {"status": 400, "code": "invalid", "message": "no"}


def load(name: str) -> LangshawProtocol:
    return LangshawProtocol.load(PROTOCOLS / name)


def paper(name: str) -> LangshawProtocol:
    """A UCP protocol as the Strabo paper prints it: untyped, with SimpleUCP's
    convention of null for what is not given. For tests of mechanics that types
    do not change (route mapping, retry policy); the shipped files are typed."""
    return LangshawProtocol.load(FIXTURES / "lsh" / "paper" / name)


@pytest.fixture(scope="session")
def simple_ucp() -> LangshawProtocol:
    return load("atomic-ucp.lsh")


@pytest.fixture(scope="session")
def incremental_ucp() -> LangshawProtocol:
    return load("incremental-ucp.lsh")


@pytest.fixture(scope="session")
def purchase() -> LangshawProtocol:
    return load("purchase.lsh")
