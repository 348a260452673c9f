"""Each provider against a real local server that speaks its wire format.

The agent's logic is written once; what each provider must get right is the
translation, and the ways its API fails. So every test here runs for both
Anthropic's Messages API and OpenAI-compatible Chat Completions, through the
providers' own SDKs (their transports, retries and timeouts), against the
scripted server of tests/peach/llm/fake.py on loopback: tool calls and results on the
wire, HTTP errors 429/500/529 retried by the SDK and then turned into a clean
stop or the fallback, timeouts, malformed tool arguments, text with no tool call.
"""

from __future__ import annotations

# anthropic and openai are imported in the tests that use them: at the top, every
# pytest-xdist worker paid their import (1.3 s of CPU) at collection.
import pytest

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from peach.llm import DEFAULT_MODEL, PROVIDERS, LLMAgent, LLMError
from peach.llm._openai import OpenAIModel
from samples.llm import scenarios
from syncserver import SyncServer
from syncserver.serving import free_port
from tests.conftest import PROTOCOLS
from tests.peach.llm.fake import FakeModel, load

BOTH = pytest.mark.parametrize("provider", PROVIDERS)
START = {"prompt_has": ["You are in no enactment yet"]}
ASK = [
    {"type": "tool_use", "name": "RFQ", "input": {"item": "pen", "budget": 10}},
    {"type": "tool_use", "name": "wait", "input": {"for_actions": ["Quote"]}},
]


def succeeded(outcome: scenarios.Outcome, model: FakeModel) -> None:
    assert outcome.success, (outcome.detail, model.unanswered)
    assert outcome.violations == 0


# The wire ------------------------------------------------------------------------------


@BOTH
async def test_tool_calls_and_their_results_on_the_wire(model, provider):
    """The model's calls are echoed back with one result per call, matched by id;
    errors are marked; the model must call a tool; usage is counted."""
    model.script("invalid")
    outcome = await scenarios.purchase(client=model.client(), model="test-model")
    succeeded(outcome, model)
    first, retry = model.bodies[0], model.bodies[1]
    assert first["model"] == "test-model" and first["max_tokens"] == 1024
    if provider == "anthropic":
        assert first["tool_choice"] == {"type": "any"}
        assert first["system"].startswith("You are buyer")
        [prompt, echo, results] = retry["messages"]
        assert prompt["role"] == "user" and isinstance(prompt["content"], str)
        calls = [b for b in echo["content"] if b["type"] == "tool_use"]
        assert [c["name"] for c in calls] == ["Accept", "RFQ"]
        assert [r["tool_use_id"] for r in results["content"]] == [c["id"] for c in calls]
        assert all(r["type"] == "tool_result" and r["is_error"] for r in results["content"])
    else:
        assert first["tool_choice"] == "required"
        assert all(t["type"] == "function" for t in first["tools"])
        [system, prompt, echo, *results] = retry["messages"]
        assert system["role"] == "system" and system["content"].startswith("You are buyer")
        assert prompt["role"] == "user"
        assert [c["function"]["name"] for c in echo["tool_calls"]] == ["Accept", "RFQ"]
        assert echo["tool_calls"][1]["function"]["arguments"] == (
            '{"item": "pen", "budget": 10, "price": 3}'
        )
        assert [r["tool_call_id"] for r in results] == [c["id"] for c in echo["tool_calls"]]
        assert all(r["role"] == "tool" and r["content"].startswith("error: ") for r in results)
    assert outcome.report.input_tokens == 1000 * outcome.report.llm_calls
    assert outcome.report.output_tokens == 50 * outcome.report.llm_calls


# The API failing ---------------------------------------------------------------------------


@BOTH
@pytest.mark.parametrize("status", [429, 500, 529])
async def test_errors_are_retried_by_the_sdk_then_the_run_goes_on(model, status):
    model.answers = [{"error": status}, {"error": status}, *load("purchase")]
    outcome = await scenarios.purchase(client=model.client(retries=2), model="test-model")
    succeeded(outcome, model)
    assert outcome.report.failed_calls == 0
    assert len(model.requests) == outcome.report.llm_calls + 2  # the two retried


