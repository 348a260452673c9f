"""Fixtures for the LLM agent tests: the recorded model."""

from __future__ import annotations

import pytest

from tests.llm.fake import FakeModel, load


@pytest.fixture
def model(httpx_mock):
    """A FakeModel without answers yet: ``model.script(name)`` loads a fixture."""
    fake = FakeModel([]).install(httpx_mock)

    def script(name: str) -> FakeModel:
        fake.answers = load(name)
        return fake

    fake.script = script  # type: ignore[attr-defined]
    return fake
