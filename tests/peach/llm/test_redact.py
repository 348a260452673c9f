"""Secrets: only the principal's are hidden, in every form they may be echoed in,
and ordinary words never are. The redactor on its own, then LLM agents against
the scripted model over loopback HTTP (tests/peach/llm/fake.py), the model SDK's
DEBUG log captured."""

from __future__ import annotations

import base64
import json
import logging
import re
import urllib.parse

import pytest

from peach.llm import Hooks, tool
from peach.llm.prompting import Redactor
from samples.llm import scenarios
from strabo.ucp.platform_agent import SAMPLE_PAYMENT_DATA
from tests.peach.llm.fake import PROVIDERS

BOTH = pytest.mark.parametrize("provider", PROVIDERS)

# The principal's secret: a vault address with characters every encoding changes.
VAULT = 'Vault St 9f8e/7d6c "B" #4'


def echoed(secret: str) -> dict[str, str]:
    """``secret`` as a server may echo it: each form, by name."""
    raw = secret.encode()
    return {
        "base64": base64.b64encode(raw).decode(),
        "base64 unpadded": base64.b64encode(raw).decode().rstrip("="),
        "urlsafe": base64.urlsafe_b64encode(raw).decode(),
        "urlsafe unpadded": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "inside base64": base64.b64encode(b"deliver to: " + raw + b"; signed").decode(),
        "inside base64, shifted": base64.b64encode(b"to " + raw).decode(),
        "url": urllib.parse.quote(secret, safe=""),
        "url, lower-case hex": re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(),
                                      urllib.parse.quote_plus(secret)),
        "json": json.dumps(secret)[1:-1],
        "json in json": json.dumps(json.dumps({"to": secret})),
        "glued": f"REF{secret}X1",
    }


# The redactor on its own -------------------------------------------------------------


def test_every_echoed_form_of_a_secret_is_scrubbed():
    redactor = Redactor()
    redactor.add_value(VAULT)
    redactor.add_value("9f8e7d6c5b4a")  # a token, glued into a longer one below
    for name, form in {**echoed(VAULT), "glued token": "ref9f8e7d6c5b4aZ"}.items():
        assert "[secret]" in redactor.text(form), name
        assert form not in redactor.text(form), name


def test_ordinary_words_are_never_scrubbed():
    """A payment instrument holds 'token', 'card', 'Visa': hiding them hid the
    query of every URL with ?token= from the model."""
    redactor = Redactor({"payment_data"})
    redactor.add_value(SAMPLE_PAYMENT_DATA)
    text = "GET https://psp.example/pay?token=abc&type=card (Visa card, token type)"
    assert redactor.text(text) == text
    # What is secret in it still is: the token, the instrument, the last digits.
    assert redactor.text("paid with success_token, instr_1, card ending 1234") == (
        "paid with [secret], [secret], card ending [secret]"
    )
    # Short pieces as whole words only: '1234' is no part of '912345'.
    assert redactor.text("order 912345") == "order 912345"
    assert redactor.scrub({"brand": "Visa", "x": SAMPLE_PAYMENT_DATA}) == {
        "brand": "Visa", "x": "[secret]"}


def test_only_the_principals_values_of_secret_attributes_become_secrets():
    redactor = Redactor({"pin"})
    redactor.written({"pin": "model-1234x", "item": "pen"})  # the model wrote it
    redactor.bound({"pin": "model-1234x"}, own=True)
    redactor.bound({"pin": "their-5678y"}, own=False)  # a counterpart bound it
    redactor.bound({"pin": "own-9999z"}, own=True)  # the agent's own code did
    assert redactor.text("model-1234x their-5678y own-9999z") == (
        "model-1234x their-5678y [secret]"
    )
    # A counterpart carrying the principal's value on does not make it theirs.
    redactor.bound({"pin": "own-9999z"}, own=False)
    assert redactor.text("own-9999z") == "[secret]"
    # Where bound to a secret attribute, any value is shown as [secret].
    assert redactor.bindings({"pin": "model-1234x", "item": "pen"}) == {
        "pin": "[secret]", "item": "pen"}


def test_the_sdk_loggers_are_scrubbed_while_the_block_runs_only(caplog):
    caplog.set_level(logging.DEBUG)
    first, second = Redactor(), Redactor()
    first.add_value("first-secret-111")
    second.add_value("second-secret-222")
    sdk = logging.getLogger("anthropic._base_client")
    nested = logging.getLogger("httpcore2.http11")  # below a logger the filter names
    with first.scrubbing_logs():
        sdk.debug("Request options: %s", {"json_data": {"content": "first-secret-111"}})
        nested.debug("body=%s", base64.b64encode(b"first-secret-111").decode())
        with second.scrubbing_logs():
            sdk.debug("both: first-secret-111 second-secret-222")
        sdk.debug("after the second: second-secret-222")
    sdk.debug("after both: first-secret-111")
    logging.getLogger("strabo.llm").debug("not an SDK: first-secret-111")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "Request options: {'json_data': {'content': '[secret]'}}",
        "body=[secret]",
        "both: [secret] [secret]",
        # Each agent's filter is its own and leaves with it: nothing leaks
        # between agents, nor stays on the loggers after a run.
        "after the second: second-secret-222",
        "after both: first-secret-111",
        "not an SDK: first-secret-111",
    ]
    assert not sdk.filters and not nested.filters