@BOTH
@pytest.mark.parametrize("status", [429, 500, 529])
async def test_errors_after_the_retries_stop_the_run_cleanly(model, status):
    model.answers = [{"error": status, "reusable": True}]
    outcome = await scenarios.purchase(client=model.client(retries=1), model="test-model")
    report = outcome.report
    assert report.status == "error"
    assert report.reason.startswith(f"the model could not be reached: HTTP {status} (")
    assert "scripted failure" in report.reason
    assert report.reason.endswith("; no fallback policy was given")
    assert len(model.requests) == 2  # the SDK tried once more
    assert (report.llm_calls, report.failed_calls) == (0, 1)
    assert outcome.log == []


@BOTH
@pytest.mark.parametrize(
    ("failure", "says"),
    [({"error": 500}, "http 500"), ({"timeout": True}, "timed out")],
)
async def test_api_failure_uses_the_fallback_policy(model, failure, says):
    model.answers = [{"when": START, **failure}, *load("purchase")[1:]]
    reasons: list[str] = []

    async def fallback(agent: LLMAgent, reason: str) -> None:
        """A coded policy: ask for a pen, as the model would have."""
        reasons.append(reason)
        [offer] = [o for o in agent.offers() if o.feasible.name == "RFQ"]
        await agent.perform(offer.feasible, {"item": "pen", "budget": 10}, adapter=offer.adapter)

    outcome = await scenarios.purchase(
        client=model.client(), model="test-model", fallback=fallback, timeout=1.0
    )
    succeeded(outcome, model)
    assert len(reasons) == 1 and says in reasons[0].lower(), reasons
    kinds = [(d.number, d.kind) for d in outcome.report.decisions]
    assert kinds == [(1, "llm"), (1, "fallback"), (2, "llm"), (3, "llm")]
    assert outcome.report.decisions[0].outcomes[-1].startswith("model failed: ")
    assert (outcome.report.llm_calls, outcome.report.failed_calls) == (2, 1)


@BOTH
async def test_a_failing_fallback_stops_the_run_with_both_reasons(model):
    model.answers = [{"error": 500}]

    async def fallback(agent: LLMAgent, reason: str) -> None:
        raise RuntimeError("inventory service down")

    outcome = await scenarios.purchase(client=model.client(), model="test-model",
                                       fallback=fallback)
    assert outcome.report.status == "error"
    assert "could not be reached: HTTP 500" in outcome.report.reason
    assert "the fallback policy failed too: RuntimeError: inventory service down" in (
        outcome.report.reason
    )


@BOTH
async def test_a_server_that_is_not_there_stops_the_run_with_its_url(provider):
    """An Ollama not started, say: a connection error, named with the URL."""
    import anthropic
    import openai

    port = free_port()
    if provider == "openai":
        client = openai.AsyncOpenAI(api_key="k", base_url=f"http://127.0.0.1:{port}/v1",
                                    max_retries=0)
    else:
        client = anthropic.AsyncAnthropic(api_key="k", base_url=f"http://127.0.0.1:{port}",
                                          max_retries=0)
    outcome = await scenarios.purchase(client=client, model="test-model")
    assert outcome.report.status == "error"
    assert outcome.report.reason.startswith("the model could not be reached: APIConnectionError")
    assert f"(http://127.0.0.1:{port}/v1/" in outcome.report.reason


# What the model answers ------------------------------------------------------------------------


@BOTH
async def test_malformed_tool_arguments_are_a_tool_error_the_model_sees(model, provider):
    """Arguments that are not JSON (an OpenAI-compatible server's text) or not an
    object are answered as invalid calls; nothing is attempted; the model retries."""
    model.answers = [
        {"when": START, "content": [
            {"type": "tool_use", "name": "RFQ", "raw_input": '{"item": "pen", "budget": 10'},
            {"type": "tool_use", "name": "wait", "raw_input": '["Quote"]'},
        ]},
        {"when": {"prompt_has": ["RFQ was not called", "wait was not called"]}, "content": ASK},
        *load("purchase")[1:],
    ]
    outcome = await scenarios.purchase(client=model.client(), model="test-model")
    succeeded(outcome, model)
    results = model.requests[1]["results"]
    assert [r["error"] for r in results] == [True, True]
    rfq, wait = (r["content"] for r in results)
    if provider == "openai":
        assert rfq.startswith("RFQ was not called: its arguments are not valid JSON (")
        assert wait.startswith("wait was not called: its arguments are not a JSON object")
    else:  # the Messages API's input is JSON already: only its kind can be wrong
        assert rfq.startswith("RFQ was not called: its input is not a JSON object")
    assert [e.name for e in outcome.log].count("RFQ") == 1
    first = outcome.report.decisions[0]
    assert first.calls == 2 and first.tool_calls[0]["error"]


