"""Fixtures for the LLM agent tests: a scripted model behind a real local server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.peach.llm.fake import FakeModel


@pytest.fixture
def provider() -> str:
    """The wire format the fake model speaks; a test parametrizes ``provider`` to
    run against both (``@pytest.mark.parametrize("provider", PROVIDERS)``)."""
    return "anthropic"


@pytest.fixture
async def model(provider: str) -> AsyncIterator[FakeModel]:
    """A FakeModel without answers yet, serving on a free loopback port:
    ``model.script(name)`` loads a fixture, ``model.client()`` reaches it."""
    fake = FakeModel([], provider)
    async with fake.serving():
        yield fake