# Agents against the scripted model ----------------------------------------------------

RFQ = {"when": {"has": ["RFQ"], "lacks": ["Accept"], "prompt_has": ["no enactment yet"]},
       "content": [{"type": "tool_use", "name": "RFQ", "input": {"item": "pen", "budget": 10}},
                   {"type": "tool_use", "name": "wait", "input": {"for_actions": ["Quote"]}}]}
ONE_QUOTE = {"when": {"has": ["Accept"]},
             "content": [{"type": "tool_use", "name": "wait", "input": {"for_actions": ["Quote"]}}]}
FINISH = {"when": {"has": ["Completed"]},
          "content": [{"type": "tool_use", "name": "Completed", "input": {"satisfaction": "ok"}},
                      {"type": "tool_use", "name": "done", "input": {}}]}
WAIT_DELIVERY = {"type": "tool_use", "name": "wait", "input": {"for_actions": ["Deliver"]}}


def vault_hooks() -> Hooks:
    hooks = Hooks()

    @hooks.before("Accept", provides=["address"])
    def vault(bindings: dict) -> dict:
        return {**bindings, "address": VAULT}

    return hooks


@BOTH
async def test_a_value_the_model_writes_into_a_secret_attribute_is_no_secret(model):
    """The model binds the address the hook provides: refused, and what it wrote
    stays readable (it was hidden from then on, the goal holding it included)."""
    model.answers = [
        RFQ,
        {"when": {"has": ["Accept"], "prompt_has": ["cheap-pen", "dear-pen"]},
         "content": [{"type": "tool_use", "name": "Accept", "input": {
             "chosen": "cheap-pen", "price": 4, "address": scenarios.ADDRESS}}]},
        {"when": {"prompt_has": ["does not take address"]},
         "content": [{"type": "tool_use", "name": "Accept",
                      "input": {"chosen": "cheap-pen", "price": 4}}, WAIT_DELIVERY]},
        ONE_QUOTE,
        FINISH,
    ]
    outcome = await scenarios.purchase(client=model.client(), model="test-model",
                                       hooks=vault_hooks(), secrets=["address"])
    assert outcome.success, (outcome.detail, model.unanswered)
    [accept] = [e for e in outcome.log if e.name == "Accept"]
    assert accept["address"] == VAULT
    errors = [r["content"] for req in model.requests for r in req["results"] if r["error"]]
    assert errors == ["Accept does not take address: it binds chosen, price"]
    # What the model wrote is not hidden from it: the goal it came from is intact.
    assert all(scenarios.ADDRESS in r["system"] for r in model.requests)
    # The principal's value is: shown as [secret] where bound, never as itself.
    assert '"address": "[secret]"' in model.requests[-1]["prompt"]
    assert all(b"9f8e" not in body for body in model.raw)


@BOTH
async def test_echoed_forms_of_a_secret_reach_neither_the_model_nor_the_sdk_log(model, caplog):
    """A service echoes the principal's address encoded every which way: the model
    reads [secret] instead, and so does the SDK's DEBUG log of the request."""
    caplog.set_level(logging.DEBUG)
    forms = echoed(VAULT)

    @tool("shipping_status", "Where the order is")
    def shipping_status() -> dict:
        return {**forms, "tracking": f"https://ship.example/t?to={forms['url']}&token=abc"}

    model.answers = [
        RFQ,
        {"when": {"has": ["Accept"], "prompt_has": ["cheap-pen", "dear-pen"]},
         "content": [{"type": "tool_use", "name": "Accept",
                      "input": {"chosen": "cheap-pen", "price": 4}},
                     {"type": "tool_use", "name": "shipping_status", "input": {}}]},
        {"when": {"prompt_has": ["done: Accept"]}, "content": [WAIT_DELIVERY]},
        ONE_QUOTE,
        FINISH,
    ]
    outcome = await scenarios.purchase(client=model.client(), model="test-model",
                                       hooks=vault_hooks(), tools=[shipping_status])
    assert outcome.success, (outcome.detail, model.unanswered)
    [status] = [r["content"] for req in model.requests for r in req["results"]
                if "tracking" in r["content"]]
    assert status.count("[secret]") >= len(forms)
    assert "&token=abc" in status  # ordinary words stay
    sent = "\n".join(_strings(model.bodies))
    sdk_log = "\n".join(r.getMessage() for r in caplog.records
                        if r.name.startswith(("anthropic", "openai")))
    if model.provider == "anthropic":  # its SDK logs each request, body included
        assert "Request options" in sdk_log and "shipping_status" in sdk_log
    for name, form in {**forms, "as is": VAULT}.items():
        assert form not in sent, name
        assert form not in caplog.text, name


def _strings(value: object) -> list[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []
