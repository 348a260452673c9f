"""The token budget is kept before each call, not after: a run with a budget of
N tokens never counts more than N, against a scripted model (over loopback HTTP,
tests/peach/llm/fake.py) that reports as much usage as a request could cost."""

from __future__ import annotations

from typing import Any

import pytest

from peach.llm import Budget
from samples.llm import scenarios
from tests.peach.llm.fake import PROVIDERS, FakeModel

BOTH = pytest.mark.parametrize("provider", PROVIDERS)

# Notes saved round after round: a decision that never settles, so the agent
# keeps calling the model, each prompt longer than the last, until the budget ends.
NOTING = [{"reusable": True, "content": [
    {"type": "tool_use", "name": "memory", "input": {"op": "save", "key": "k", "value": "v"}}]}]


class Costly(FakeModel):
    """Reports the most a request could cost: a token per 3 characters of the
    request as sent, and a full answer (all of ``max_tokens``)."""

    async def _receive(self, request: Any, view: Any) -> dict[str, Any]:
        body = await super()._receive(request, view)
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        self.usage = (len(self.raw[-1]) // 3, limit)
        return body

    def _anthropic_message(self, content: list[dict[str, Any]], model: str) -> dict[str, Any]:
        message = super()._anthropic_message(content, model)
        message["usage"] = {"input_tokens": self.usage[0], "output_tokens": self.usage[1]}
        return message

    def _chat_completion(self, content: list[dict[str, Any]], model: str) -> dict[str, Any]:
        completion = super()._chat_completion(content, model)
        completion["usage"] = {"prompt_tokens": self.usage[0],
                               "completion_tokens": self.usage[1],
                               "total_tokens": sum(self.usage)}
        return completion


@pytest.fixture
async def costly(provider: str) -> Any:
    fake = Costly(NOTING, provider)
    async with fake.serving():
        yield fake


@BOTH
async def test_a_run_never_counts_more_tokens_than_its_budget(costly):
    """It was overshot by one answer (122,000 counted against 100,000)."""
    budget = Budget(max_tokens=20_000)
    outcome = await scenarios.purchase(client=costly.client(), model="test-model",
                                       budget=budget, max_rounds=100)
    report = outcome.report
    assert report.status == "budget", report.reason
    assert report.llm_calls >= 3  # it did run, and stopped on the budget
    assert report.input_tokens + report.output_tokens <= budget.max_tokens
    # The reason says why the next call could not be made: its estimate.
    assert report.reason.startswith("token budget of 20000: the next call is estimated at ")
    assert "more than the" in report.reason and "left" in report.reason


@BOTH
async def test_a_shorter_answer_is_asked_for_when_a_full_one_would_not_fit(costly):
    budget = Budget(max_tokens=10_000)
    outcome = await scenarios.purchase(client=costly.client(), model="test-model",
                                       budget=budget, max_tokens=8000, max_rounds=100)
    report = outcome.report
    assert report.status == "budget", report.reason
    limits = [b.get("max_tokens") or b.get("max_completion_tokens") for b in costly.bodies]
    assert limits and all(Budget.MIN_ANSWER <= limit < 8000 for limit in limits), limits
    assert report.input_tokens + report.output_tokens <= budget.max_tokens


async def test_a_budget_no_call_fits_in_makes_no_call(costly):
    outcome = await scenarios.purchase(client=costly.client(), model="test-model",
                                       budget=Budget(max_tokens=500))
    assert outcome.report.status == "budget"
    assert outcome.report.llm_calls == 0 and costly.requests == []
    assert "the next call is estimated at" in outcome.report.reason


def test_the_estimate_errs_on_the_safe_side():
    overhead = Budget.REQUEST_OVERHEAD
    assert Budget.estimate_tokens("") == overhead + 2  # '[""]': 4 characters
    ascii_text, other = "a" * 3000, "語" * 1000
    assert Budget.estimate_tokens(ascii_text) >= 1000 + overhead
    assert Budget.estimate_tokens(other) >= 1000 + overhead  # a token a character at worst