@BOTH
@pytest.mark.parametrize("text", ["I will ask the sellers for a pen.", ""])
async def test_an_answer_with_no_tool_call_is_answered_and_retried(model, provider, text):
    said = [{"type": "text", "text": text}] if text else []
    model.answers = [
        {"when": START, "content": said},
        {"when": {"prompt_has": ["Answer with tool calls only"]}, "content": ASK},
        *load("purchase")[1:],
    ]
    outcome = await scenarios.purchase(client=model.client(), model="test-model")
    succeeded(outcome, model)
    assert outcome.report.decisions[0].calls == 2
    retry = model.bodies[1]["messages"]
    roles = [m["role"] for m in retry]
    system = ["system"] if provider == "openai" else []
    # What the model said is kept in the conversation; an empty answer is not.
    assert roles == [*system, "user", *(["assistant"] if text else []), "user"]
    if text:
        echo = retry[-2]["content"]
        assert text in (echo if isinstance(echo, str) else echo[0]["text"])


# Clients and providers ---------------------------------------------------------------------------


@BOTH
async def test_the_agent_makes_its_client_from_the_environment(model, provider, monkeypatch):
    """No client given: the provider's SDK client is made from the environment; a
    local OpenAI-compatible server needs no key (a placeholder is sent)."""
    for variable in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY",
                     "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    model.script("purchase")
    if provider == "anthropic":
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
        base_url = model.url
    else:
        base_url = f"{model.url}/v1"
    outcome = await scenarios.purchase(provider=provider, base_url=base_url,
                                       model="test-model", api_retries=0)
    succeeded(outcome, model)
    credentials = {h.get("x-api-key") or h.get("authorization") for h in model.headers}
    expected = "sk-from-env" if provider == "anthropic" else "Bearer not-needed"
    assert all(c is not None and c.endswith(expected.split()[-1]) for c in credentials), (
        credentials
    )


@pytest.mark.parametrize(
    ("provider", "variable"), [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")]
)
async def test_no_api_key_is_a_clear_error(monkeypatch, provider, variable):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY",
                 "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    server = SyncServer.embedded([protocol], {"buyer": ["Buyer"]})
    async with server:
        adapter = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
        agent = LLMAgent([adapter], "buy a pen", provider=provider, model="some-model")
        with pytest.raises(LLMError, match=variable):
            await agent.run()


def test_the_client_names_the_provider_and_mismatches_are_refused():
    import anthropic
    import openai

    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    server = SyncServer.embedded([protocol], {"buyer": ["Buyer"]})
    adapter = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
    claude = anthropic.AsyncAnthropic(api_key="sk-test")
    gpt = openai.AsyncOpenAI(api_key="sk-test")
    default = LLMAgent([adapter], "goal", client=claude)
    assert (default.provider, default.model) == ("anthropic", DEFAULT_MODEL)
    assert LLMAgent([adapter], "goal", client=gpt, model="m").provider == "openai"
    assert LLMAgent([adapter], "goal", provider="openai", model="m").provider == "openai"
    with pytest.raises(ValueError, match="provider 'openai' needs a model"):
        LLMAgent([adapter], "goal", client=gpt)
    with pytest.raises(ValueError, match="the client is an anthropic client, but provider="):
        LLMAgent([adapter], "goal", client=claude, provider="openai", model="m")
    with pytest.raises(ValueError, match="use one of anthropic, openai"):
        LLMAgent([adapter], "goal", provider="gemini", model="m")


def test_openai_itself_gets_max_completion_tokens_and_local_servers_max_tokens():
    """OpenAI's reasoning models refuse max_tokens; the compatible servers take it."""
    import openai

    hosted = OpenAIModel(openai.AsyncOpenAI(api_key="sk-test"), "m")
    local = OpenAIModel(
        openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:11434/v1"), "m"
    )
    assert (hosted._limit, local._limit) == ("max_completion_tokens", "max_tokens")
